"""One rank of a DDP test launch: ``python ddp_worker.py <launch> <out dir> <runs root>``.

``test_ddp.py`` starts one process per rank with torchrun's environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT). A launch runs several checks in one process group
(processes are expensive on 2 cores); every rank saves what it saw to ``<out>/<launch>_rank<r>.pt``.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ddp_common as common

from nnx_core.commit import LAST, RunFiles
from nnx_adapters.collective.torch import TorchCollective
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api import distributed


def error_of(fn: Callable[[], Any]) -> dict[str, str] | None:
    try:
        fn()
    except Exception as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


class Killer(nnx.Callback):
    """SIGKILLs rank ``victim`` at its ``at``-th update of epoch ``epoch`` (a real crash mid-epoch)."""

    distributed = "all"

    def __init__(self, victim: int, epoch: int, at: int) -> None:
        self.victim, self.epoch, self.at, self.seen = victim, epoch, at, 0

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        if event.epoch_idx == self.epoch and dist_rank() == self.victim:
            self.seen += 1
            if self.seen == self.at:
                os.kill(os.getpid(), signal.SIGKILL)


class Undeclared(nnx.Callback):
    def on_epoch_end(self, ctx: Any) -> None:
        pass


def dist_rank() -> int:
    return torch.distributed.get_rank()


def final_weights(model: nnx.NNModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.net.state_dict().items()}


# ------------------------------------------------------------------------------- launches
def launch_main(rank: int, out: Path, root: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    # 1. exactness + records + decisions (+ writer_only, built on the writer alone)
    model = common.model()
    trace, stopper, lrs = common.WeightTrace(), nnx.EarlyStopping(patience=2), nnx.LRMonitor()
    built: list[int] = []

    def tensorboard() -> Any:
        built.append(rank)
        return nnx.TensorBoardCallback(log_dir=out / "tensorboard")

    run = model.train(
        common.main_params(single=False), callbacks=[trace, stopper, lrs, distributed.writer_only(tensorboard)],
        root=root / "main", distributed=distributed.DDP(),
    )
    result["main"] = {
        "id": run.id, "idps": run.idps, "weights": trace.weights, "updates": trace.updates,
        "stopped_epoch": stopper.stopped_epoch, "lrs": lrs.history, "best": run.best().epoch_idx,
        "built": built, "final": final_weights(model),
    }
    for kind in common.TASKS:  # other tasks' records: regression (mse/mae), multilabel (label counts)
        model, params = common.task_case(kind, single=False)
        result[kind] = model.train(params, root=root / "tasks", distributed=distributed.DDP()).idps
    # 2. the crash run's configuration, uninterrupted (the bit-identical reference)
    model = common.model(dropout=0.3)
    run = model.train(common.crash_params(), root=root / "reference", distributed=distributed.DDP())
    result["reference"] = {"id": run.id, "idps": run.idps, "final": final_weights(model)}
    # 3. a failing writer commit (injected on the writer only, where the commit runs: the background
    # writer's, asynchronous commits being the default) stops both ranks with the same error
    from nnx_core import background as training

    real = training.commit_epoch

    def failing(files: Any, commit: Any) -> Any:
        if commit.epoch == 1:
            raise OSError(28, "injected: no space left on device")
        return real(files, commit)

    if rank == 0:
        training.commit_epoch = failing
    try:
        model = common.model()
        result["commit_failure"] = error_of(
            lambda: model.train(common.crash_params(n_epochs=3), salt="commit-failure", root=root / "faults",
                                distributed=distributed.DDP())
        )
    finally:
        training.commit_epoch = real
    # 4. a corrupted resume point is refused on every rank with the same reason (the writer verifies)
    run = common.model().train(common.crash_params(n_epochs=1), salt="corrupt", root=root / "faults",
                               distributed=distributed.DDP())
    if rank == 0:
        files = RunFiles(FileStorage(root / "faults"), run.id)
        blob = root / "faults" / files.blob_path(files.read_tag(LAST).blobs["state"].sha256)
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    torch.distributed.barrier()
    result["corrupt"] = error_of(
        lambda: common.model().train(common.crash_params(n_epochs=1, resume_from_run_id=run.id), root=root / "faults",
                                     distributed=distributed.DDP())
    )
    # 5. a non-finite loss / a bad target on one rank only: agreed before backward, raised everywhere
    x, y = common.dataset().tensors
    bad_x = x[:8].clone()
    bad_y = y[:8].clone()
    if rank == 1:
        bad_x[:] = float("nan")
        bad_y = bad_y.float()

    def one_rank_problem(batches: list[Any], salt: str) -> dict[str, str] | None:
        params = nnx.NNTrainParams(n_epochs=1, train_loader=batches, progress=False)
        return error_of(lambda: common.model().train(params, root=root / "faults", salt=salt, distributed=distributed.DDP()))

    result["nonfinite"] = one_rank_problem([(x[8:12], y[8:12]), (bad_x, y[:8])], "nonfinite")
    result["bad_target"] = one_rank_problem([(x[8:12], y[8:12]), (x[:8], bad_y)], "bad-target")
    # 5b. the same faults later in the epoch (batch 4 of 6), once the agreement rides in the last
    # gradient all-reduce of each window (DDP's buckets known): accumulating 1 or 2 batches (batch 4
    # then opens its window); and NNx's own all-reduces, counted, do not grow with the batches
    late = [(x[8 * i : 8 * i + 8], y[8 * i : 8 * i + 8]) for i in range(6)]
    faults = {"nonfinite": (bad_x, y[:8]), "bad_target": (x[:8], bad_y)}

    def late_fit(fault: str | None, accumulate: int, batches: int = 6) -> dict[str, Any]:
        data = [late[i % 6] if i != 4 or fault is None else faults[fault] for i in range(batches)]
        model, trace, counted = common.model(), common.WeightTrace(), TorchCollective()
        params = nnx.NNTrainParams(
            n_epochs=1, train_loader=data, progress=False, seed=0,
            optim=nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, accumulate_grad_batches=accumulate),
        )
        error = error_of(lambda: model.train(
            params, callbacks=[trace], root=root / "late", salt=f"{fault}-{accumulate}-{batches}",
            distributed=distributed.DDP(collective=counted)))
        return {"error": error, "final": final_weights(model), "updates": trace.updates,
                "all_reduce": counted.traffic.calls.get("all_reduce", 0)}

    result["late"] = {(fault, accumulate): late_fit(fault, accumulate) for fault in (*faults, None) for accumulate in (1, 2)}
    result["late_longer"] = late_fit(None, 1, batches=12)
    result["problem_runs"] = sorted(p.name for p in (root / "faults").glob("*")) if (root / "faults").exists() else []
    # 6. refusals, each on every rank before training
    def small(**kw):
        return common.crash_params(n_epochs=1, **kw)
    bn = nnx.NNModel(
        params=nnx.NNModelParams(task=nnx.TaskSpec.categorical(3)),
        module=nn.Sequential(nn.Linear(common.FEATURES, 4), nn.BatchNorm1d(4), nn.Linear(4, 3)),
    )
    refusals = {
        "undeclared callback": lambda: common.model().train(small(), callbacks=[Undeclared()], root=root / "r", distributed=distributed.DDP()),
        "borrowed tracker": lambda: common.model().train(
            small(), callbacks=[nnx.TensorBoardCallback(log_dir=out / "borrowed")], root=root / "r", distributed=distributed.DDP()),
        "batch norm": lambda: bn.train(small(), root=root / "r", distributed=distributed.DDP()),
        "full history on every rank": lambda: common.model().train(
            small(), history=nnx.HistoryJournal(), callbacks=[common.FullReader()], root=root / "r", distributed=distributed.DDP()),
        "mixed precision": lambda: common.model(precision=nnx.PrecisionPolicy(mode="fp16")).train(small(), root=root / "r", distributed=distributed.DDP()),
        "unsharded validation": lambda: common.model().train(
            small(val_loader=[(x[:4], y[:4])]), root=root / "r", distributed=distributed.DDP()),
        "partition mismatch": lambda: common.model().train(
            small(train_loader=distributed.train_loader(common.dataset(), common.BATCH, "pad", seed=rank)), root=root / "r",
            distributed=distributed.DDP()),
        "configuration mismatch": lambda: common.model().train(small(), salt=f"rank-{rank}", root=root / "r", distributed=distributed.DDP()),
        "NNModel.train without distributed": lambda: common.model().train(small(), root=root / "r"),
        "Trainer.train without distributed": lambda: nnx.Trainer(common.model()).train(None),
    }
    result["refusals"] = {name: error_of(fn) for name, fn in refusals.items()}
    result["no_writes"] = sorted(p.name for p in (root / "r").glob("*")) if (root / "r").exists() else []
    distributed.shutdown(timeout_seconds=30)
    return result


def launch_crash(rank: int, out: Path, root: Path) -> dict[str, Any]:
    model = common.model(dropout=0.3)
    start = time.monotonic()
    error = error_of(
        lambda: model.train(common.crash_params(), callbacks=[Killer(victim=1, epoch=2, at=2)], root=root / "crash",
                            distributed=distributed.DDP())
    )
    return {"error": error, "seconds": time.monotonic() - start}  # rank 1 never gets here


def launch_resume(rank: int, out: Path, root: Path) -> dict[str, Any]:
    model = common.model(dropout=0.3)
    trace = common.WeightTrace()
    run = model.train(common.crash_params(resume="auto"), callbacks=[trace], root=root / "crash", distributed=distributed.DDP())
    result = {"id": run.id, "idps": run.idps, "final": final_weights(model), "status": run.resume_status, "updates": trace.updates}
    # weights_only from a 2-rank checkpoint: a new lineage that starts fresh from its weights
    model = common.model(dropout=0.3)
    run = model.train(
        common.crash_params(n_epochs=1, resume_from_run_id=run.id, resume_mode="weights_only"), root=root / "crash",
        distributed=distributed.DDP(),
    )
    result["weights_only"] = {"status": run.resume_status, "epochs": sorted(run.epochs)}
    distributed.shutdown(timeout_seconds=30)
    return result


def launch_refuse(rank: int, out: Path, root: Path) -> dict[str, Any]:
    """Another world size (3 ranks, or 1) resuming the 2-rank reference run statefully."""
    model = common.model(dropout=0.3)
    before = final_weights(model)
    source = sys.argv[4]
    error = error_of(
        lambda: model.train(common.crash_params(n_epochs=2, resume_from_run_id=source), root=root / "reference",
                            distributed=distributed.DDP())
    )
    result = {"error": error, "untouched": common.same(before, final_weights(model))}
    if torch.distributed.get_world_size() == 1:
        distributed.shutdown(timeout_seconds=30)
        return result
    left = [out / f"refuse_left_rank{r}" for r in (0, 1)]
    if rank == 2:  # the missing rank: alive, but at the teardown barrier only after the others left it
        deadline = time.monotonic() + 60  # a hang guard: ranks 0 and 1 leave after their 2 s timeout
        while not all(p.exists() for p in left) and time.monotonic() < deadline:
            time.sleep(0.05)
        result["others_left_first"] = all(p.exists() for p in left)
        return result
    result["shutdown"] = error_of(lambda: distributed.shutdown(timeout_seconds=2))
    left[rank].touch()
    return result


def launch_hooks(rank: int, out: Path, root: Path) -> dict[str, Any]:
    """A failing on_train_begin on rank 1 only: every rank raises, each finalizes exactly the
    callbacks whose begin completed on it. A refused resume="auto" leaves the run's bytes as
    they were."""
    log: list[str] = []
    error = error_of(lambda: common.model().train(
        common.crash_params(n_epochs=1), callbacks=common.hook_callbacks(log, fail_on=(1,)), root=root / "hooks",
        distributed=distributed.DDP()))
    result: dict[str, Any] = {"error": error, "log": log}
    # a refused resume="auto" writes nothing: epoch 0 committed with an EarlyStopping's state, then
    # the same run continued with an EarlyStopping of another monitor is refused on every rank
    params = common.crash_params(n_epochs=3, resume="auto")
    crashed = error_of(lambda: common.model().train(
        params, callbacks=[nnx.EarlyStopping(patience=5), common.CrashAt(1)], root=root / "refused",
        distributed=distributed.DDP()))
    folder = root / "refused" / nnx.NNRun(config=common.model().run_config(params, None), root=".").id
    before = common.files_under(folder) if rank == 0 else None
    refused = error_of(lambda: common.model().train(
        params, callbacks=[nnx.EarlyStopping(monitor="val_edp.loss", patience=5)], root=root / "refused",
        distributed=distributed.DDP()))
    result["refused_resume"] = {
        "crashed": crashed, "error": refused, "unchanged": None if rank else common.files_under(folder) == before,
    }
    gc.collect()  # three fits have ended (one failed at begin, one crashed, one refused)
    result["ddp_alive"] = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    distributed.shutdown(timeout_seconds=30)
    return result


def launch_custom(rank: int, out: Path, root: Path) -> dict[str, Any]:
    """A custom train_step_fn on 2 ranks: weighed and unweighed, a step failure and a NaN loss on
    rank 1 only, and the number of gradient all-reduces (one per optimizer step)."""
    result: dict[str, Any] = {}
    real_all_reduce, joins = torch.distributed.all_reduce, []

    def counted(tensor: torch.Tensor, *args: Any, **kw: Any) -> Any:
        if tensor.numel() > 16:  # a gradient buffer (agreements are a few values)
            joins.append(tensor.numel())
        return real_all_reduce(tensor, *args, **kw)

    torch.distributed.all_reduce = counted
    for weigh in (True, False):
        model = common.model()
        run = model.train(common.custom_params(single=False), train_step_fn=common.custom_step(weigh=weigh),
                          salt=f"weigh-{weigh}", root=root / "custom", distributed=distributed.DDP())
        result[f"weigh={weigh}"] = {"final": final_weights(model), "idps": run.idps, "joins": len(joins)}
        joins.clear()
    model = common.model()  # a custom validation on each rank's shard
    run = model.train(common.custom_params(single=False, val_loader=distributed.validation_loader(common.validation_set(), 8)),
                      train_step_fn=common.custom_step(weigh=True), eval_step_fn=common.custom_eval_step,
                      salt="eval", root=root / "custom", distributed=distributed.DDP())
    result["eval"] = {"idps": run.idps, "final": final_weights(model)}
    logs = [common.WindowLog(), common.WindowLog()]  # a history journal: crashed at epoch 2, then resumed
    params = common.custom_params(single=False, resume="auto")
    result["journal_crash"] = error_of(lambda: common.model().train(
        params, history=common.JOURNAL, callbacks=[logs[0], common.CrashAt(2)], salt="journal", root=root / "journal",
        distributed=distributed.DDP()))
    run = common.model().train(params, history=common.JOURNAL, callbacks=[logs[1]], salt="journal", root=root / "journal",
                               distributed=distributed.DDP())
    result["journal"] = {"windows": logs[0].seen + logs[1].seen, "id": run.id, "status": run.resume_status.mode,
                         "records": [(r.epoch_idx, r.batch_idx, r.train_edp.loss) for r in nnx.NNRun.load(run.id, root / "journal").idps]}
    for reduction in ("sum", "mean"):  # an assigned loss_fn: additive (the ranks' sum) and mean-reduced
        model = common.model()
        model.loss_fn = nn.CrossEntropyLoss(reduction=reduction, ignore_index=common.IGNORE)
        run = model.train(common.custom_params(single=False, optim=common.LOSS_FN_OPTIM), salt=f"loss-fn-{reduction}",
                          root=root / "custom", distributed=distributed.DDP())
        result[f"loss_fn={reduction}"] = {"final": final_weights(model), "idps": run.idps}
    model = common.model()  # a summed loss_fn through an objective: a sum term, summarised per sample of the union
    model.loss_fn = nn.CrossEntropyLoss(reduction="sum", ignore_index=common.IGNORE)
    run = model.train(common.custom_params(single=False, optim=common.LOSS_FN_OPTIM), objective=nnx.supervised_objective(),
                      salt="loss-fn-sum-objective", root=root / "custom", distributed=distributed.DDP())
    result["loss_fn=sum objective"] = {"idps": run.idps}
    for name, objective in (("supervised", nnx.supervised_objective()), ("kd", nnx.kd_objective(common.teacher(), alpha=0.3))):
        model = common.model()  # objectives through the update engine: accumulation 2, masks, clipping
        run = model.train(common.main_params(single=False, n_epochs=3), objective=objective, salt=f"objective-{name}",
                          root=root / "custom", distributed=distributed.DDP())
        result[f"objective={name}"] = {"final": final_weights(model), "idps": run.idps}
    for fault in ("fail", "nan"):  # an objective failing, or its loss NaN, on rank 1 only
        model = common.model()
        result[f"objective_{fault}"] = error_of(lambda model=model, fault=fault: model.train(
            common.custom_params(single=False, n_epochs=2), objective=common.FaultyObjective(fault), salt=f"objective-{fault}",
            root=root / "objective-faults", distributed=distributed.DDP()))
        result[f"objective_{fault}_final"] = final_weights(model)
    model = common.model(precision=nnx.PrecisionPolicy(mode="bf16"))  # the default step in bf16
    run = model.train(common.main_params(single=False), salt="bf16", root=root / "custom", distributed=distributed.DDP())
    result["bf16"] = {"idps": run.idps, "final": final_weights(model)}
    for name, kw in (("fail", {"fail": (1, 1, 2)}), ("nan", {"nan": (1, 1, 2)})):  # rank 1, epoch 1, batch 2
        model = common.model()
        result[name] = error_of(lambda model=model, name=name, kw=kw: model.train(
            common.custom_params(single=False, n_epochs=2), train_step_fn=common.custom_step(weigh=True, **kw),
            salt=name, root=root / "custom-faults", distributed=distributed.DDP(),
        ))
        result[f"{name}_final"] = final_weights(model)
        runs = root / "custom-faults"
        result[f"{name}_last"] = [RunFiles(FileStorage(runs), p.name).read_tag(LAST).epoch for p in runs.iterdir()
                                  if not p.name.startswith(".") and (p / "checkpoints").exists()] if rank == 0 else None
    torch.distributed.all_reduce = real_all_reduce
    return result


def launch_trainer(rank: int, out: Path, root: Path) -> dict[str, Any]:
    """Trainer on 2 ranks: the documented GAN example, and a step whose non-primary optimizer
    commits on its own cadence (update-clock schedules)."""
    import dataclasses
    import runpy

    from torch.utils.data import TensorDataset

    gan = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "gan_trainer.py"), run_name="gan_example")
    trainer, params = gan["build"](3)
    params = dataclasses.replace(params, train_loader=distributed.train_loader(TensorDataset(gan["ring"](512)), 32, "pad", 5))
    run = trainer.train(params, trainer_step_fn=gan["gan_step"], root=root / "trainer", distributed=distributed.DDP())
    result: dict[str, Any] = {"gan": {"final": final_weights(trainer.model), "idps": run.idps}}
    seen: list[tuple[float, float]] = []
    model = common.model()
    run = nnx.Trainer(model).train(common.cadence_params(single=False), trainer_step_fn=common.cadence_step(seen),
                                   root=root / "trainer", distributed=distributed.DDP())
    payload = run.checkpoint("last").payload()
    result["cadence"] = {"final": final_weights(model), "idps": run.idps, "seen": seen,
                         "counts": payload["update_counts"], "ticks": {n: s["ticks"] for n, s in payload["schedules"].items()}}
    return result


def fake_cuda_fp16() -> None:
    """Admit fp16 on the CPU, as if it were CUDA: the model resolves fp16 (autocast to float16, a
    ``GradScaler("cpu")``) and DDP's CUDA-only gate lets it through. Only this test worker does this."""
    from nnx_adapters.pytorch import devices
    from nnx_api.distributed import group as ddp_group

    ddp_group.FP16_DEVICES = frozenset({"cuda", "cpu"})
    real = devices.precision_problem
    devices.precision_problem = lambda mode, device: None if mode == "fp16" else real(mode, device)


