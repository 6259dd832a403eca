"""Data parallelism on real processes: gloo on CPU, one process per rank with torchrun's environment.

Each launch starts ``ddp_worker.py`` once per rank and runs several checks in one process group
(processes are the expensive part on 2 cores); every rank saves what it saw. The group timeout is
30 s and every launch has a hard wall-clock limit, so nothing can hang the suite. The
single-process references run here, in the test process, which has no process group.

* exactness: every update of a 2-rank run (unequal valid counts through ignore_index, a padded
  tail, accumulation 2, clipping) equals one process on the union of the ranks' batches, and the
  all-masked window of epoch 0 is skipped on both ranks;
* records, BEST, plateau LR and the EarlyStopping epoch: identical on both ranks, equal to one process;
* one writer; a failing writer commit, a corrupted resume point, a non-finite loss and a bad target
  on one rank stop every rank with the same error; out-of-scope features are refused everywhere;
* a rank SIGKILLed mid-epoch: the other exits with an error; a 2-rank resume continues bit for
  bit; 3 ranks, 1 rank and a single process refuse the stateful resume before restoring anything;
* shutdown: a missing rank makes the others raise instead of blocking; the torchrun recipe runs.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import ddp_common as common
import pytest
import torch

from nnx_core.commit import LAST, RunFiles
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx

HERE = Path(__file__).resolve().parent
WORKER = HERE / "ddp_worker.py"
EXAMPLE = HERE.parents[1] / "examples" / "ddp_supervised.py"
LAUNCH_TIMEOUT = 120  # seconds for a whole launch; the group's own timeout is 30 s

pytestmark = [
    pytest.mark.timeout(400),
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="no gloo"),
]


@attrs.frozen
class Launch:
    codes: list[int]
    results: list[Any]
    logs: list[str]


def launch(world: int, name: str, base: Path, *extra: str) -> Launch:
    """Start one worker per rank; wait (bounded) for all of them; load what each rank saved."""
    out, root = base / "out", base / "runs"
    out.mkdir(parents=True, exist_ok=True)
    port = common.free_port()
    logs = [out / f"{name}_{world}_rank{r}.log" for r in range(world)]
    procs = []
    for rank in range(world):
        with open(logs[rank], "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKER), name, str(out), str(root), *extra], env=common.rank_env(rank, world, port),
                    stdout=log, stderr=subprocess.STDOUT, cwd=HERE,
                )
            )
    try:
        codes = [p.wait(timeout=LAUNCH_TIMEOUT) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"launch {name!r} on {world} ranks hung:\n" + "\n".join(log.read_text()[-3000:] for log in logs))
    results = []
    for rank in range(world):
        saved = out / f"{name}_rank{rank}.pt"
        results.append(torch.load(saved, weights_only=False) if saved.exists() else None)
        saved.unlink(missing_ok=True)
    return Launch(codes, results, [log.read_text() for log in logs])


def check_ok(launched: Launch) -> list[Any]:
    assert launched.codes == [0] * len(launched.codes), "\n".join(log[-4000:] for log in launched.logs)
    return launched.results


# ------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ddp")


@pytest.fixture(scope="module")
def main(base: Path) -> list[dict[str, Any]]:
    return check_ok(launch(2, "main", base))


@pytest.fixture(scope="module")
def single(base: Path) -> dict[str, Any]:
    """The main run's configuration in one process, on the union of the ranks' batches."""
    model = common.model()
    trace, stopper, lrs = common.WeightTrace(), nnx.EarlyStopping(patience=2), nnx.LRMonitor()
    run = model.train(common.main_params(single=True), callbacks=[trace, stopper, lrs], root=base / "single")
    return {"run": run, "trace": trace, "stopped_epoch": stopper.stopped_epoch, "lrs": lrs.history}


@pytest.fixture(scope="module")
def crashed(base: Path, main: list[dict[str, Any]]) -> tuple[Launch, list[Any]]:
    killed = launch(2, "crash", base)
    resumed = check_ok(launch(2, "resume", base))
    return killed, resumed


def close(a: Any, b: Any, path: str = "record") -> None:
    """Records equal up to float rounding (ints, strings, flags and None exactly)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (path, a, b)
    elif attrs.has(type(a)):
        assert type(a) is type(b), path
        for field in attrs.fields(type(a)):
            close(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


# ------------------------------------------------------------------------------- exactness
def test_every_update_equals_one_process_on_the_union(main, single):
    ranks = [r["main"] for r in main]
    reference = single["trace"]
    assert ranks[0]["updates"] == ranks[1]["updates"] == reference.updates
    assert len(reference.weights) >= 10
    for rank in ranks:
        for got, want in zip(rank["weights"], reference.weights, strict=True):
            for key in want:
                torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0)
    for a, b in zip(ranks[0]["weights"], ranks[1]["weights"], strict=True):
        assert common.same(a, b)  # DDP leaves identical parameters on every rank


