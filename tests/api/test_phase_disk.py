"""What phase checkpoints keep on disk (docs/performance.md, "Disk: phase checkpoints").

The phase rule tags the run's quarters with the same full state as LAST; tags of one epoch share
one blob and a blob no tag names is removed when its last tag moves. So however many epochs a run
has, its checkpoint objects are exactly the states of the epochs its tags name: at most six
(first, q1, q2, q3, best, last) with phase checkpoints, at most two (best, last) without. The
oracle is the phase rule of the reference (0 → first, int(n/4)-1 → q1, int(n/2)-1 → q2,
int(3n/4)-1 → q3, an elif chain), written out here.
"""

from __future__ import annotations

import json

import pytest
import torch

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data


def phase_epochs(n: int) -> set[int]:
    """The epochs the reference's elif chain tags first / q1 / q2 / q3 in an n-epoch call."""
    tagged: set[int] = set()
    for e in range(n):
        if e == 0 or e in (int(n / 4) - 1, int(n / 2) - 1, int(3 * n / 4) - 1):
            tagged.add(e)
    return tagged


@pytest.mark.parametrize("phases", [True, False])
def test_a_run_keeps_one_state_per_tagged_epoch_and_no_more(tmp_path, phases):
    n = 12
    x, y = tiny_data(n=32)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    run = model.train(nnx.NNTrainParams(n_epochs=n, train_loader=batches(x, y, 8), progress=False, seed=0,
                                        save_phase_checkpoints=phases), root=tmp_path)
    folder = tmp_path / run.id / "checkpoints"
    tags = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
    named = {t["blobs"]["state"]["sha256"] for t in tags.values()}
    objects = {p.name for p in (folder / "objects").iterdir()}
    assert objects == named  # nothing kept that no tag names
    epochs = {t["epoch"] for name, t in tags.items() if name not in ("last", "best")}
    assert epochs == (phase_epochs(n) if phases else set())
    assert len(objects) <= (6 if phases else 2)