def saved_scale(state: Any) -> float | None:
    """The loss scale a checkpoint saved with its optimizer (the first ``scaler`` state found)."""
    if isinstance(state, dict):
        if isinstance(state.get("scaler"), dict):
            return float(state["scaler"]["scale"])
        for value in state.values():
            found = saved_scale(value)
            if found is not None:
                return found
    return None


class UpdateLog(nnx.Callback):
    """Every committed update's (epoch, batch)."""

    distributed = "all"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def on_optimizer_update(self, ctx: Any, event: Any) -> None:
        self.seen.append((event.epoch_idx, event.batch_idx))


def launch_fp16(rank: int, out: Path, root: Path) -> dict[str, Any]:
    """fp16 (faked on the CPU) on 2 ranks: one rank's gradients overflow at epoch 0 batch 2 (really,
    or only in its scaler's flag); every rank must skip that same update and stay identical."""
    fake_cuda_fp16()
    return {case: fp16_case(case, rank, root) for case in common.FP16_CASES}


def fp16_case(case: str, rank: int, root: Path) -> dict[str, Any]:
    model = common.model(precision=nnx.PrecisionPolicy("fp16"))
    log, forwards = UpdateLog(), [0]
    model.net.register_forward_pre_hook(lambda m, args: forwards.__setitem__(0, forwards[0] + m.training))

    def here() -> bool:  # rank 1, in its FP16_INJECT-th training batch (one training forward per batch)
        return rank == 1 and forwards[0] == common.FP16_INJECT

    if case in ("default", "objective"):  # a real inf in rank 1's gradient (DDP averages it / the objective sums it)
        next(model.net.parameters()).register_hook(lambda g: g * float("inf") if here() else g)
    real_unscale = torch.amp.GradScaler._unscale_grads_

    def flagged(self: Any, *args: Any) -> Any:  # "flag": only rank 1's scaler sees an overflow
        found = real_unscale(self, *args)
        if case == "flag" and here():
            for flag in found.values():
                flag.fill_(1.0)
        return found

    torch.amp.GradScaler._unscale_grads_ = flagged
    scales: list[float] = []
    try:
        run = model.train(
            common.custom_params(single=False, n_epochs=2), callbacks=[log], root=root / "fp16", salt=case,
            distributed=distributed.DDP(), **common.fp16_entry(case, here, scales),
        )
    finally:
        torch.amp.GradScaler._unscale_grads_ = real_unscale
    return {"final": final_weights(model), "updates": log.seen, "scales": scales,
            "scaler": saved_scale(run.checkpoint("last").payload()),
            "idps": [(r.epoch_idx, r.batch_idx, r.train_edp.loss) for r in run.idps]}


LAUNCHES = {"main": launch_main, "crash": launch_crash, "resume": launch_resume, "refuse": launch_refuse,
            "hooks": launch_hooks, "custom": launch_custom, "trainer": launch_trainer, "fp16": launch_fp16}


def main() -> None:
    launch, out, root = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    info = distributed.init_process_group(timeout_seconds=30)
    result = LAUNCHES[launch](info.rank, out, root)
    torch.save(result, out / f"{launch}_rank{info.rank}.pt")


if __name__ == "__main__":
    main()
