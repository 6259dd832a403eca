"""``resume_mode="reshard"``: a rank the checkpoint had restores its own RNG streams; a rank new
to the group gets streams of its own, derived deterministically (``CheckpointPayload.reshard_view``)."""

from __future__ import annotations

import pytest
import torch

from nnx_adapters.pytorch import state as torch_state
import nnx_api as nnx
from nnx_api.runs.payload import CheckpointPayload


def checkpoint_with_ranks(n: int) -> CheckpointPayload:
    streams = []
    for rank in range(n):
        torch.manual_seed(100 + rank)
        streams.append(torch_state.capture_rng())
    return CheckpointPayload(kind="nnmodel-ddp", epoch=0, weights={}, rng={"ranks": streams}, optimizer={}, schedule={},
                             components={}, update_count=0, transforms={})


def test_a_rank_the_checkpoint_had_keeps_its_streams_and_a_new_rank_gets_its_own():
    payload = checkpoint_with_ranks(2)
    draws = []
    for rank in range(4):
        torch_state.restore_rng(payload.reshard_view(rank).rng)
        draws.append(torch.rand(4))
    for rank in range(2):  # the checkpoint's own ranks: exactly their streams
        torch_state.restore_rng(payload.rank_view(rank).rng)
        assert torch.equal(torch.rand(4), draws[rank])
    assert len({tuple(d.tolist()) for d in draws}) == 4  # no two ranks draw the same
    torch_state.restore_rng(payload.reshard_view(3).rng)
    assert torch.equal(torch.rand(4), draws[3])  # derived deterministically


def test_one_process_refuses_reshard_before_writing_anything(tmp_path):
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    with pytest.raises(nnx.ParamsError, match="distributed=nnx.distributed.DDP"):
        model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], resume="auto", resume_mode="reshard"), root=tmp_path)
    assert not any(tmp_path.iterdir())
