"""Single-node data parallelism on torchrun (seed §3): ``nnx.distributed``.

    torchrun --standalone --nproc_per_node=2 train.py

    nnx.distributed.init_process_group()                      # gloo on CPU, nccl with one GPU per rank
    params = nnx.NNTrainParams(..., train_loader=nnx.distributed.train_loader(train_set, 32, seed=0),
                               val_loader=nnx.distributed.validation_loader(val_set, 256))
    run = model.train(params, distributed=nnx.distributed.DDP())   # the same NNRun on every rank
    nnx.distributed.shutdown()

NNx adds no runtime of its own: the process group is the one torchrun started, and a run goes
through the same pipeline as one process (``nnx_api.launch``). What ``DDP()`` adds is that every
committed update equals one process training on the union of the ranks' batches, every rank
makes the same decisions, one writer commits, and no failure it can see hangs
(``nnx_api.distributed.group``; the rules: ``nnx_core.agreement``).
"""

from __future__ import annotations

from typing import Any

import attrs
import torch.distributed as dist

from nnx_core.agreement import AgreedError
from nnx_core.errors import ParamsError
from nnx_adapters.collective.torch import TorchCollective
from nnx_api.distributed.callbacks import WriterOnly, writer_only
from nnx_api.distributed.group import DataParallel, RankSync
from nnx_api.distributed.loaders import ShardedTrainLoader, ShardedValidationLoader, train_loader, validation_loader
from nnx_api.distributed.partition import RankPartition
from nnx_api.distributed.process_group import GroupInfo, init_process_group, refuse_process_group, shutdown
from nnx_api.runs.payload import DDP_KIND

DistributedFailure = AgreedError
"""NNx's name for the error a rank raises when another rank failed (``except DistributedFailure``
catches it): here the ``AgreedError`` naming the failing rank, its error type and message (a
``RuntimeError``); an error of NNx's own types is raised on every rank as that type instead."""


def _check_writer_rank(instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParamsError("DDP.writer_rank", f"must be an int ≥ 0, got {value!r}")


@attrs.frozen
class DDP:
    """``model.train(params, distributed=DDP())``: data parallel over the torchrun group.

    ``writer_rank`` is the one rank that holds the run lease and writes the run's files.
    ``collective``: the ``Collective`` adapter to train over (built alike on every rank, after
    ``init_process_group``); default: ``TorchCollective`` over the process group.
    """

    writer_rank: int = attrs.field(default=0, validator=_check_writer_rank)
    collective: Any = attrs.field(default=None, kw_only=True, eq=False)

    def group(self) -> DataParallel:
        """The session's group behaviour for this rank (built on every rank at the same point).
        Without a process group (a script not started by torchrun) it raises ``RuntimeError``."""
        if self.collective is None and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "distributed=DDP() trains inside a torch.distributed process group, and there is none: start the "
                "script with torchrun (`torchrun --standalone --nproc_per_node=2 train.py`) and call "
                "nnx.distributed.init_process_group() first"
            )
        collective = self.collective if self.collective is not None else TorchCollective(writer_rank=self.writer_rank)
        if not 0 <= self.writer_rank < collective.world_size:
            raise ParamsError("DDP.writer_rank", f"{self.writer_rank} is not a rank of this {collective.world_size}-rank group")
        return DataParallel(collective, self.writer_rank)


__all__ = [
    "DDP",
    "DDP_KIND",
    "DataParallel",
    "DistributedFailure",
    "GroupInfo",
    "RankPartition",
    "RankSync",
    "ShardedTrainLoader",
    "ShardedValidationLoader",
    "WriterOnly",
    "init_process_group",
    "refuse_process_group",
    "shutdown",
    "train_loader",
    "validation_loader",
    "writer_only",
]
