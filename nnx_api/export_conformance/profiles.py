"""Conformance profiles: what one parity claim is made of, checked before anything runs.

A :class:`Profile` names one model (a ``feed_fwd`` net and the seed of its weights), one exporter
configuration, the runtime, provider and dtype, the input cases and the tolerances. Everything it
declares is checked when it is made, and again when it runs (its ``model`` mapping can be changed
in place): only what this package actually runs may be declared, and only a small model — a
profile is a proof, not a benchmark. ``PROFILES`` are the tested ones; their settings are fixed at
import as canonical JSON text (``TESTED``), so a profile that reuses a tested name with other
settings, or a tested profile changed in place, is refused rather than reported under that name.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from nnx_core.errors import NNxError
from nnx_api.config.enums import Activations, Devices, Losses, Nets
from nnx_api.config.params import NNModelParams, NNParams
from nnx_api.model import NNModel

FORMAT = "nnx.export-conformance/1"
"""The record format this package writes and reads."""
STAGES = ("dependencies", "export", "check", "load", "parity")
"""The stages of a profile, in the order they run: a stage runs only after every earlier one passed."""
STATUSES = ("passed", "failed", "not_run")
"""What a stage's ``status`` can be."""
LEVELS = ("executed", "structural", "none")
"""How far a record proves the export: the runtime ran it, only the checker passed it, or neither."""
EXIT_CODES: Mapping[str, int] = {
    "missing-dependency": 10, "export-error": 11, "state-changed": 12, "checker-error": 13, "hash-mismatch": 14,
    "load-error": 15, "mismatch": 16, "input-contract": 17, "runtime-error": 18,
}
"""Each failure class and the exit code that reports it (0: passed; 1 and 2 stay an error and a usage error)."""
FAILURES = tuple(EXIT_CODES)
"""Every failure class a record can name."""
STAGE_FAILURES: Mapping[str, tuple[str, ...]] = {
    "dependencies": ("missing-dependency",), "export": ("export-error", "state-changed"),
    "check": ("checker-error",), "load": ("hash-mismatch", "load-error"),
    "parity": ("mismatch", "input-contract", "runtime-error"),
}
"""The failure classes each stage can fail with."""
PARITY_RANK = ("runtime-error", "mismatch", "input-contract")
"""A failed parity stage names the first of these that one of its failing cases names."""
MODEL_FILE = "model.onnx"
"""The graph file of every profile, inside its artifact directory."""
CASE_SPEC = ("name", "shape", "seed", "expect")
"""The keys that say what an input case is (the others say how it ran)."""
MAX_DIM = 1 << 16
"""The widest layer and the largest batch a profile may declare."""
MAX_LAYERS = 64
"""The most hidden layers a profile's model may have."""
MAX_ELEMENTS = 1 << 24
"""The most weights a profile's model may hold, and the most values one batch may hold in any layer."""
MAX_CASES = 64
"""The most valid batches a profile may list."""
PLAIN = re.compile(r"[A-Za-z0-9._-]+")
"""A name that is one plain directory name."""


class ConformanceError(NNxError, ValueError):
    """A profile or record this package does not run (malformed, too large, or a tested name with
    other settings), or artifacts that differ from their record."""


MODEL: Mapping[str, Any] = {
    "net": "feed_fwd", "input_dim": 4, "hidden_dims": [8], "output_dim": 2, "activation": "relu", "dropout": 0.0,
    "weights": {"generator": "torch.Generator", "seed": 0, "distribution": "normal", "std": 0.5},
}
"""The model of the tested profiles: a 4-8-2 ``FeedFwdNN`` (ReLU, no dropout) whose weights are
drawn from ``N(0, 0.5²)`` by a ``torch.Generator`` seeded 0."""


def finite(value: Any) -> bool:
    """A real number (not a bool) that is finite; an int too large for a float is not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def count(value: Any, top: int = MAX_DIM) -> bool:
    """An int (not a bool) in ``1..top``."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top


