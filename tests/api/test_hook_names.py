"""A callback's hooks are checked when it is given: a method named like a hook that NNx never
calls is said, with NNx's hook; nothing NNx calls is left unchecked. Oracle: the callback counts
what NNx actually called."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx


def fit(tmp_path, callbacks):
    x, y = torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 3
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=DataLoader(TensorDataset(x, y), batch_size=8), progress=False)
    return model.train(params, callbacks=callbacks, root=tmp_path)


class Ported(nnx.Callback):
    """Lightning's and Keras's names and a typo beside one real hook."""

    def __init__(self) -> None:
        self.called: list[str] = []

    def on_train_epoch_end(self, ctx):
        self.called.append("on_train_epoch_end")

    def on_train_batch_end(self, ctx):
        self.called.append("on_train_batch_end")

    def on_epoc_begin(self, ctx):
        self.called.append("on_epoc_begin")

    def on_epoch_end(self, ctx):
        self.called.append("on_epoch_end")


def test_a_method_named_like_a_hook_nnx_never_calls_is_said_with_the_hook_meant(tmp_path):
    ported = Ported()
    with pytest.warns(UserWarning) as caught:
        fit(tmp_path, [ported])
    said = [str(w.message) for w in caught if "is not an NNx hook" in str(w.message)]
    assert ported.called == ["on_epoch_end", "on_epoch_end"]  # the three others were never called: NNx says so
    assert len(said) == 3
    expected = {"on_train_epoch_end": "on_epoch_end(ctx)", "on_train_batch_end": "on_optimizer_update(ctx, event)",
                "on_epoc_begin": "on_epoch_begin(ctx)"}
    for name, meant in expected.items():
        assert any(f"Ported.{name} is not an NNx hook and is never called; did you mean {meant}?" in s for s in said), name


def test_nnx_own_callbacks_and_plain_hooks_are_not_warned_of(tmp_path, recwarn):
    class Fine(nnx.Callback):
        def on_epoch_end(self, ctx):
            pass

        def helper(self):
            pass

    fit(tmp_path, [Fine(), nnx.LRMonitor(), nnx.EarlyStopping(patience=5)])
    assert not [w for w in recwarn if "not an NNx hook" in str(w.message)]