def test_an_all_masked_global_window_is_skipped_on_both_ranks(main, single):
    for idps in (main[0]["main"]["idps"], main[1]["main"]["idps"], single["run"].idps):
        epoch0 = [r for r in idps if r.epoch_idx == 0]
        assert [r.train_edp.count for r in epoch0][2:4] == [0, 0]  # window 1: every target ignored on both ranks
        assert all(r.update_count is None for r in epoch0)  # a default-step run's records carry none (as NNx)
        assert all(r.train_edp.count > 0 for r in epoch0[:2] + epoch0[4:])
    assert single["trace"].epochs.count(0) == 2  # 3 windows, the masked one committed nothing
    assert main[0]["main"]["updates"] == main[1]["main"]["updates"] == single["trace"].updates  # so on 2 ranks too


# ------------------------------------------------------------------------------- records and decisions
def test_records_and_decisions_are_identical_on_both_ranks_and_equal_one_process(main, single):
    r0, r1 = main[0]["main"], main[1]["main"]
    assert r0["id"] == r1["id"] == single["run"].id
    assert r0["idps"] == r1["idps"]  # bit-identical on every rank
    close(list(r0["idps"]), list(single["run"].idps))
    assert r0["best"] == r1["best"] == single["run"].best().epoch_idx == 2
    assert r0["stopped_epoch"] == r1["stopped_epoch"] == single["stopped_epoch"] == 4
    assert r0["lrs"] == r1["lrs"] == single["lrs"] and len(set(r0["lrs"])) > 1  # the plateau rule acted
    last = r0["idps"][-1]
    assert last.val_edp.count == 31 and set(last.val_edp.metrics) == {"f1", "nll"}  # every row scored once


@pytest.mark.parametrize("kind", common.TASKS)
def test_regression_and_multilabel_records_are_global(main, base, kind):
    model, params = common.task_case(kind, single=True)
    reference = model.train(params, root=base / "single-tasks")
    assert main[0][kind] == main[1][kind]
    close(list(main[0][kind]), list(reference.idps))
    assert main[0][kind][-1].val_edp.metrics and main[0][kind][-1].train_summary.metrics


def test_one_writer_holds_the_run_and_builds_writer_only_callbacks(main, base):
    r0, r1 = main[0]["main"], main[1]["main"]
    assert r0["built"] == [0] and r1["built"] == []
    assert any((base / "out" / "tensorboard").iterdir())
    run = nnx.NNRun.load(r0["id"], base / "runs" / "main")
    assert run.idps == r0["idps"]
    files = RunFiles(FileStorage(base / "runs" / "main"), r0["id"])
    assert files.read_tag(LAST).epoch == 4
    payload = run.checkpoint(LAST).payload()
    assert not any(k.startswith("module.") for k in payload["weights"])  # canonical keys, never DDP's
    assert payload["distributed"]["world_size"] == 2 and len(payload["rng"]["ranks"]) == 2
    assert [p["rank"] for p in payload["distributed"]["partitions"]] == [0, 1]


# ------------------------------------------------------------------------------- agreed failures
@pytest.fixture(scope="module")
def hooks(base: Path) -> list[dict[str, Any]]:
    return check_ok(launch(2, "hooks", base))


