"""``Trainer``: one model, several named optimizers (GANs, actor/critic, encoder/head splits).

    trainer = nnx.Trainer(model)
    run = trainer.train(
        nnx.NNTrainerParams(n_epochs=20, optims={"gen": gen_opt, "disc": disc_opt}, train_loader=loader),
        trainer_step_fn=gan_step,              # or objective=... (the shared update engine)
    )

Each optimizer owns a strict, disjoint set of parameters (its ``param_groups``; with one optimizer
and no groups, every trainable parameter), has at most one scheduler and counts its own committed
updates. A step reports each optimizer step with ``ctx.report_update(name)``. The run follows the
same pipeline, lifecycle, commit protocol and callbacks as ``NNModel.train`` (``nnx_api.launch``:
NNModel is the one-optimizer case); its identity adds a ``trainer`` section, and every checkpoint holds each
named optimizer's and scheduler's state, so a Trainer run resumes exactly. A Trainer checkpoint
resumes only through ``Trainer`` and an NNModel checkpoint only through ``NNModel`` (unless
``resume_mode="weights_only"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nnx_core.errors import ContextAttributeError, ParamsError
from nnx_api.config.builders import NNTrainerParamsBuilder
from nnx_api.config.identity import run_config
from nnx_api.config.train_params import NNTrainerParams, refuse_train_keywords
from nnx_api.distributed import DDP, refuse_process_group
from nnx_api.launch import TrainingEntry, launch
from nnx_api.model import NNModel
from nnx_api.runs.run import NNRun
from nnx_api.scope import EXTRAS, refuse
from nnx_api.training.roles import TRAINER
from nnx_api.training.steps import TrainerStepContext

_NOT_HERE = ("Trainer.should_stop is Lightning's name, and setting it would stop nothing: in a callback set "
             "ctx.should_stop = True (training stops after the epoch commits) or ctx.stop_at_update = True")


class Trainer:
    """Train an ``NNModel`` with several named optimizers (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        if not isinstance(model, NNModel):
            raise ParamsError("Trainer.model", f"Trainer needs a non-None model, an NNModel; got {type(model).__name__}")
        self.model = model

    @property
    def should_stop(self) -> bool:
        """Not NNx's: Lightning's ``trainer.should_stop``. A callback stops a run with
        ``ctx.should_stop = True``; reading or setting it here raises ``ContextAttributeError``."""
        raise ContextAttributeError(_NOT_HERE)

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        raise ContextAttributeError(_NOT_HERE)

    def run_config(self, params: NNTrainerParams, salt: str | None) -> dict[str, Any]:
        """The configuration whose content address is the run id (model, ``train``, ``trainer``)."""
        return run_config(self.model.state(), params.representative().state(), salt, trainer=params.state())

    # ------------------------------------------------------------ training
    def train(
        self,
        params: NNTrainerParams,
        trainer_step_fn: Callable[[TrainerStepContext], Any] | None = None,
        callbacks: Sequence[Any] | None = None,
        salt: str | None = None,
        root: Any = None,
        components: Sequence[Any] | None = None,
        objective: Any = None,
        eval_step_fn: Callable[..., Any] | None = None,
        history: Any = None,
        storage: Any = None,
        provenance: Any = None,
        compile: Any = None,  # noqa: A002 - NNx's keyword
        distributed: Any = None,
        **misplaced: Any,
    ) -> NNRun:
        """Train into ``<root>/<run id>/`` and return the committed :class:`NNRun` (as NNModel.train;
        ``storage=`` a ``Storage`` adapter, default the file system under ``root``; NNx's
        ``provenance=`` is out of scope: ``OutOfScopeError``; ``distributed=nnx.distributed.DDP()``
        trains on every rank of a torchrun group, docs/distributed.md). ``compile=`` is refused before
        anything is written: it compiles NNModel's built-in default step, and a Trainer run's
        forwards are in its ``trainer_step_fn`` or objective."""
        refuse_train_keywords("Trainer.train", NNTrainerParams, Trainer.train, misplaced)
        if provenance is not None:
            refuse("Trainer.train(provenance=...)", EXTRAS)
        if distributed is None:
            refuse_process_group("Trainer.train")
        elif not isinstance(distributed, DDP):
            raise ParamsError("distributed", f"must be nnx.distributed.DDP() or None, got {type(distributed).__name__}")
        if params is None:
            raise ParamsError("params", "params must not be None; pass NNTrainerParams(...)")
        if not isinstance(params, NNTrainerParams):
            raise ParamsError("params", f"must be NNTrainerParams, got {type(params).__name__}")
        return launch(
            TrainingEntry(
                kind=TRAINER, model=self.model, params=params, train=params.representative(),
                config=self.run_config(params, salt), optims=dict(params.optims),
                schedulers={name: params.scheduler_for(name) for name in params.optims}, primary=params.primary,
                strict_groups=True, auto_step=params.auto_step_schedulers, step_fn=trainer_step_fn,
                objective=objective, eval_step_fn=eval_step_fn, callbacks=callbacks or (), components=components or (),
                history=history, root=root, storage=storage, trainer=self, compile=compile, distributed=distributed,
            )
        )


__all__ = ["NNTrainerParams", "NNTrainerParamsBuilder", "Trainer", "TrainerStepContext"]
