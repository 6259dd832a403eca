"""Executable ONNX export conformance profiles: a parity claim, run and recorded stage by stage.

``onnx.checker`` says an exported file is well formed, not what a runtime computes from it. A
profile (``profiles.py``) fixes everything a parity claim depends on; :func:`run_profile` runs it
through five stages, each with its own classified outcome (``EXIT_CODES``)::

    dependencies ─► export ─► check ─► load ─► parity

* **dependencies** — onnx and onnxruntime (and onnxscript for the dynamo exporter) import; one that
  does not is a ``missing-dependency`` failure, never a skip.
* **export** — ``NNModel.to_onnx`` (the product's one exporter) writes ``model.onnx`` into the
  profile's own directory, with the net in a mixed train / eval mode and holding gradients: its
  parameters, gradients and modes must be unchanged afterwards (``state-changed``), and any
  exporter error is an ``export-error``.
* **check** — ``onnx.checker.check_model(full_check=True)``; the opset, IR version and the
  input / output signature are recorded, and every file the exporter wrote is hashed (SHA-256).
* **load** — the hashes are verified before anything is loaded (``hash-mismatch``), then an ONNX
  Runtime session opens on the declared provider (``load-error``).
* **parity** — each valid batch must give the native model's raw logits within ``rtol`` / ``atol``
  (``mismatch``, non-finite logits included); an input one feature too wide must be refused by the
  runtime as an invalid argument (``input-contract``); any other runtime failure is a
  ``runtime-error``.

A record's ``level`` is ``"executed"`` when parity passed, ``"structural"`` when only the check did,
``"none"`` otherwise. :func:`execute` replays load and parity from a saved record and its artifacts;
:func:`validate_record` (``schema.py``) refuses a record no run writes. From a shell:
``python -m nnx_api.export_conformance --output conformance.json`` runs the tested profiles and
exits with the first failing profile's code. Nothing here imports onnx or onnxruntime until a
profile runs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import io
import json
import os
import platform
import posixpath
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any

import numpy as np
import torch

from nnx_api.export_conformance.profiles import (
    EXIT_CODES,
    FAILURES,
    FORMAT,
    LEVELS,
    MODEL,
    MODEL_FILE,
    PARITY_RANK,
    PLAIN,
    PROFILES,
    STAGES,
    TESTED,
    ConformanceError,
    Profile,
    build_model,
    canonical_model,
    case_input,
    check_model,
    check_size,
    profile_settings,
    weights_digest,
)
from nnx_api.export_conformance.schema import SESSION, blank, relative, validate_record

__all__ = [
    "EXIT_CODES", "FAILURES", "FORMAT", "LEVELS", "MODEL", "PROFILES", "STAGES", "ConformanceError", "Profile",
    "build_model", "execute", "exit_code", "main", "run_profile", "run_profiles", "save_report", "summary_lines",
    "validate_record", "verify_artifacts",
]
_profile_settings, _weights_digest = profile_settings, weights_digest  # the names NNx's own tests reach them by


# --- where the record says it ran ---------------------------------------------------------------------------------
def _import_problem(name: str) -> str | None:
    """Why ``name`` does not import (a broken install is a missing dependency too), or None."""
    if importlib.util.find_spec(name) is None:
        return f"{name}: not installed"
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - whatever stops the import is the dependency's problem
        return f"{name}: {_first_line(error)}"
    return None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _versions() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "nnx": _version("nnx"),
            "torch": torch.__version__, "numpy": np.__version__, "onnx": _version("onnx"),
            "onnxruntime": _version("onnxruntime"), "onnxscript": _version("onnxscript")}


def _source(revision: str | None) -> dict[str, Any]:
    """The source revision: the one given, else the git checkout this very file is tracked in
    (an installed copy inside some other repository names no revision)."""
    dirty, origin = None, "given"
    if revision is None:
        here, origin = os.path.dirname(os.path.abspath(__file__)), "unknown"

        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()

        try:
            mine = os.path.join(git("rev-parse", "--show-toplevel"), "nnx_api", "export_conformance", "__init__.py")
            if os.path.isfile(mine) and os.path.samefile(mine, __file__):
                revision, origin = git("rev-parse", "HEAD"), "git"
                dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        except (OSError, subprocess.SubprocessError):
            revision = None
    return {"revision": revision or None, "origin": origin, "dirty": dirty, "nnx_version": _version("nnx")}


# --- artifacts ----------------------------------------------------------------------------------------------------
def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tensors(graph: Any) -> Iterable[Any]:
    """Every tensor of a graph and its subgraphs: initializers and node attributes."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _tensors(sub)


