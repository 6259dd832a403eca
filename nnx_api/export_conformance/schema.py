"""The record schema (``nnx.export-conformance/1``): what a record must hold, and what it may claim.

A record is refused (``ConformanceError``, every problem named at once) when it is not exactly
what a run of a profile writes: a missing or unknown key (in the record, its stages, input cases,
artifacts, ``runtime``, ``exporter`` and ``opset``), anything but strict JSON, an unknown status or
failure class, a failure in a stage that cannot give it, a stage that ran after one that did not
pass, a ``status`` / ``failure`` / ``level`` its stages contradict, an input case whose outcome,
failure, errors and detail no run gives, a passed stage its own evidence contradicts, a malformed
hash or an artifact path that leaves its directory, and settings no profile produces — the record's
settings are rebuilt as a :class:`Profile` (checked as one is) and compared, as canonical text, with
the tested profile of that name or with the rebuilt profile itself.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from nnx_api.export_conformance.profiles import (
    CASE_SPEC,
    FORMAT,
    MAX_DIM,
    MAX_ELEMENTS,
    MODEL_FILE,
    PARITY_RANK,
    STAGE_FAILURES,
    STAGES,
    STATUSES,
    TESTED,
    ConformanceError,
    Profile,
    canonical_model,
    finite,
    profile_settings,
    settings_text,
)

KEYS = frozenset({"format", "profile", "status", "failure", "level", "source", "config", "exporter", "opset",
                  "artifacts", "versions", "runtime", "dtype", "input_cases", "tolerances", "model_state", "stages"})
"""The keys of a record."""
CASE_KEYS = frozenset({*CASE_SPEC, "outcome", "passed", "failure", "max_abs_error", "max_rel_error", "detail"})
"""The keys of an input case."""
OUTCOMES: Mapping[str, Mapping[str, str | None]] = {
    "match": {"match": None}, "mismatch": {"match": "mismatch"},
    "rejected": {"match": "input-contract", "rejected": None}, "accepted": {"rejected": "input-contract"},
    "error": {"match": "runtime-error", "rejected": "runtime-error"},
}
"""Each outcome a run of a case gives → for each expectation it can meet, the failure it names (None: passed)."""
SESSION = {"intra_op_num_threads": 1, "inter_op_num_threads": 1, "graph_optimization_level": "ORT_ENABLE_ALL"}
"""The ONNX Runtime session options every profile runs with (one thread: repeatable sums)."""
ROLES = ("model", "external-data", "sidecar")
"""What an artifact file is: the graph, a file of its external tensors, or anything else the exporter wrote."""


def blank(case: Mapping[str, Any]) -> dict[str, Any]:
    """An input case before parity ran: what it is, and no outcome."""
    return {**{key: case[key] for key in CASE_SPEC}, "outcome": None, "passed": False, "failure": None,
            "max_abs_error": None, "max_rel_error": None, "detail": None}


def relative(path: Any) -> str:
    """``path`` as a normal ``/``-separated path inside an artifact directory, or a refusal."""
    if not isinstance(path, str) or not path or "\\" in path or path.startswith("/"):
        raise ConformanceError(f"an artifact path is a relative '/'-separated path, got {path!r}")
    normal = posixpath.normpath(path)
    if normal in (".", "..") or normal.startswith("../") or ":" in normal:
        raise ConformanceError(f"artifact path {path!r} leaves its directory")
    return normal


def record_profile(record: Mapping[str, Any]) -> Profile:
    """The profile a record says it ran, rebuilt from its settings (and checked as a profile is)."""
    try:
        options, runtime = record["exporter"]["options"], record["runtime"]
        return Profile(
            name=record["profile"], exporter=options["exporter"], opset_version=options["opset_version"],
            export_batch=options["export_batch"], dynamic_batch=options["dynamic_batch"],
            batches=tuple(case["shape"][0] for case in record["input_cases"] if case.get("expect") == "match"),
            rtol=record["tolerances"]["rtol"], atol=record["tolerances"]["atol"], runtime=runtime["name"],
            provider=runtime["provider"], dtype=record["dtype"],
            model={k: v for k, v in record["config"].items() if k != "weights_sha256"},
        )
    except ConformanceError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as error:
        raise ConformanceError(f"the record's settings are not a profile ({type(error).__name__}: {error})") from error


def record_settings(record: Mapping[str, Any]) -> str:
    """The canonical settings a record states (as :func:`profile_settings` writes a profile's), or
    the reason it states none (which matches no profile)."""
    try:
        return settings_text(
            tolerances={key: float(record["tolerances"][key]) for key in ("rtol", "atol")},
            cases=[{key: case.get(key) for key in CASE_SPEC} for case in record["input_cases"]],
            runtime=[record["runtime"]["name"], record["runtime"]["provider"], record["dtype"]],
            options=record["exporter"]["options"],
            model=canonical_model({k: v for k, v in record["config"].items() if k != "weights_sha256"}),
            directory=record["artifacts"]["directory"],
        )
    except (ConformanceError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        return f"no settings: {type(error).__name__}: {error}"


def validate_record(record: Any) -> None:
    """Refuse (``ConformanceError``) a record that is not exactly what a run of a profile writes
    (the module docstring lists the checks); return None for one that is."""
    if not isinstance(record, Mapping):
        raise ConformanceError(f"a conformance record is a mapping, got {type(record).__name__}")
    missing = sorted(KEYS - set(record))
    if missing:
        raise ConformanceError(f"the record lacks {missing}")
    stages = record["stages"]
    if not isinstance(stages, Mapping) or set(stages) != set(STAGES):
        raise ConformanceError(f"stages must be exactly {list(STAGES)}, got {stages!r}")
    problems: list[str] = []
    try:
        if json.loads(json.dumps(record, sort_keys=True, allow_nan=False)) != record:
            problems.append("a record is strict JSON: it does not survive a JSON round trip unchanged")
    except (TypeError, ValueError, RecursionError) as error:
        problems.append(f"a record is strict JSON ({type(error).__name__}: {error})")
    if set(record) - KEYS:
        problems.append(f"unknown keys {sorted(set(record) - KEYS)}")
    if record["format"] != FORMAT:
        problems.append(f"format {record['format']!r} is not {FORMAT!r}")
    problems += _stage_problems(record, stages)
    problems += _case_problems(record, stages)
    problems += _state_problems(record, stages)
    problems += _artifact_problems(record, stages)
    problems += _settings_problems(record)
    if problems:
        raise ConformanceError("malformed conformance record: " + "; ".join(problems))


def _status(stages: Mapping[str, Any], name: str) -> Any:
    stage = stages[name]
    return stage.get("status") if isinstance(stage, Mapping) else None


def _stage_problems(record: Mapping[str, Any], stages: Mapping[str, Any]) -> list[str]:
    problems, halted, first = [], False, None
    for name in STAGES:
        stage = stages[name]
        if not isinstance(stage, Mapping) or set(stage) != {"status", "failure", "detail"}:
            problems.append(f"stage {name!r} must hold status, failure and detail")
            halted = True
            continue
        status, failure = stage["status"], stage["failure"]
        if status not in STATUSES:
            problems.append(f"stage {name!r} has status {status!r}, not one of {STATUSES}")
        if status == "failed" and failure not in STAGE_FAILURES[name]:
            problems.append(f"stage {name!r} failed with {failure!r}, not one of {STAGE_FAILURES[name]}")
        if status != "failed" and failure is not None:
            problems.append(f"stage {name!r} is {status!r} yet names failure {failure!r}")
        if halted and status != "not_run":
            problems.append(f"stage {name!r} ran after an earlier stage did not pass")
        if status == "failed" and first is None:
            first = failure
        halted = halted or status != "passed"
    status = "passed" if all(_status(stages, name) == "passed" for name in STAGES) else "failed"
    if record["status"] != status:
        problems.append(f"status {record['status']!r} contradicts the stages ({status!r})")
    if record["failure"] != first:
        problems.append(f"failure {record['failure']!r} is not the first failing stage's ({first!r})")
    level = ("executed" if _status(stages, "parity") == "passed" else
             "structural" if _status(stages, "check") == "passed" else "none")
    if record["level"] != level:
        problems.append(f"level {record['level']!r} contradicts the stages ({level!r})")
    return problems


def _shape_ok(case: Mapping[str, Any]) -> bool:
    shape, seed = case["shape"], case["seed"]
    return (isinstance(case["name"], str) and isinstance(seed, int) and not isinstance(seed, bool)
            and 0 <= seed < 2**63 and isinstance(shape, list) and len(shape) == 2
            and all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= MAX_DIM + 1 for d in shape)
            and shape[0] * shape[1] <= MAX_ELEMENTS)


def _case_problems(record: Mapping[str, Any], stages: Mapping[str, Any]) -> list[str]:
    problems, cases = [], record["input_cases"]
    if not isinstance(cases, list) or not cases or not all(isinstance(case, Mapping) for case in cases):
        return ["input_cases must be a non-empty list of cases"]
    if not any(case.get("expect") == "match" for case in cases):
        problems.append("input_cases need at least one valid case to compare")
    if any(case.get("expect") not in ("match", "rejected") for case in cases):
        problems.append("every input case expects 'match' or 'rejected'")
    for case in cases:
        if set(case) != CASE_KEYS:
            problems.append(f"input case {case.get('name')!r} must hold exactly {sorted(CASE_KEYS)}")
        elif not _shape_ok(case):
            problems.append(f"input case {case.get('name')!r} has a malformed name, seed or shape")
        elif not (case["detail"] is None or isinstance(case["detail"], str)) or not all(
                case[key] is None or (finite(case[key]) and case[key] >= 0) for key in ("max_abs_error", "max_rel_error")):
            problems.append(f"input case {case['name']!r} has a malformed detail or error")
    parity = _status(stages, "parity")
    if parity not in ("passed", "failed"):
        if any(set(case) == CASE_KEYS and dict(case) != blank(case) for case in cases):
            problems.append("parity did not run, so no input case may carry an outcome")
    elif parity == "failed":
        named = [case.get("failure") for case in cases if case.get("passed") is False]
        ranked = next((kind for kind in PARITY_RANK if kind in named), None)
        if ranked is None or stages["parity"].get("failure") != ranked:
            problems.append(f"parity failed with {stages['parity'].get('failure')!r}; its failing cases name {ranked!r}")
    for case in cases:
        problems += _outcome_problems(case, parity)
    if parity == "passed" and not all(
            case.get("passed") is True and case.get("outcome") == ("match" if case.get("expect") == "match" else "rejected")
            for case in cases):
        problems.append("parity passed but an input case did not")
    return problems


def _outcome_problems(case: Mapping[str, Any], parity: Any) -> list[str]:
    """Once parity ran, a case's outcome, the failure it names, ``passed``, its errors and its detail agree."""
    name = case.get("name")
    if type(case.get("passed")) is not bool:
        return [f"input case {name!r} must say passed as a bool"]
    if parity not in ("passed", "failed"):
        return []
    outcome, failure, expect = case.get("outcome"), case.get("failure"), case.get("expect")
    given = OUTCOMES.get(outcome) if isinstance(outcome, str) else None
    if given is None or not isinstance(expect, str) or expect not in given:
        return [f"input case {name!r} has an outcome {outcome!r} no run of it gives"]
    if failure != given[expect] or case["passed"] is not (given[expect] is None):
        return [f"input case {name!r} {outcome!r} names failure {failure!r} and passed={case['passed']}, "
                f"not {given[expect]!r} and passed={given[expect] is None}"]
    errors = [case.get("max_abs_error"), case.get("max_rel_error")]
    compared = all(finite(e) for e in errors) and case.get("detail") is None and outcome in ("match", "mismatch")
    described = errors == [None, None] and isinstance(case.get("detail"), str) and outcome != "match"
    return [] if compared or described else [f"input case {name!r} {outcome!r} carries the wrong errors or detail"]


def _state_problems(record: Mapping[str, Any], stages: Mapping[str, Any]) -> list[str]:
    state, export = record["model_state"], _status(stages, "export")
    kept = isinstance(state, Mapping) and set(state) == {"parameters", "gradients", "modes"}
    changed_class = isinstance(stages["export"], Mapping) and stages["export"].get("failure") == "state-changed"
    if kept and not all(type(value) is bool for value in state.values()):
        return [f"model_state holds bools, got {state!r}"]
    if export == "passed" and not (kept and all(state.values())):
        return [f"the export passed but the model state was not kept: {state!r}"]
    if export == "failed" and changed_class and (not kept or all(state.values())):
        return [f"the export changed the model state, but model_state says otherwise: {state!r}"]
    if export == "failed" and not changed_class and kept and not all(state.values()):
        return [f"the model state changed, so the export failed as state-changed: {state!r}"]
    if export not in ("passed", "failed") and state is not None:
        return ["the export did not run, so there is no model_state"]
    if state is not None and not kept:
        return [f"model_state is None or holds parameters, gradients and modes, got {state!r}"]
    return []


def _artifact_problems(record: Mapping[str, Any], stages: Mapping[str, Any]) -> list[str]:
    problems, artifacts = [], record["artifacts"]
    files = artifacts.get("files") if isinstance(artifacts, Mapping) else None
    if not isinstance(artifacts, Mapping) or set(artifacts) != {"directory", "model", "files"} or not isinstance(files, list):
        problems.append("artifacts must hold directory, model and a list of files")
        files = []
    paths = []
    for entry in files:
        if not isinstance(entry, Mapping) or set(entry) != {"path", "role", "bytes", "sha256"}:
            problems.append(f"artifact entry {entry!r} must hold path, role, bytes and sha256")
            continue
        try:
            paths.append(relative(entry["path"]))
        except ConformanceError as error:
            problems.append(str(error))
        digest = entry["sha256"]
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            problems.append(f"artifact {entry['path']!r} has a malformed sha256")
        if entry["role"] not in ROLES:
            problems.append(f"artifact {entry['path']!r} has the unknown role {entry['role']!r}")
        if isinstance(entry["bytes"], bool) or not isinstance(entry["bytes"], int) or entry["bytes"] < 0:
            problems.append(f"artifact {entry['path']!r} has a malformed size {entry['bytes']!r}")
    if len(paths) != len(set(paths)):
        problems.append("artifacts list a file more than once")
    if isinstance(artifacts, Mapping) and artifacts.get("model") != MODEL_FILE:
        problems.append(f"artifacts.model must be {MODEL_FILE!r}, the file a profile loads")
    if _status(stages, "check") == "passed":
        models = [entry for entry in files if isinstance(entry, Mapping) and entry.get("role") == "model"]
        if len(models) != 1 or models[0].get("path") != (artifacts.get("model") if isinstance(artifacts, Mapping) else None):
            problems.append("a checked record lists its model file, once, as artifacts.model")
        opset = record["opset"].get("model") if isinstance(record["opset"], Mapping) else None
        if not isinstance(opset, Mapping) or not opset:
            problems.append("a checked record carries the model's opset")
    return problems


def _settings_problems(record: Mapping[str, Any]) -> list[str]:
    problems, tolerances = [], record["tolerances"]
    if not isinstance(tolerances, Mapping) or set(tolerances) != {"rtol", "atol"}:
        problems.append("tolerances must hold rtol and atol")
    elif not all(finite(value) and value >= 0 for value in tolerances.values()):
        problems.append(f"tolerances must be finite and non-negative, got {dict(tolerances)}")
    if not isinstance(record["config"], Mapping) or "weights_sha256" not in record["config"]:
        problems.append("config must carry weights_sha256")
    for key in ("source", "versions"):
        if not isinstance(record[key], Mapping):
            problems.append(f"{key} must be a mapping")
    for key, keys in (("runtime", {"name", "version", "provider", "session"}), ("exporter", {"name", "options"}),
                      ("opset", {"requested", "model"})):
        if not isinstance(record[key], Mapping) or set(record[key]) != keys:
            problems.append(f"{key} must hold exactly {sorted(keys)}")
    try:
        claimed = record_profile(record)
    except ConformanceError as error:
        problems.append(str(error))
    else:
        if record_settings(record) != TESTED.get(claimed.name, profile_settings(claimed)):
            problems.append(f"{record['profile']!r} " + ("names a tested profile, but its settings differ from it"
                                                         if claimed.name in TESTED else "states settings no profile produces"))
    runtime, exporter, opset = record["runtime"], record["exporter"], record["opset"]
    if not isinstance(runtime, Mapping) or runtime.get("session") != SESSION:
        problems.append("runtime must carry the session options this package runs with")
    options = exporter.get("options") if isinstance(exporter, Mapping) else None
    if not isinstance(options, Mapping) or exporter.get("name") != options.get("exporter"):
        problems.append("exporter.name must be the exporter its options name")
    elif not isinstance(opset, Mapping) or type(opset.get("requested")) is not int \
            or opset["requested"] != options.get("opset_version"):
        problems.append("opset.requested must be the exporter options' opset_version")
    return problems
