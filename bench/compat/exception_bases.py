"""Which exception a user-level call raises, and which builtin classes that exception derives from.

    python bench/compat/exception_bases.py --package nnx      # NNx 0.4.1 (its own virtualenv)
    python bench/compat/exception_bases.py --package nnx_api  # this project

One line per probe: ``probe  ExceptionClass  builtin,bases`` (``-`` when nothing was raised).
Every probe is a short call written from the public API (REFERENCE names and signatures), run in a
temporary working directory so nothing lands in the caller's ``runs/``. The table in
``tests/compat/test_error_bases.py`` was recorded from NNx 0.4.1 with this script.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import importlib
import io
import os
import sys
import tempfile
import warnings
from typing import Any

BUILTINS = (
    "ValueError", "TypeError", "KeyError", "IndexError", "LookupError", "RuntimeError", "NotImplementedError",
    "FileExistsError", "FileNotFoundError", "NotADirectoryError", "OSError", "FloatingPointError",
    "ArithmeticError", "AttributeError", "TimeoutError", "PermissionError",
)


def bases(exc: BaseException) -> list[str]:
    """The builtins in ``BUILTINS`` that ``exc`` is an instance of."""
    return [name for name in BUILTINS if isinstance(exc, getattr(builtins, name))]


class _Table:
    """The least of a DataFrame a tabular dataset reads (where pandas is not installed)."""

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        self.data = columns
        self.columns = list(columns)

    def __getitem__(self, cols: Any) -> Any:
        import numpy as np

        if isinstance(cols, str):
            return _Column(np.asarray(self.data[cols]))
        missing = [c for c in cols if c not in self.data]
        if missing:
            raise KeyError(missing)
        return _Column(np.stack([np.asarray(self.data[c]) for c in cols], axis=1))

    def __len__(self) -> int:
        return len(next(iter(self.data.values())))


class _Column:
    def __init__(self, array: Any) -> None:
        self.array = array

    def to_numpy(self, *args: Any, **kwargs: Any) -> Any:
        return self.array


class Probes:
    """Each ``p_*`` method is one probe: a call that should be refused."""

    def __init__(self, package: str) -> None:
        self.nnx = importlib.import_module(package)
        self.pkg = package

    def mod(self, name: str) -> Any:
        return importlib.import_module(f"{self.pkg}.{name}")

    # ------------------------------------------------------------------------------- helpers
    def tiny(self, n: int = 16) -> tuple[list[Any], list[Any]]:
        import torch
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, 4, generator=g)
        y = torch.randint(0, 3, (n,), generator=g)
        return [(x[i:i + 8], y[i:i + 8]) for i in range(0, n, 8)], [(x, y)]

    def net(self) -> Any:
        return self.nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0)

    def sgd(self) -> Any:
        return self.nnx.NNOptimParams(name=self.nnx.Optims.SGD, max_lr=0.1, weight_decay=0.0, momentum=0.0)

    def model(self) -> Any:
        nnx = self.nnx
        return nnx.NNModel(self.net(), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))

    def train_params(self, **kw: Any) -> Any:
        nnx = self.nnx
        train, val = self.tiny()
        kw.setdefault("optim", self.sgd())
        kw.setdefault("train_loader", train)
        kw.setdefault("val_loader", val)
        return nnx.NNTrainParams(n_epochs=kw.pop("n_epochs", 1), **kw)

    def plan(self) -> Any:
        nnx = self.nnx
        train, val = self.tiny()
        optim = self.sgd()
        return (self.mod("plans").ExperimentPlan().with_net(self.net())
                .with_model(nnx.NNModelParams(net=nnx.Nets.FEED_FWD)).with_train(nnx.NNTrainParams(n_epochs=1, optim=optim))
                .with_data(train, val))

    # -------------------------------------------------------------------------------- params
    def p_params_epochs_zero(self) -> None:
        self.nnx.NNTrainParams(n_epochs=0)

    def p_params_epochs_str(self) -> None:
        self.nnx.NNTrainParams(n_epochs="3")

    def p_params_lr_negative(self) -> None:
        self.nnx.NNOptimParams(name=self.nnx.Optims.SGD, max_lr=-1.0, weight_decay=0.0, momentum=0.0)

    def p_params_input_dim_zero(self) -> None:
        self.nnx.NNParams(input_dim=0, output_dim=3, hidden_dims=[8], dropout_prob=0.0)

    def p_params_data_id_blank(self) -> None:
        self.nnx.NNTrainParams(n_epochs=1, data_id=" ")

    def p_params_parent_and_resume(self) -> None:
        self.nnx.NNTrainParams(n_epochs=1, parent_run_id="a", resume_from_run_id="b")

    def p_model_no_net_params(self) -> None:
        self.nnx.NNModel(None, self.nnx.NNModelParams(net=self.nnx.Nets.FEED_FWD))

    def p_precision_mode(self) -> None:
        self.nnx.PrecisionPolicy(mode="fp8")

    # -------------------------------------------------------------------------------- search
    def p_search_float_low_above_high(self) -> None:
        self.mod("search").FloatParam(name="lr", low=1.0, high=0.1)

    def p_search_float_log_nonpositive(self) -> None:
        self.mod("search").FloatParam(name="lr", low=0.0, high=1.0, log=True)

    def p_search_float_step_nonpositive(self) -> None:
        self.mod("search").FloatParam(name="lr", low=0.0, high=1.0, step=0.0)

    def p_search_int_low_above_high(self) -> None:
        self.mod("search").IntParam(name="n", low=5, high=1)

    def p_search_int_step_zero(self) -> None:
        self.mod("search").IntParam(name="n", low=1, high=5, step=0)

    def p_search_categorical_empty(self) -> None:
        self.mod("search").CategoricalParam(name="c", choices=())

    def p_search_space_empty(self) -> None:
        self.mod("search").SearchSpace()

    def p_search_space_duplicate(self) -> None:
        s = self.mod("search")
        s.SearchSpace(s.IntParam(name="n", low=1, high=2), s.IntParam(name="n", low=1, high=3))

    def p_search_budget_trials_zero(self) -> None:
        self.mod("search").SearchBudget(trials=0)

    def p_search_budget_trials_float(self) -> None:
        self.mod("search").SearchBudget(trials=1.5)

    def p_search_budget_updates_zero(self) -> None:
        self.mod("search").SearchBudget(trials=1, updates_per_trial=0)

    def p_search_budget_deadline_zero(self) -> None:
        self.mod("search").SearchBudget(trials=1, deadline_seconds=0)

    def p_search_blank_study_name(self) -> None:
        s = self.mod("search")
        s.search(self.plan(), s.SearchSpace(s.IntParam(name="n", low=1, high=2)), apply=lambda p, v: p,
                 monitor=self.nnx.MonitorSpec(), budget=s.SearchBudget(trials=1), study_name="")

    # --------------------------------------------------------------------------------- plans
    def p_plan_empty_fit(self) -> None:
        self.mod("plans").ExperimentPlan().fit()

    def p_plan_epochs_zero(self) -> None:
        self.plan().with_epochs(0)

    def p_plan_seed_str(self) -> None:
        self.plan().with_seed("x").fit()

    def p_plan_attempt_reused(self) -> None:
        plan = self.plan()
        plan.fit(attempt="a")
        plan.fit(attempt="a")

    # ------------------------------------------------------------------------------ monitors
    def p_monitor_split(self) -> None:
        self.nnx.MonitorSpec(split="test")

    def p_monitor_mode(self) -> None:
        self.nnx.MonitorSpec(mode="up")

    def p_monitor_min_delta_negative(self) -> None:
        self.nnx.MonitorSpec(min_delta=-1.0)

    def p_monitor_on_missing(self) -> None:
        self.nnx.MonitorSpec(on_missing="ignore")

    def p_monitor_blank_metric(self) -> None:
        self.nnx.MonitorSpec(metric="")

    def p_monitor_undeclared_metric(self) -> None:
        self.model().train(self.train_params(monitor=self.nnx.MonitorSpec("f1")))

    def p_monitor_missing_error_policy(self) -> None:
        nnx = self.nnx
        self.model().train(self.train_params(
            metrics=(nnx.MetricSpec("nll"),), monitor=nnx.MonitorSpec("nll", split="val", on_missing="error"),
            val_loader=None))

    def p_metric_reserved_name(self) -> None:
        self.nnx.MetricSpec("accuracy", name="loss")

    def p_metric_unknown_id(self) -> None:
        nnx = self.nnx
        self.model().train(self.train_params(metrics=(nnx.MetricSpec("no-such-metric"),)))

    def p_monitor_nonfinite_error_policy(self) -> None:
        import torch
        nnx = self.nnx
        train, _ = self.tiny()
        val = [(torch.full((8, 4), float("nan")), torch.zeros(8, dtype=torch.long))]
        self.model().train(self.train_params(val_loader=val, monitor=nnx.MonitorSpec("loss", on_nonfinite="error")))

    def p_early_stopping_mode(self) -> None:
        self.nnx.EarlyStopping(mode="up")

    def p_early_stopping_patience_negative(self) -> None:
        self.nnx.EarlyStopping(patience=-1)

    def p_early_stopping_spec_with_mode(self) -> None:
        self.nnx.EarlyStopping(monitor=self.nnx.MonitorSpec("loss"), mode="max")

    def p_early_stopping_other_spec(self) -> None:
        nnx = self.nnx
        params = self.train_params(metrics=(nnx.MetricSpec("nll"),), monitor=nnx.MonitorSpec("nll"))
        self.model().train(params, callbacks=[nnx.EarlyStopping(monitor=nnx.MonitorSpec("loss"))])

    # ----------------------------------------------------------------------------------- DDP
    def p_ddp_writer_rank_negative(self) -> None:
        self.mod("distributed").DDP(writer_rank=-1)

    def p_ddp_without_group(self) -> None:
        self.model().train(self.train_params(), distributed=self.mod("distributed").DDP())

    def p_rank_partition_rank_out_of_range(self) -> None:
        self.mod("distributed").RankPartition(10, rank=3, world_size=2)

    def p_rank_partition_policy(self) -> None:
        self.mod("distributed").RankPartition(10, rank=0, world_size=2, policy="wrap")

    # ------------------------------------------------------------------------- runs, resume
    def p_run_load_missing(self) -> None:
        self.nnx.NNRun.load("no-such-run")

    def p_run_load_traversal(self) -> None:
        self.nnx.NNRun.load("../escape")

    def p_run_exists(self) -> None:
        self.model().train(self.train_params())
        self.model().train(self.train_params())

    def p_resume_missing_run(self) -> None:
        self.model().train(self.train_params(resume_from_run_id="no-such-run"))

    def p_resume_missing_tag(self) -> None:
        run = self.model().train(self.train_params(save_phase_checkpoints=False))
        self.model().train(self.train_params(n_epochs=2, resume_from_run_id=run.id, resume_from_checkpoint="q1"))

    def p_resume_mode_bad(self) -> None:
        self.train_params(resume_mode="sometimes")

    def p_resume_other_optimizer(self) -> None:
        nnx = self.nnx
        run = self.model().train(self.train_params())
        adam = nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.1, weight_decay=0.0, momentum=(0.9, 0.999))
        train, val = self.tiny()
        params = nnx.NNTrainParams(n_epochs=2, optim=adam, train_loader=train, val_loader=val,
                                   resume_from_run_id=run.id, resume_mode="stateful")
        self.model().train(params)

    def p_model_factory_missing(self) -> None:
        nnx = self.nnx
        nnx.NNModel(None, nnx.NNModelParams(net=nnx.ModelSpec("no-such-model", 1, {})))

    def p_optimizer_factory_missing(self) -> None:
        nnx = self.nnx
        optim = nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec("no-such-optimizer", 1, {}), max_lr=0.1)
        self.model().train(self.train_params(optim=optim))

    def p_precision_fp16_on_cpu(self) -> None:
        nnx = self.nnx
        model = nnx.NNModel(self.net(), nnx.NNModelParams(net=nnx.Nets.FEED_FWD,
                                                          precision=nnx.PrecisionPolicy(mode="fp16")))
        model.train(self.train_params())

    def p_nonfinite_loss(self) -> None:
        import torch
        x = torch.full((8, 4), float("nan"))
        y = torch.zeros(8, dtype=torch.long)
        self.model().train(self.train_params(train_loader=[(x, y)], val_loader=[(x, y)]))

    def p_target_out_of_range(self) -> None:
        import torch
        x = torch.zeros(8, 4)
        y = torch.full((8,), 7, dtype=torch.long)
        self.model().train(self.train_params(train_loader=[(x, y)], val_loader=[(x, y)]))

    def p_step_and_objective(self) -> None:
        nnx = self.nnx
        self.model().train(self.train_params(), train_step_fn=nnx.default_train_step,
                           objective=nnx.supervised_objective())

    def p_schedule_budget_too_small(self) -> None:
        nnx = self.nnx
        sched = nnx.NNSchedulerParams(min_lr=1e-7, factor=0.95, patience=8, cooldown=2, threshold=1e-3,
                                      kind=nnx.Schedulers.ONE_CYCLE, max_lr=0.1, total_steps=1, clock="optimizer_update")
        self.model().train(self.train_params(scheduler=sched, n_epochs=2))

    def p_run_exists_other_data(self) -> None:
        self.model().train(self.train_params())
        train, val = self.tiny()
        other = [(x + 1.0, y) for x, y in train]
        self.model().train(self.train_params(train_loader=other))

    def p_tabular_missing_column(self) -> None:
        columns = {"a": [0.0, 1.0, 2.0, 3.0], "y": [0, 1, 0, 1]}
        try:
            import pandas as pd
            df = pd.DataFrame(columns)
        except ImportError:  # this project reads any table with ``columns`` and ``df[cols].to_numpy()``
            df = _Table(columns)
        self.nnx.NNTabularDataset(df=df, feature_cols=["a", "b"], target_col="y")

    def p_predict_wrong_width(self) -> None:
        import torch
        self.model().predict(torch.zeros(2, 5))

    def p_search_float_low_equals_high(self) -> None:
        self.mod("search").FloatParam(name="lr", low=0.5, high=0.5)

    def p_search_float_step_and_log(self) -> None:
        self.mod("search").FloatParam(name="lr", low=0.1, high=1.0, log=True, step=0.1)

    def p_search_int_log_nonpositive(self) -> None:
        self.mod("search").IntParam(name="n", low=0, high=4, log=True)

    def p_freeze_no_patterns(self) -> None:
        self.model().freeze()

    def p_train_no_loader(self) -> None:
        nnx = self.nnx
        self.model().train(nnx.NNTrainParams(n_epochs=1))


def run(package: str, only: list[str] | None = None) -> list[tuple[str, str, list[str], str]]:
    """``(probe, exception class or "-", builtin bases, message)`` for every probe (each in a fresh
    cwd, its prints swallowed)."""
    probes = Probes(package)
    rows = []
    names = sorted(n[2:] for n in dir(Probes) if n.startswith("p_"))
    home = os.getcwd()
    for name in names:
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    getattr(probes, "p_" + name)()
            except Exception as exc:  # noqa: BLE001 - the point is to record what was raised
                rows.append((name, type(exc).__name__, bases(exc), str(exc).splitlines()[0] if str(exc) else ""))
            else:
                rows.append((name, "-", [], ""))
            finally:
                os.chdir(home)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="nnx_api", help="nnx (NNx 0.4.1) or nnx_api (this project)")
    parser.add_argument("--messages", action="store_true", help="also print each exception's first line")
    parser.add_argument("probes", nargs="*", help="only these probes")
    args = parser.parse_args(argv)
    for name, cls, found, message in run(args.package, args.probes):
        print(f"{name:36} {cls:30} {','.join(found) or '-'}" + (f"  # {message[:140]}" if args.messages else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
