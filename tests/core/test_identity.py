"""Run identity: canonical JSON → SHA-256 (32 hex), stable across processes and hash seeds."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from nnx_core.errors import InvalidRunIdError
from nnx_core.identity import canonical_json, run_id, validate_run_id, validate_tag

# The documented test vector (docs/concepts.md, "Run identity").
VECTOR = {"model": {"device": "cpu", "loss": "cross_entropy", "net": "feed_fwd"},
          "net": {"activation": "relu", "dropout_prob": 0.1, "hidden_dims": [32, 16], "input_dim": 8, "output_dim": 3},
          "train": {"n_epochs": 10, "optim": {"max_lr": 0.01, "momentum": [0.9, 0.999], "name": "adam",
                                             "weight_decay": 5e-05},
                    "scheduler": {"cooldown": 1, "factor": 0.5, "min_lr": 1e-07, "patience": 3, "threshold": 0.001}}}
VECTOR_ID = "07ac368d1d1c921296512f05023190b4"


def test_canonical_json_sorts_keys_and_keeps_exact_floats():
    assert canonical_json({"b": 0.1, "a": [1, 2e-7]}) == '{"a":[1,2e-07],"b":0.1}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_documented_vector():
    assert run_id(VECTOR) == VECTOR_ID
    assert len(VECTOR_ID) == 32


@pytest.mark.parametrize("seed", ["0", "1", "12345"])
def test_id_is_stable_across_processes_and_hash_seeds(seed):
    code = "import json,sys; from nnx_core.identity import run_id; print(run_id(json.loads(sys.stdin.read())))"
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(VECTOR), capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": seed}, timeout=60, check=True)
    assert out.stdout.strip() == VECTOR_ID


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a\\b", "x*", "a?b", "[a]", "a\x00b", ".hidden", 3, None])
def test_unsafe_run_ids_are_refused(bad):
    with pytest.raises(InvalidRunIdError):
        validate_run_id(bad)


@pytest.mark.parametrize("bad", ["", "../last", "a/b", "-x", "x..y", "a b"])
def test_unsafe_tags_are_refused(bad):
    with pytest.raises(InvalidRunIdError):
        validate_tag(bad)


def test_canonical_json_is_utf8_text_not_ascii_escapes():
    # REFERENCE.md: "canonical sorted compact UTF-8 JSON": a non-ASCII character is written as itself
    assert canonical_json({"name": "café"}) == '{"name":"café"}'
    assert run_id({"name": "café"}) == hashlib.sha256('{"name":"café"}'.encode()).hexdigest()[:32]


def test_refusals_say_what_is_allowed():
    with pytest.raises(InvalidRunIdError, match="run id must be a non-empty string, got 3"):
        validate_run_id(3)
    with pytest.raises(InvalidRunIdError, match="use the id printed by `nnx runs list`$"):
        validate_run_id("a/b")
    with pytest.raises(InvalidRunIdError, match=r"starting with a letter or digit \(e\.g\. 'last', 'best', 'q1', 'epoch5'\)$"):
        validate_tag("-x")