def _files(directory: str) -> list[str]:
    """Every entry under ``directory`` (a symlinked folder is an entry, never followed), as sorted
    ``/``-separated relative paths."""
    found = []

    def fail(error: OSError) -> None:
        raise error

    for folder, folders, names in os.walk(directory, onerror=fail):
        linked = [name for name in folders if os.path.islink(os.path.join(folder, name))]
        found += [os.path.relpath(os.path.join(folder, name), directory).replace(os.sep, "/") for name in names + linked]
    return sorted(found)


def _manifest(directory: str) -> list[dict[str, Any]]:
    """Each file the exporter wrote: its path, role, size and SHA-256."""
    import onnx

    graph = onnx.load(os.path.join(directory, MODEL_FILE), load_external_data=False).graph
    external = {relative(entry.value) for tensor in _tensors(graph) if tensor.data_location == onnx.TensorProto.EXTERNAL
                for entry in tensor.external_data if entry.key == "location"}
    files = []
    for name in _files(directory):
        path = os.path.join(directory, *name.split("/"))
        if os.path.islink(path) or not os.path.isfile(path):
            raise ConformanceError(f"the exporter wrote {name!r}, which is not a regular file")
        role = "model" if name == MODEL_FILE else "external-data" if name in external else "sidecar"
        files.append({"path": name, "role": role, "bytes": os.path.getsize(path), "sha256": _sha256(path)})
    missing = sorted(external - {entry["path"] for entry in files})
    if missing:
        raise ConformanceError(f"the graph names external data {missing} that was not written")
    return files


def _artifact_dir(record: Mapping[str, Any], directory: str | os.PathLike[str]) -> str:
    name = record["artifacts"]["directory"]
    if not isinstance(name, str) or not PLAIN.fullmatch(name) or name in (".", ".."):
        raise ConformanceError(f"the artifact directory must be a plain name, got {name!r}")
    return os.path.join(os.fspath(directory), name)


def verify_artifacts(record: Mapping[str, Any], directory: str | os.PathLike[str]) -> None:
    """Refuse (``ConformanceError``) artifacts under ``directory/<record's artifacts.directory>``
    that differ from the record: a listed file missing, a symlink, another size or SHA-256
    (external tensors included), a file the record does not list, or one that cannot be read."""
    try:
        root = _artifact_dir(record, directory)
        if os.path.islink(root):
            raise ConformanceError(f"the artifact directory {root!r} is a symlink, not the profile's own folder")
        listed = record["artifacts"]["files"]
        names = {relative(entry["path"]) for entry in listed}
        problems = []
        for entry in listed:
            name = relative(entry["path"])
            path = os.path.join(root, *name.split("/"))
            if os.path.islink(path):
                problems.append(f"{name}: a symlink, not a written file")
            elif not os.path.isfile(path):
                problems.append(f"{name}: missing")
            elif os.path.getsize(path) != entry["bytes"] or _sha256(path) != entry["sha256"]:
                problems.append(f"{name}: hash mismatch (the record says sha256 {str(entry['sha256'])[:12]}…)")
        if os.path.isdir(root):
            problems += [f"{name}: not in the record" for name in _files(root) if name not in names]
    except OSError as error:
        raise ConformanceError(f"the artifacts cannot be read: {type(error).__name__}: {error}") from error
    except (KeyError, TypeError, AttributeError) as error:
        raise ConformanceError(f"the record or directory is malformed: {type(error).__name__}: {error}") from error
    if problems:
        raise ConformanceError("the artifacts do not match the record: " + "; ".join(problems))


# --- the stages ---------------------------------------------------------------------------------------------------
def _stage(status: str, failure: str | None = None, detail: Any = None) -> dict[str, Any]:
    return {"status": status, "failure": failure, "detail": detail}


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}"