def test_a_failing_train_begin_finalizes_exactly_the_callbacks_that_began_as_in_one_process(base, hooks):
    launched = hooks
    assert launched[0]["error"] == launched[1]["error"] and "on_train_begin of b failed" in launched[0]["error"]["message"]
    assert launched[0]["log"] == ["begin a", "begin b", "begin c", "end d", "end c", "end b", "end a"]  # all began
    one: list[str] = []  # one process, b failing: only a began, so only a is finalized
    with pytest.raises(RuntimeError, match="on_train_begin of b failed"):
        common.model().train(common.crash_params(n_epochs=1, val_loader=None, train_loader=common.UnionLoader(common.dataset())),
                             callbacks=common.hook_callbacks(one, fail_on=(0,)), root=base / "hooks-single")
    assert one == ["begin a", "end a"]
    assert launched[1]["log"] == one


def test_a_refused_resume_auto_writes_nothing_on_the_writer(hooks):
    for rank in hooks:
        crashed, refused = rank["refused_resume"]["crashed"], rank["refused_resume"]["error"]
        assert crashed is not None and "crash at epoch 1" in crashed["message"]
        assert refused is not None and refused["type"] == "ComponentRestoreError" and "early_stopping" in refused["message"]
    assert hooks[0]["refused_resume"]["unchanged"] is True


def test_a_fit_leaves_no_ddp_wrapper_behind(hooks):
    """DDP keeps its comm hook in C++: a hook holding the step's sync strongly would keep every fit's
    wrapper, its buckets and its autograd hooks on the model's parameters, alive until exit."""
    assert [rank["ddp_alive"] for rank in hooks] == [0, 0]


def test_a_failing_writer_commit_stops_both_ranks_with_the_same_error(main, base):
    errors = [r["commit_failure"] for r in main]
    assert errors[0] == errors[1]
    assert errors[0]["type"] == "AgreedError"
    # written in the background: the failure is raised where the ranks next agree (the commit point's own
    # agreement, or the next update boundary's), naming rank 0's OSError
    assert "failed on rank 0: OSError: [Errno 28] injected: no space left on device" in errors[0]["message"]
    config = common.model().run_config(common.crash_params(n_epochs=3), "commit-failure")
    run = nnx.NNRun.load(nnx.NNRun(config=config, root=".").id, base / "runs" / "faults")
    assert run.checkpoint(LAST).epoch == 0  # epoch 0 stays committed


def test_a_corrupted_resume_point_is_refused_on_every_rank_with_the_same_reason(main):
    errors = [r["corrupt"] for r in main]
    assert errors[0] == errors[1]
    assert errors[0]["type"] == "ResumePointError" and "SHA-256" in errors[0]["message"]