@dataclass(frozen=True)
class Profile:
    """One conformance profile. ``exporter`` is ``"torchscript"`` (torch's TorchScript-based
    exporter) or ``"dynamo"`` (the ``torch.export``-based one); the net is exported at
    ``export_batch`` rows (a dynamic batch axis unless ``dynamic_batch=False``), then run at each of
    ``batches`` and once at a feature width one too wide, which the runtime must refuse. Made, it
    is checked (``ConformanceError``); ``model`` is kept as a canonical copy."""

    name: str
    exporter: str
    opset_version: int = 17
    export_batch: int = 2
    dynamic_batch: bool = True
    batches: tuple[int, ...] = (1, 2, 3, 7)
    rtol: float = 1e-4
    atol: float = 1e-5
    runtime: str = "onnxruntime"
    provider: str = "CPUExecutionProvider"
    dtype: str = "float32"
    model: Mapping[str, Any] = field(default_factory=lambda: copy.deepcopy(dict(MODEL)))

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not PLAIN.fullmatch(self.name) or self.name in (".", ".."):
            raise ConformanceError(f"a profile's name is a plain directory name (letters, digits, '.', '_', '-'), "
                                   f"got {self.name!r}")
        if self.exporter not in ("torchscript", "dynamo"):
            raise ConformanceError(f"exporter is 'torchscript' or 'dynamo', got {self.exporter!r}")
        if self.runtime != "onnxruntime" or self.dtype != "float32":
            raise ConformanceError(f"profiles run FP32 inputs in ONNX Runtime (what a record states is what ran): "
                                   f"got runtime={self.runtime!r}, dtype={self.dtype!r}")
        try:
            batches = tuple(self.batches)
        except TypeError:
            batches = ()
        if not 1 <= len(batches) <= MAX_CASES or not all(count(b) for b in batches):
            raise ConformanceError(f"batches lists 1..{MAX_CASES} batch sizes, each in 1..{MAX_DIM}; got {self.batches!r}")
        object.__setattr__(self, "batches", batches)
        for name in ("rtol", "atol"):
            if not finite(getattr(self, name)) or getattr(self, name) < 0:
                raise ConformanceError(f"{name} must be finite and non-negative, got {getattr(self, name)!r}")
        for name in ("export_batch", "opset_version"):
            if not count(getattr(self, name)):
                raise ConformanceError(f"{name} must be an integer in 1..{MAX_DIM}, got {getattr(self, name)!r}")
        if not isinstance(self.dynamic_batch, bool):
            raise ConformanceError(f"dynamic_batch must be a bool, got {self.dynamic_batch!r}")
        if not isinstance(self.provider, str) or not self.provider:
            raise ConformanceError(f"provider names an ONNX Runtime execution provider, got {self.provider!r}")
        check_model(self.model)
        object.__setattr__(self, "model", canonical_model(self.model))
        check_size(batches, self.export_batch, self.model)

    @property
    def requires(self) -> tuple[str, ...]:
        """The modules the profile imports: onnx and onnxruntime, and onnxscript for ``dynamo``."""
        return ("onnx", "onnxruntime", "onnxscript") if self.exporter == "dynamo" else ("onnx", "onnxruntime")

    def options(self) -> dict[str, Any]:
        """The exporter options, as a record states them."""
        return {"exporter": self.exporter, "dynamo": self.exporter == "dynamo", "opset_version": self.opset_version,
                "dynamic_batch": self.dynamic_batch, "export_batch": self.export_batch,
                "input_names": ["features"], "output_names": ["logits"]}

    def cases(self) -> list[dict[str, Any]]:
        """The input cases: each batch (seed ``1000 + rows``), expected to match the native model,
        then three rows one feature too wide (seed 2000), expected to be rejected."""
        width = int(self.model["input_dim"])
        cases = [{"name": f"batch-{b}", "shape": [b, width], "seed": 1000 + b, "expect": "match"} for b in self.batches]
        return [*cases, {"name": f"width-{width + 1}", "shape": [3, width + 1], "seed": 2000, "expect": "rejected"}]


def check_model(config: Any) -> None:
    """Refuse a model config that :func:`build_model` cannot build exactly, or a model too large."""
    if not isinstance(config, Mapping) or set(config) != set(MODEL):
        raise ConformanceError(f"a profile's model holds exactly {sorted(MODEL)}, got {config!r}")
    problems = []
    if config["net"] != "feed_fwd":
        problems.append(f"net {config['net']!r} (profiles export feed_fwd)")
    if not (count(config["input_dim"]) and count(config["output_dim"])):
        problems.append(f"input_dim and output_dim are integers in 1..{MAX_DIM}")
    hidden = config["hidden_dims"]
    if not isinstance(hidden, (list, tuple)) or not all(count(h) for h in hidden):
        problems.append(f"hidden_dims are integers in 1..{MAX_DIM}")
    if not isinstance(config["activation"], str) or config["activation"] not in {a.value for a in Activations}:
        problems.append(f"activation {config['activation']!r} is not one of {[a.value for a in Activations]}")
    if not finite(config["dropout"]) or not 0 <= config["dropout"] < 1:
        problems.append(f"dropout {config['dropout']!r} is not in [0, 1)")
    weights, fixed = config["weights"], ("generator", "distribution")
    if not (isinstance(weights, Mapping) and set(weights) == set(MODEL["weights"])
            and all(weights[k] == MODEL["weights"][k] for k in fixed)
            and isinstance(weights["seed"], int) and not isinstance(weights["seed"], bool) and 0 <= weights["seed"] < 2**63
            and finite(weights["std"]) and weights["std"] > 0):
        problems.append(f"weights {weights!r} (a seed in 0..2**63-1 and a finite std > 0 for torch.Generator normal)")
    if not problems:
        widths = [config["input_dim"], *hidden, config["output_dim"]]
        if len(hidden) > MAX_LAYERS or sum(a * b + b for a, b in zip(widths[:-1], widths[1:], strict=True)) > MAX_ELEMENTS:
            problems.append(f"the model has more than {MAX_LAYERS} hidden layers or {MAX_ELEMENTS} weights")
    if problems:
        raise ConformanceError("malformed model config: " + "; ".join(problems))


