"""A run that committed epochs but holds no BEST says why, and which tag to read instead.

BEST is written only by an epoch that improves on the best so far. A continuation
(``resume_from_run_id``) starts from its source's best, so when none of its epochs improves on it
the continuation has no BEST of its own; ``from_checkpoint(id, "best")`` then names the source's
``best`` and this run's ``last``. The same refusal serves every reader of a tag (prediction,
export, a continuation's source).
"""

from __future__ import annotations

import pytest
import torch

from nnx_core.errors import RunNotFoundError
import nnx_api as nnx
from nnx_api.runs.export import export_safetensors

from tests.api.tiny import batches, tiny_data


def model() -> nnx.NNModel:
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def test_a_continuation_that_never_improves_names_the_source_best_and_its_own_last(tmp_path):
    x, y = tiny_data(n=32)
    good = batches(x, y, 8)
    source = model().train(nnx.NNTrainParams(n_epochs=3, train_loader=good, val_loader=good, progress=False,
                                             optim=nnx.NNOptimParams(name="sgd", max_lr=0.5)), root=tmp_path)
    assert "best" in source.tags()
    # the continuation trains on wrong labels (its optimizer is the source's, restored with its learning rate):
    # its validation loss never improves on the source's best
    wrong = batches(x, (y + 1) % 3, 8)
    continued = model().train(nnx.NNTrainParams(n_epochs=2, train_loader=wrong, val_loader=good, progress=False,
                                                optim=nnx.NNOptimParams(name="sgd", max_lr=0.5), resume_from_run_id=source.id),
                              root=tmp_path)
    assert "best" not in continued.tags() and "last" in continued.tags()
    with pytest.raises(RunNotFoundError) as refused:
        nnx.NNModel.from_checkpoint(continued.id, "best", root=tmp_path)
    said = str(refused.value)
    assert f"continues run {source.id}" in said and f"from_checkpoint({source.id!r}, 'best')" in said and "'last'" in said
    with pytest.raises(RunNotFoundError, match=f"continues run {source.id}"):
        export_safetensors(continued.id, tmp_path / "w.safetensors", tag="best", root=tmp_path)
    assert nnx.NNModel.from_checkpoint(source.id, "best", root=tmp_path) is not None  # the way the message names


def test_any_other_missing_tag_is_named_with_the_tags_there_are(tmp_path):
    x, y = tiny_data(n=16)
    run = model().train(nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 8), progress=False), root=tmp_path)
    with pytest.raises(RunNotFoundError, match=r"no committed 'q2' checkpoint \(tags: .*last"):
        nnx.NNModel.from_checkpoint(run.id, "q2", root=tmp_path)