def test_a_nonfinite_loss_or_bad_target_on_one_rank_stops_every_rank_before_backward(main):
    for key, kind in (("nonfinite", "NonFiniteLossError"), ("bad_target", "TaskValidationError")):
        errors = [r[key] for r in main]
        assert errors[0] == errors[1] and errors[0]["type"] == kind, errors
    assert "1 of 2 ranks" in main[0]["nonfinite"]["message"]
    assert "float" in main[0]["bad_target"]["message"]  # rank 1's own check, raised on rank 0 too


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("fault", ["nonfinite", "bad_target"])
def test_a_fault_on_one_rank_after_the_first_windows_stops_every_rank_before_that_update(main, fault, accumulate):
    """Batch 4 of 6 on rank 1 only, once the window's agreement rides in its gradient all-reduce:
    every rank raises the same error (a bad target: rank 1's own check, naming batch 4), no rank
    applied that window, and every rank holds the same parameters (accumulating 2: batch 4 opens
    a window, and rank 0 learns of it at batch 5)."""
    seen = [r["late"][fault, accumulate] for r in main]
    kind = {"nonfinite": "NonFiniteLossError", "bad_target": "TaskValidationError"}[fault]
    assert seen[0]["error"] == seen[1]["error"] and seen[0]["error"]["type"] == kind, seen
    if fault == "bad_target":
        assert "batch 4" in seen[0]["error"]["message"] and "float" in seen[0]["error"]["message"]
    assert seen[0]["updates"] == seen[1]["updates"] == list(range(1, 4 // accumulate + 1))
    assert common.same(seen[0]["final"], seen[1]["final"])


def test_the_agreement_rides_in_the_gradient_all_reduce_once_the_buckets_are_known(main):
    """NNx's own all-reduces per fit do not grow with the batches (6 or 12 of them), and a healthy
    fit accumulating 1 or 2 ends with the same parameters on every rank."""
    for accumulate in (1, 2):
        healthy = [r["late"][None, accumulate] for r in main]
        assert healthy[0]["error"] is None and common.same(healthy[0]["final"], healthy[1]["final"])
        assert healthy[0]["updates"] == list(range(1, 6 // accumulate + 1))
    short, longer = main[0]["late"][None, 1]["all_reduce"], main[0]["late_longer"]["all_reduce"]
    assert longer == short, (short, longer)


REFUSALS = {
    "undeclared callback": ("ParamsError", "declares no rank behaviour"),
    "borrowed tracker": ("ParamsError", "writer_only"),
    "batch norm": ("ParamsError", "batch normalization"),
    "full history on every rank": ("ParamsError", "only the writer holds the journal"),
    "mixed precision": ("PrecisionUnsupportedError", "fp16 needs CUDA"),  # on CUDA, DDP refuses fp16 (test_nccl_paths)
    "unsharded validation": ("ParamsError", "validation_loader"),
    "partition mismatch": ("TrainingInputError", "train loaders disagree"),
    "configuration mismatch": ("ParamsError", "different run configurations"),
    "NNModel.train without distributed": ("ParamsError", "2-rank process group"),
    "Trainer.train without distributed": ("ParamsError", "2-rank process group"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_out_of_scope_features_are_refused_on_every_rank_before_training(main, name):
    kind, words = REFUSALS[name]
    errors = [r["refusals"][name] for r in main]
    for error in errors:
        assert error is not None and error["type"] == kind and words in error["message"], error
    if "rank 0 of" not in errors[0]["message"]:
        assert errors[0] == errors[1]
    assert main[0]["no_writes"] == []  # nothing was written for any refused run


# ------------------------------------------------------------------------------- crash and resume
def test_a_killed_rank_stops_the_other_then_two_ranks_resume_bit_identically(crashed, main, base):
    killed, resumed = crashed
    assert killed.codes[1] == -9  # SIGKILL mid-epoch 2
    assert killed.codes[0] == 0 and killed.results[0]["error"] is not None, killed.logs[0][-3000:]
    root = base / "runs" / "crash"
    reference = main[0]["reference"]
    files = RunFiles(FileStorage(root), reference["id"])
    assert resumed[0]["id"] == reference["id"]
    assert resumed[0]["status"]["mode"] == "stateful" and resumed[0]["status"]["source_epoch"] == 1
    for rank in resumed:
        assert common.same(rank["final"], reference["final"])  # bit for bit, dropout streams included
        assert rank["idps"] == reference["idps"]
    assert files.read_tag(LAST).epoch == common.CRASH_EPOCHS - 1
    assert resumed[0]["weights_only"]["status"]["mode"] == "weights_only"


@pytest.mark.parametrize("world", [3, 1])
def test_another_world_size_refuses_the_stateful_resume_before_restoring(base, main, world):
    launched = launch(world, "refuse", base, main[0]["reference"]["id"])
    if world == 3:  # the third rank never reaches shutdown: ranks 0 and 1 must raise, not block
        assert [r["shutdown"]["type"] for r in launched.results[:2]] == ["RuntimeError", "RuntimeError"]
        assert "teardown barrier" in launched.results[0]["shutdown"]["message"]
        assert launched.results[2]["others_left_first"] is True  # rank 2 was alive but absent throughout
    assert launched.codes == [0] * world, launched.logs
    errors = [r["error"] for r in launched.results]
    assert all(e == errors[0] for e in errors)
    assert errors[0]["type"] == "ResumeMismatchError" and f"written by 2 ranks, this run has {world}" in errors[0]["message"]
    assert all(r["untouched"] for r in launched.results)


def test_a_single_process_refuses_a_stateful_resume_of_a_distributed_checkpoint(base, main):
    source = main[0]["reference"]["id"]
    root = base / "runs" / "reference"
    model = common.model(dropout=0.3)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    params = nnx.NNTrainParams(
        n_epochs=1, train_loader=common.UnionLoader(common.dataset()), resume_from_run_id=source, progress=False
    )
    with pytest.raises(nnx.ResumeMismatchError, match="nnmodel-ddp"):
        model.train(params, root=root)
    assert common.same(before, model.net.state_dict())
    run = model.train(params.replace(resume_mode="weights_only"), root=root)  # fresh from its weights
    assert run.resume_status["mode"] == "weights_only"


def test_shutdown_without_a_group_does_nothing():
    assert not torch.distributed.is_initialized()
    nnx.distributed.shutdown(timeout_seconds=1)


# ------------------------------------------------------------------------------- the recipe
def test_the_torchrun_recipe_trains_one_run_on_two_ranks(tmp_path):
    env = {**os.environ, "NNX_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(EXAMPLE),
        "--root", str(tmp_path / "runs"), "--epochs", "2",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = sorted(re.findall(r"rank (\d) (\w+) (records=\d+ val_accuracy=[\d.]+)", done.stdout))
    assert [rank for rank, *_ in found] == ["0", "1"], done.stdout
    assert found[0][1:] == found[1][1:]  # the same run id and the same records on both ranks
    assert len(list((tmp_path / "runs").glob("*/run.yaml"))) == 1


# ------------------------------------------------------------------------------- custom train steps
@pytest.fixture(scope="module")
def custom(base: Path) -> list[dict[str, Any]]:
    return check_ok(launch(2, "custom", base))


def _union_custom(base: Path, weigh: bool) -> tuple[dict[str, torch.Tensor], Any]:
    """The documented custom step in one process on the union of the ranks' batches."""
    model = common.model()
    run = model.train(common.custom_params(single=True), train_step_fn=common.custom_step(weigh=weigh),
                      salt=f"union-{weigh}", root=base / "custom-single")
    return {k: v.detach().clone() for k, v in model.net.state_dict().items()}, run


def test_a_custom_step_runs_unchanged_and_with_its_denominator_equals_one_process_on_the_union(base, custom):
    """Unequal valid counts on the ranks: a step that states its loss's denominator (ctx.weigh)
    makes every update one process's on the union (float32 summation order aside); without it the
    ranks' gradients weigh equally, which is not the union's update. Both ranks end identical."""
    union, single = _union_custom(base, weigh=True)
    weighed, unweighed = (custom[0][f"weigh={w}"] for w in (True, False))
    for key in ("weigh=True", "weigh=False"):
        assert common.same(custom[0][key]["final"], custom[1][key]["final"])  # identical parameters on both ranks
        assert custom[0][key]["idps"] == custom[1][key]["idps"]  # and identical records
    assert all(torch.allclose(weighed["final"][k], union[k], rtol=1e-5, atol=1e-6) for k in union)
    assert not all(torch.allclose(unweighed["final"][k], union[k], rtol=1e-5, atol=1e-6) for k in union)
    # every batch's record is the union's batch: the loss over both ranks' valid targets
    ours = [r.train_edp.loss for r in weighed["idps"]]
    theirs = [r.train_edp.loss for r in single.idps]
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert weighed["joins"] == len(weighed["idps"])  # one gradient all-reduce per optimizer step, no more


def test_a_custom_step_failing_or_turning_nan_on_one_rank_stops_every_rank_and_keeps_what_was_committed(custom):
    for name, kind in (("fail", "AgreedError"), ("nan", "NonFiniteLossError")):  # a user's error: as the default step
        errors = [r[name] for r in custom]
        assert errors[0] is not None and errors[0]["type"] == errors[1]["type"] == kind, errors
        assert errors[0]["message"] == errors[1]["message"]
        assert common.same(custom[0][f"{name}_final"], custom[1][f"{name}_final"])  # no rank moved alone
        assert all(bool(torch.isfinite(t).all()) for t in custom[0][f"{name}_final"].values())
    assert "failed on rank 1: ValueError: injected step failure on rank 1" in custom[0]["fail"]["message"]
    assert custom[0]["fail_last"] == [0] and sorted(custom[0]["nan_last"]) == [0, 0]  # epoch 0 stays committed


def test_a_custom_validation_on_each_ranks_shard_gives_one_global_record_equal_to_one_process(base, custom):
    """Each rank's eval_step_fn scores its own shard; the epoch's validation record is the rows'
    weighted mean (count as weights), identical on both ranks and equal to one process scoring
    the whole validation set."""
    model = common.model()
    run = model.train(
        common.custom_params(single=True, val_loader=nnx.distributed.validation_loader(common.validation_set(), 8, rank=0, world_size=1)),
        train_step_fn=common.custom_step(weigh=True), eval_step_fn=common.custom_eval_step, salt="eval-union",
        root=base / "custom-single",
    )
    ranks = [r["eval"]["idps"] for r in custom]
    assert ranks[0] == ranks[1]
    ours = [r.val_edp for r in ranks[0] if r.val_edp is not None]
    theirs = [r.val_edp for r in run.idps if r.val_edp is not None]
    assert [v.count for v in ours] == [v.count for v in theirs] == [31] * 3
    assert [v.loss for v in ours] == pytest.approx([v.loss for v in theirs], rel=1e-5)
    assert [v.accuracy for v in ours] == pytest.approx([v.accuracy for v in theirs], rel=1e-6)
    # an extra value is weighted like the loss: rank 0 scored 16 rows, rank 1 15
    assert all(v.extra["rows_seen"] == pytest.approx((16 * 16 + 15 * 15) / 31) for v in ours)


def test_the_default_step_in_bf16_on_two_ranks_matches_one_process_on_the_union(base, custom):
    model = common.model(precision=nnx.PrecisionPolicy(mode="bf16"))
    model.train(common.main_params(single=True), salt="bf16", root=base / "custom-single")
    union = model.net.state_dict()
    assert common.same(custom[0]["bf16"]["final"], custom[1]["bf16"]["final"])
    assert custom[0]["bf16"]["idps"] == custom[1]["bf16"]["idps"]
    assert all(torch.allclose(custom[0]["bf16"]["final"][k], union[k], rtol=2e-2, atol=2e-3) for k in union)


def test_a_history_journal_on_two_ranks_keeps_one_window_everywhere_across_a_resume(base, custom):
    """The writer writes the journal's chunks and manifest; every rank keeps the same window
    (``ctx.idps``), also right after a resume (the writer's window reaches the other rank), and
    the journal holds what one process on the union records."""
    log = common.WindowLog()
    single = common.model().train(common.custom_params(single=True), history=common.JOURNAL, callbacks=[log],
                                  salt="journal", root=base / "custom-single")
    ranks = [r["journal"] for r in custom]
    assert all(r["journal_crash"]["message"].endswith("RuntimeError: crash at epoch 2") for r in custom)
    assert ranks[0]["status"] == "stateful"
    assert ranks[0]["windows"] == ranks[1]["windows"] == log.seen
    assert len(log.seen[-1]) == 7  # the window, not the whole history
    records = [(r.epoch_idx, r.batch_idx, r.train_edp.loss) for r in nnx.NNRun.load(single.id, base / "custom-single").idps]
    assert [r[:2] for r in ranks[0]["records"]] == [r[:2] for r in records] and len(records) == 7  # a loaded journal run: its window
    assert [r[2] for r in ranks[0]["records"]] == pytest.approx([r[2] for r in records], rel=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_an_assigned_loss_fn_on_two_ranks_matches_one_process_on_the_union(base, custom, reduction):
    """``model.loss_fn`` under DDP: a summed loss is additive — its update is DDP's average × the
    world size, the ranks' sum, as one process sums the union — and a mean-reduced one is divided
    by the union's valid targets; both against one process on the union, both ranks identical."""
    model = common.model()
    model.loss_fn = torch.nn.CrossEntropyLoss(reduction=reduction, ignore_index=common.IGNORE)
    run = model.train(common.custom_params(single=True, optim=common.LOSS_FN_OPTIM), salt=f"loss-fn-{reduction}",
                      root=base / "custom-single")
    ranks = [r[f"loss_fn={reduction}"] for r in custom]
    assert common.same(ranks[0]["final"], ranks[1]["final"]) and ranks[0]["idps"] == ranks[1]["idps"]
    union = model.net.state_dict()
    assert all(torch.allclose(ranks[0]["final"][k], union[k], rtol=1e-5, atol=1e-6) for k in union)
    assert [r.train_edp.loss for r in ranks[0]["idps"]] == pytest.approx([r.train_edp.loss for r in run.idps], rel=1e-5)


def test_a_summed_objective_term_on_two_ranks_is_summarised_per_sample_of_the_union(base, custom):
    """A sum term's epoch summary is its epoch sum over the rows the epoch saw: under DDP the
    union's rows (each rank's summed over the group), as one process on the union counts them."""
    model = common.model()
    model.loss_fn = torch.nn.CrossEntropyLoss(reduction="sum", ignore_index=common.IGNORE)
    run = model.train(common.custom_params(single=True, optim=common.LOSS_FN_OPTIM), objective=nnx.supervised_objective(),
                      salt="loss-fn-sum-objective", root=base / "custom-single")
    ranks = [r["loss_fn=sum objective"]["idps"] for r in custom]
    assert ranks[0] == ranks[1]
    ours, theirs = ([r.train_summary for r in idps if r.train_summary] for idps in (ranks[0], run.idps))
    assert len(ours) == len(theirs) == len({r.epoch_idx for r in run.idps})
    for a, b in zip(ours, theirs, strict=True):
        assert a.extra == pytest.approx(b.extra, rel=1e-5) and a.loss == pytest.approx(b.loss, rel=1e-5)


@pytest.mark.parametrize("name", ["supervised", "kd"])
def test_an_objective_on_two_ranks_matches_one_process_on_the_union(base, custom, name):
    """Objectives through the shared update engine under DDP — the supervised objective and
    knowledge distillation (two terms with their own denominators) — with accumulation 2, unequal
    valid counts, an all-masked window and clipping: every rank ends identical, with identical
    records, and equal to one process on the union of the ranks' batches."""
    objective = nnx.supervised_objective() if name == "supervised" else nnx.kd_objective(common.teacher(), alpha=0.3)
    model = common.model()
    run = model.train(common.main_params(single=True, n_epochs=3), objective=objective, salt=f"objective-{name}",
                      root=base / "custom-single")
    ranks = [r[f"objective={name}"] for r in custom]
    assert common.same(ranks[0]["final"], ranks[1]["final"]) and ranks[0]["idps"] == ranks[1]["idps"]
    union = model.net.state_dict()
    assert all(torch.allclose(ranks[0]["final"][k], union[k], rtol=1e-5, atol=1e-6) for k in union)
    ours, theirs = ranks[0]["idps"], run.idps
    losses = [(r.train_edp.loss, q.train_edp.loss) for r, q in zip(ours, theirs, strict=True)]
    assert all((a is None) == (b is None) for a, b in losses)  # a fully masked microbatch has no loss, alike
    assert name == "kd" or any(a is None for a, _ in losses)  # (distillation's soft term is never masked)
    assert [a for a, _ in losses if a is not None] == pytest.approx([b for _, b in losses if b is not None], rel=1e-5)
    assert [r.update_count for r in ours] == [r.update_count for r in theirs]  # the masked window skipped alike
    for a, b in ((r.train_summary, q.train_summary) for r, q in zip(ours, theirs, strict=True) if q.train_summary):
        assert a.extra == pytest.approx(b.extra, rel=1e-5) and a.loss == pytest.approx(b.loss, rel=1e-5)  # per sample


# ------------------------------------------------------------------------------- Trainer
@pytest.fixture(scope="module")
def trainer_launch(base: Path) -> list[dict[str, Any]]:
    return check_ok(launch(2, "trainer", base))


def test_the_gan_example_trains_on_two_ranks_with_identical_parameters(trainer_launch):
    """Each rank draws its own noise, so no single process reproduces the run; what holds: every
    optimizer's gradients are the ranks' average, so both ranks end with identical parameters
    and records."""
    a, b = (r["gan"] for r in trainer_launch)
    assert common.same(a["final"], b["final"]) and a["idps"] == b["idps"]
    assert all(bool(torch.isfinite(t).all()) for t in a["final"].values())
    assert len({r.epoch_idx for r in a["idps"]}) == 3


def test_a_trainer_on_two_ranks_matches_one_process_and_ticks_each_clock_once_per_own_commit(base, trainer_launch):
    """Named optimizers on their own cadences under DDP: the same updates as one process on the
    union (ctx.weigh: unequal valid counts), and each optimizer's update-clock schedule ticks once
    per commit of its own optimizer — the learning rates every batch sees match one process."""
    seen: list[tuple[float, float]] = []
    model = common.model()
    run = nnx.Trainer(model).train(common.cadence_params(single=True), trainer_step_fn=common.cadence_step(seen),
                                   root=base / "trainer-single")
    ranks = [r["cadence"] for r in trainer_launch]
    assert common.same(ranks[0]["final"], ranks[1]["final"]) and ranks[0]["idps"] == ranks[1]["idps"]
    union = model.net.state_dict()
    assert all(torch.allclose(ranks[0]["final"][k], union[k], rtol=1e-5, atol=1e-6) for k in union)
    assert ranks[0]["seen"] == ranks[1]["seen"] == seen  # the same clock arithmetic: the same floats
    payload = run.checkpoint("last").payload()
    assert ranks[0]["counts"] == payload["update_counts"] == {"encoder": 4, "head": 10}
    assert ranks[0]["ticks"] == {"encoder": 4, "head": 10}


def test_an_objective_failing_or_turning_nan_on_one_rank_stops_every_rank_alike(custom):
    """The objective raising, or its loss NaN, on rank 1 only: both ranks raise the same error
    (the NaN through the summed readings, before any backward), and no rank moved alone."""
    for fault, kind in (("fail", "AgreedError"), ("nan", "NonFiniteLossError")):
        errors = [r[f"objective_{fault}"] for r in custom]
        assert errors[0] is not None and errors[0] == errors[1] and errors[0]["type"] == kind, errors
        assert common.same(custom[0][f"objective_{fault}_final"], custom[1][f"objective_{fault}_final"])
    assert "failed on rank 1: ValueError: injected objective failure on rank 1" in custom[0]["objective_fail"]["message"]


# ------------------------------------------------------------------------------- fp16 (CUDA faked on the CPU)
@pytest.fixture(scope="module")
def fp16(base: Path) -> list[dict[str, Any]]:
    return check_ok(launch(2, "fp16", base))


@pytest.mark.parametrize("case", common.FP16_CASES)
def test_an_overflow_on_one_rank_skips_the_same_fp16_step_on_every_rank(fp16, case):
    """fp16 with its GradScaler (the CUDA gate faked on the CPU): rank 1's gradients overflow in
    epoch 0 batch 2 — a real inf (the default step, where DDP averages it; the objective, which sums
    it; a custom step through ``ctx.scaler``, before its gradients are joined), or only rank 1's
    scaler flag ("flag"). The loss is finite, so nothing fails: every rank skips that update, and
    only it, backs off the scale alike and ends with identical parameters and records."""
    ranks = [r[case] for r in fp16]
    every = [(e, b) for e in range(2) for b in range(5)]
    for seen in ranks:
        assert seen["updates"] == [u for u in every if u != (0, 2)], seen["updates"]
        assert seen["scaler"] == 2.0 ** 15  # 2^16 halved once: the one skipped step
    assert common.same(ranks[0]["final"], ranks[1]["final"])
    assert ranks[0]["idps"] == ranks[1]["idps"]
    assert all(math.isfinite(loss) for _, _, loss in ranks[0]["idps"] if loss is not None)
    if case == "custom":
        assert ranks[0]["scales"] == ranks[1]["scales"] and ranks[0]["scales"][2] == 2.0 ** 15