def check_size(batches: Sequence[int], export_batch: int, model: Mapping[str, Any]) -> None:
    """Refuse a profile whose largest batch, through its widest layer, holds more than ``MAX_ELEMENTS`` values."""
    rows = max((*batches, export_batch))
    widest = max(model["input_dim"], *model["hidden_dims"], model["output_dim"])
    if rows * widest > MAX_ELEMENTS:
        raise ConformanceError(f"a batch of {rows} through a layer of {widest} units holds more than {MAX_ELEMENTS} "
                               "values: a profile is a small model")


def canonical_model(model: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a model config whose real fields are floats and whose ``hidden_dims`` is a list
    (``dropout`` 0 and 0.0 are one setting)."""
    out = copy.deepcopy(dict(model))
    out["dropout"] = float(out["dropout"])
    out["weights"] = {**out["weights"], "std": float(out["weights"]["std"])}
    out["hidden_dims"] = list(out["hidden_dims"])
    return out


def settings_text(**settings: Any) -> str:
    """Canonical JSON of everything a profile's name stands for (sorted keys, strict)."""
    try:
        return json.dumps(settings, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ConformanceError(f"the profile's settings are not strict JSON: {error}") from error


def profile_settings(profile: Profile) -> str:
    """The canonical settings of ``profile``, as :func:`settings_text` writes them."""
    return settings_text(
        tolerances={"rtol": float(profile.rtol), "atol": float(profile.atol)},
        cases=[{k: case[k] for k in CASE_SPEC} for case in profile.cases()],
        runtime=[profile.runtime, profile.provider, profile.dtype], options=profile.options(),
        model=canonical_model(profile.model), directory=profile.name,
    )


PROFILES: Mapping[str, Profile] = {
    "feedfwd-fp32-torchscript": Profile("feedfwd-fp32-torchscript", "torchscript"),
    "feedfwd-fp32-dynamo": Profile("feedfwd-fp32-dynamo", "dynamo"),
}
"""The tested profiles: ``MODEL`` exported at batch 2 with a dynamic batch axis, run on ONNX
Runtime's CPU provider at batches 1, 2, 3 and 7, under each of torch's two ONNX exporters."""
TESTED = {name: profile_settings(profile) for name, profile in PROFILES.items()}
"""What each tested name stands for, fixed at import."""


def build_model(config: Mapping[str, Any] = MODEL) -> NNModel:
    """The ``NNModel`` (CPU, FP32, cross-entropy) a model config describes, its weights drawn from
    the config's own generator: the caller's global random streams are left as they were."""
    if config.get("net") != "feed_fwd":
        raise ConformanceError(f"conformance profiles export a feed_fwd net, got {config.get('net')!r}")
    with torch.random.fork_rng(devices=[]):
        model = NNModel(
            net_params=NNParams(input_dim=int(config["input_dim"]), output_dim=int(config["output_dim"]),
                                hidden_dims=[int(h) for h in config["hidden_dims"]],
                                dropout_prob=float(config["dropout"]), activation=Activations(config["activation"])),
            params=NNModelParams(net=Nets.FEED_FWD, device=Devices.CPU, loss=Losses.CROSS_ENTROPY),
        )
    generator = torch.Generator().manual_seed(int(config["weights"]["seed"]))
    std = float(config["weights"]["std"])
    with torch.no_grad():
        for parameter in model.net.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return model


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-256 over a module's state dict: each entry's name, dtype, shape and bytes, in order."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        array = tensor.detach().cpu().contiguous().numpy()
        digest.update(f"{name}|{array.dtype}|{list(array.shape)}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def case_input(case: Mapping[str, Any]) -> torch.Tensor:
    """The input of a case: ``shape`` standard-normal values from a generator seeded ``seed``."""
    return torch.randn(*case["shape"], generator=torch.Generator().manual_seed(int(case["seed"])))