def _state(net: torch.nn.Module) -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, bool]]]:
    return ({key: value.detach().clone() for key, value in net.state_dict().items()},
            {key: None if p.grad is None else p.grad.detach().clone() for key, p in net.named_parameters()},
            [(name, part.training) for name, part in net.named_modules()])


def _same(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Equal tensors (None for None), bit for bit; NaN stays NaN, so a NaN gradient is unchanged."""
    return before.keys() == after.keys() and all(
        (a is None and b is None) or (a is not None and b is not None and a.dtype == b.dtype and a.shape == b.shape
                                      and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
        for a, b in ((before[key], after[key]) for key in before))


def _export(profile: Profile, model: Any, root: str) -> tuple[dict[str, Any], dict[str, bool]]:
    """Export with the net in train mode but its first submodule in eval, holding gradients; then
    check that the parameters, gradients and modes are what they were."""
    net = model.net
    net.train()
    next(part for part in net.modules() if part is not net).eval()
    x = case_input({"shape": [profile.export_batch, int(profile.model["input_dim"])], "seed": 7})
    torch.nn.functional.cross_entropy(net(x), torch.zeros(profile.export_batch, dtype=torch.long)).backward()
    params, grads, modes = _state(net)
    options, printed, failed, seen = profile.options(), io.StringIO(), None, []
    try:
        with warnings.catch_warnings(record=True) as seen, contextlib.redirect_stdout(printed):
            warnings.simplefilter("always")
            model.to_onnx(os.path.join(root, MODEL_FILE), example_input=x, input_names=options["input_names"],
                          output_names=options["output_names"], dynamic_batch=profile.dynamic_batch,
                          opset_version=profile.opset_version, dynamo=options["dynamo"], check=False)
    except Exception as error:  # noqa: BLE001 - every exporter failure is a classified outcome
        failed = {"error": f"{type(error).__name__}: {error}", "log": printed.getvalue().strip().splitlines()[-5:]}
    caught = sorted({f"{w.category.__name__}: {(str(w.message).splitlines() or [''])[0][:200]}" for w in seen})
    after_params, after_grads, after_modes = _state(net)
    kept = {"parameters": _same(params, after_params), "gradients": _same(grads, after_grads), "modes": modes == after_modes}
    if not all(kept.values()):  # a changed model is said first, even when the exporter then raised
        changed = sorted(name for name, same in kept.items() if not same)
        return _stage("failed", "state-changed", {"changed": changed, "warnings": caught,
                                                  **({} if failed is None else {"export": failed})}), kept
    if failed is not None:
        return _stage("failed", "export-error", failed), kept
    if not os.path.isfile(os.path.join(root, MODEL_FILE)):
        return _stage("failed", "export-error", {"error": f"the exporter wrote no {MODEL_FILE}"}), kept
    return _stage("passed", detail={"warnings": caught}), kept


def _signature(values: Iterable[Any]) -> list[dict[str, Any]]:
    import onnx

    return [{"name": value.name, "dtype": onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type).lower(),
             "shape": [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]} for value in values]


def _check(root: str) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]] | None]:
    import onnx

    path = os.path.join(root, MODEL_FILE)
    try:
        onnx.checker.check_model(path, full_check=True)
        graph_file = onnx.load(path, load_external_data=False)
        files = _manifest(root)
    except Exception as error:  # noqa: BLE001 - whatever the checker refuses is a checker-error
        return _stage("failed", "checker-error", f"{type(error).__name__}: {error}"), None, None
    info = {"opset": {(entry.domain or "ai.onnx"): int(entry.version) for entry in graph_file.opset_import},
            "ir_version": int(graph_file.ir_version),
            "producer": f"{graph_file.producer_name} {graph_file.producer_version}".strip(),
            "inputs": _signature(graph_file.graph.input), "outputs": _signature(graph_file.graph.output)}
    return _stage("passed", detail=info), info, files


def _load(record: Mapping[str, Any], directory: str) -> tuple[dict[str, Any], Any]:
    """Verify the artifacts, then open the session: nothing unverified is ever loaded."""
    try:
        verify_artifacts(record, directory)
    except ConformanceError as error:
        return _stage("failed", "hash-mismatch", f"{type(error).__name__}: {error}"), None
    provider = record["runtime"]["provider"]
    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = SESSION["intra_op_num_threads"]
        options.inter_op_num_threads = SESSION["inter_op_num_threads"]
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, SESSION["graph_optimization_level"])
        path = os.path.join(_artifact_dir(record, directory), MODEL_FILE)
        session = ort.InferenceSession(path, sess_options=options, providers=[provider])
        used = list(session.get_providers())
    except Exception as error:  # noqa: BLE001 - any failure to open the session is a load-error
        return _stage("failed", "load-error", _first_line(error)), None
    if not used or used[0] != provider:
        return _stage("failed", "load-error", f"the session runs on {used}, not {provider}"), None
    return _stage("passed", detail={"providers": used}), session


def _run_case(case: dict[str, Any], session: Any, feed: str, model: Any, rtol: float, atol: float) -> None:
    """Run one case and fill in its outcome (see the module docstring)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    x = case_input(case)
    try:
        outputs = session.run(None, {feed: x.numpy()})
    except InvalidArgument as error:  # the runtime refused the input
        refused = case["expect"] == "rejected"
        case.update(outcome="rejected", passed=refused, failure=None if refused else "input-contract",
                    detail=_first_line(error))
        return
    except Exception as error:  # noqa: BLE001 - any other runtime failure
        case.update(outcome="error", failure="runtime-error", detail=_first_line(error))
        return
    if case["expect"] == "rejected":
        case.update(outcome="accepted", failure="input-contract", detail=f"ran and gave {len(outputs)} output(s)")
        return
    reference = np.asarray(model.predict(x).logits, dtype=np.float64)
    out = np.asarray(outputs[0]) if len(outputs) == 1 else None
    if out is None or out.dtype != np.float32 or out.shape != reference.shape:
        got = f"{len(outputs)} outputs" if out is None else f"{out.dtype} {list(out.shape)}"
        case.update(outcome="mismatch", failure="mismatch", detail=f"{got} for the native float32 {list(reference.shape)}")
        return
    if not (np.all(np.isfinite(out)) and np.all(np.isfinite(reference))):
        which = "the runtime" if not np.all(np.isfinite(out)) else "the native model"
        case.update(outcome="mismatch", failure="mismatch", detail=f"{which} gave non-finite logits")
        return
    error = np.abs(out.astype(np.float64) - reference)
    case["max_abs_error"] = float(error.max()) if error.size else 0.0
    case["max_rel_error"] = float((error / np.maximum(np.abs(reference), 1e-30)).max()) if error.size else 0.0
    within = bool(np.all(error <= atol + rtol * np.abs(reference)))
    case.update(outcome="match" if within else "mismatch", passed=within, failure=None if within else "mismatch")


def _parity(cases: list[dict[str, Any]], session: Any, model: Any, tolerances: Mapping[str, Any]) -> dict[str, Any]:
    feed = session.get_inputs()[0].name
    for case in cases:
        _run_case(case, session, feed, model, float(tolerances["rtol"]), float(tolerances["atol"]))
    failing = [case for case in cases if not case["passed"]]
    if not failing:
        return _stage("passed", detail={"cases": len(cases), "compared": sum(c["outcome"] == "match" for c in cases)})
    named = [case["failure"] for case in failing]
    failure = next(kind for kind in PARITY_RANK if kind in named)
    return _stage("failed", failure, {"failed_cases": [case["name"] for case in failing]})


def _finish(record: dict[str, Any]) -> dict[str, Any]:
    stages = record["stages"]
    record["status"] = "passed" if all(stages[name]["status"] == "passed" for name in STAGES) else "failed"
    record["failure"] = next((stages[name]["failure"] for name in STAGES if stages[name]["status"] == "failed"), None)
    record["level"] = ("executed" if stages["parity"]["status"] == "passed" else
                       "structural" if stages["check"]["status"] == "passed" else "none")
    return record


def _execute(record: dict[str, Any], directory: str, model: Any) -> dict[str, Any]:
    record["input_cases"] = [blank(case) for case in record["input_cases"]]  # no outcome survives a rerun
    record["stages"]["load"], session = _load(record, directory)
    record["stages"]["parity"] = _stage("not_run")
    if session is not None:
        record["stages"]["parity"] = _parity(record["input_cases"], session, model, record["tolerances"])
    return _finish(record)


# --- running profiles ---------------------------------------------------------------------------------------------
def run_profile(profile: str | Profile, directory: str | os.PathLike[str], *,
                source_revision: str | None = None) -> dict[str, Any]:
    """Run one profile (a tested name or a :class:`Profile`), writing its artifacts into
    ``directory/<name>/``, which must be new or empty; return its record. A failing stage never
    raises: its outcome is in the record. A profile this package does not run (an unknown name, a
    tested name with other settings, a model changed in place past the limits) is refused
    (``ConformanceError``) before anything is written."""
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise ConformanceError(f"unknown profile {profile!r}; the tested profiles are {sorted(PROFILES)}")
        profile = PROFILES[profile]
    check_model(profile.model)  # again: the model mapping can have changed since the profile was made
    check_size(profile.batches, profile.export_batch, profile.model)
    if profile.name in TESTED and profile_settings(profile) != TESTED[profile.name]:
        raise ConformanceError(f"{profile.name!r} names a tested profile; a profile with other settings needs its own name")
    root = os.path.join(os.fspath(directory), profile.name)
    if os.path.lexists(root) and (not os.path.isdir(root) or os.path.islink(root) or os.listdir(root)):
        raise ConformanceError(f"{root} must be a new or empty directory: a profile owns its artifacts")
    os.makedirs(root, exist_ok=True)
    model = build_model(profile.model)
    record: dict[str, Any] = {
        "format": FORMAT, "profile": profile.name, "status": "failed", "failure": None, "level": "none",
        "source": _source(source_revision),
        "config": {**canonical_model(profile.model), "weights_sha256": weights_digest(model.net)},
        "exporter": {"name": profile.exporter, "options": profile.options()},
        "opset": {"requested": profile.opset_version, "model": None},
        "artifacts": {"directory": profile.name, "model": MODEL_FILE, "files": []},
        "versions": _versions(),
        "runtime": {"name": profile.runtime, "version": _version("onnxruntime"), "provider": profile.provider,
                    "session": dict(SESSION)},
        "dtype": profile.dtype, "input_cases": [blank(case) for case in profile.cases()],
        "tolerances": {"rtol": profile.rtol, "atol": profile.atol}, "model_state": None,
        "stages": {name: _stage("not_run") for name in STAGES},
    }
    missing = [problem for problem in map(_import_problem, profile.requires) if problem is not None]
    if missing:
        extra = "onnx, onnxruntime" + (" and onnxscript" if profile.exporter == "dynamo" else "")
        record["stages"]["dependencies"] = _stage("failed", "missing-dependency", f"not importable: {'; '.join(missing)} "
                                                  f"(install the export extra: {extra})")
        return _finish(record)
    record["stages"]["dependencies"] = _stage("passed", detail={name: _version(name) for name in profile.requires})
    record["stages"]["export"], record["model_state"] = _export(profile, model, root)
    if record["stages"]["export"]["status"] != "passed":
        return _finish(record)
    record["stages"]["check"], info, files = _check(root)
    if info is None or files is None:
        return _finish(record)
    record["opset"]["model"], record["artifacts"]["files"] = info["opset"], files
    return _execute(record, os.fspath(directory), model)


def execute(record: Mapping[str, Any], directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Replay the load and parity stages of a saved record against its artifacts under
    ``directory``, returning the new record: the hashes are verified before anything is loaded
    (``hash-mismatch``), and the native reference is rebuilt from the recorded config, whose weights
    must hash to the recorded digest. A record that is refused, that never passed its check, or
    whose config no longer rebuilds its weights is a ``ConformanceError``, as is a missing runtime."""
    validate_record(record)
    replay: dict[str, Any] = json.loads(json.dumps(record))
    if replay["stages"]["check"]["status"] != "passed":
        raise ConformanceError("only a record whose export and check passed can be executed again")
    problem = _import_problem("onnxruntime")
    if problem is not None:
        raise ConformanceError(f"execute() runs the artifacts in ONNX Runtime, which does not import ({problem})")
    try:
        model = build_model({key: value for key, value in replay["config"].items() if key != "weights_sha256"})
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError, MemoryError) as error:
        raise ConformanceError(f"the recorded config does not rebuild the model: {_first_line(error)}") from error
    if weights_digest(model.net) != replay["config"]["weights_sha256"]:
        raise ConformanceError("the recorded config no longer rebuilds the recorded weights")
    replay["versions"], replay["runtime"]["version"] = _versions(), _version("onnxruntime")
    return _execute(replay, os.fspath(directory), model)


def run_profiles(directory: str | os.PathLike[str], names: Sequence[str] | None = None, *,
                 source_revision: str | None = None) -> dict[str, Any]:
    """Run ``names`` (every tested profile by default; a repeated name runs once) under
    ``directory``; the report's ``status`` is ``"passed"`` only when every profile passed."""
    chosen = list(PROFILES) if names is None else list(dict.fromkeys(names))
    records = [run_profile(name, directory, source_revision=source_revision) for name in chosen]
    passed = bool(records) and all(record["status"] == "passed" for record in records)
    return {"format": FORMAT, "status": "passed" if passed else "failed", "profiles": records}


def exit_code(report: Mapping[str, Any]) -> int:
    """0 when every profile of the report passed, else the code of the first failing profile's failure class."""
    for record in report["profiles"]:
        if record["status"] != "passed":
            return EXIT_CODES.get(record["failure"], 1)
    return 0 if report["profiles"] else 1


def save_report(report: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Validate every record of the report, then write it as strict, sorted JSON (to a temporary
    file renamed over ``path``, whose folder is created)."""
    for record in report["profiles"]:
        validate_record(record)
    try:
        text = json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except (TypeError, ValueError) as error:
        raise ConformanceError(f"a report is strict JSON ({error})") from error
    target = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    tmp = os.path.join(os.path.dirname(os.path.abspath(target)), f".{os.path.basename(target)}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, target)


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per profile: its verdict, level, each stage's status and how many input cases passed."""
    lines = []
    for record in report["profiles"]:
        verdict = record["status"] + (f" ({record['failure']})" if record["failure"] else "")
        stages = ", ".join(f"{name} {record['stages'][name]['status']}" for name in STAGES)
        passed = sum(1 for case in record["input_cases"] if case.get("passed"))
        lines.append(f"{record['profile']}: {verdict}; level={record['level']}; {stages}; "
                     f"{passed}/{len(record['input_cases'])} input cases passed")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nnx_api.export_conformance``: run profiles, save the report, print one line per
    profile, and return 0 or the first failing profile's exit code. Earlier artifacts of a chosen
    profile are refused (exit 2) unless ``--force`` replaces them."""
    parser = argparse.ArgumentParser(prog="python -m nnx_api.export_conformance",
                                     description="Run ONNX export conformance profiles and keep their evidence.")
    parser.add_argument("--output", default="conformance.json", help="the report (JSON) to write")
    parser.add_argument("--artifacts", help="the folder of each profile's artifacts (default: conformance-artifacts "
                                            "beside --output)")
    parser.add_argument("--profile", action="append", choices=sorted(PROFILES), help="a profile to run (repeatable; "
                                                                                     "default: every tested profile)")
    parser.add_argument("--source-revision", help="the source revision to record (default: this checkout's git HEAD)")
    parser.add_argument("--force", action="store_true", help="replace earlier artifacts of the chosen profiles")
    args = parser.parse_args(argv)
    artifacts = args.artifacts or os.path.join(os.path.dirname(os.path.abspath(args.output)), "conformance-artifacts")
    chosen = list(dict.fromkeys(args.profile or PROFILES))
    old = [os.path.join(artifacts, name) for name in chosen if os.path.lexists(os.path.join(artifacts, name))]
    if old and not args.force:
        parser.error(f"earlier artifacts are in the way: {', '.join(old)}; pass --force to replace them")
    for path in old:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            shutil.rmtree(path)
    report = run_profiles(artifacts, chosen, source_revision=args.source_revision)
    save_report(report, args.output)
    for line in summary_lines(report):
        print(line)
    code = exit_code(report)
    if code:
        failing = next((record["profile"] for record in report["profiles"] if record["status"] != "passed"), None)
        print(f"export conformance failed (exit {code}: the first failing profile is {failing})", file=sys.stderr)
    return code
