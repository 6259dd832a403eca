"""``Staging``: a snapshot ``torch.save`` writes with the live state's exact bytes, that training
cannot change afterwards, in buffers reused from snapshot to snapshot; ``holds`` says whether a
payload is still byte for byte the last snapshot. The oracle is ``torch.save`` of the live state."""

from __future__ import annotations

import collections
import io
import zipfile

import torch

from nnx_adapters.pytorch.staging import Staging
from nnx_adapters.pytorch.state import capture_rng, encoder


def _saved(payload) -> bytes:
    sink = io.BytesIO()
    encoder(payload)(sink)
    return sink.getvalue()


def _payload():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    embedding, head = torch.nn.Embedding(4, 3), torch.nn.Linear(3, 4, bias=False)
    head.weight = embedding.weight  # tied: one storage, saved once
    optimizer = torch.optim.Adam([*net.parameters(), embedding.weight], lr=0.1)
    net(torch.randn(2, 6)).sum().backward()
    optimizer.step()
    payload = {
        "weights": net.state_dict(), "tied": {"a": embedding.state_dict(), "b": head.state_dict()},
        "optimizer": optimizer.state_dict(), "view": torch.arange(10.0)[2:7:2], "rng": capture_rng(),
        "plain": [1, 2.5, "x", (3, None)], "parameter": torch.nn.Parameter(torch.ones(3)),
        "ordered": collections.OrderedDict(b=torch.zeros(2), a=-0.0),
    }
    return net, optimizer, payload


def test_the_encoder_is_sized_by_the_storages_torch_save_writes():
    """``encoder(...).size`` (a store picks its writer by it): the bytes of every storage the
    archive holds, a tied or viewed one once and whole. Oracle: the archive's data records."""
    _, _, payload = _payload()
    with zipfile.ZipFile(io.BytesIO(_saved(payload))) as archive:
        stored = sum(item.file_size for item in archive.infolist() if "/data/" in item.filename)
    assert encoder(payload).size == stored > 0


def test_a_snapshot_is_saved_with_the_live_states_bytes_and_stays_when_training_moves_on():
    net, optimizer, payload = _payload()
    staging = Staging()
    snapshot = staging.snapshot(payload)
    before = _saved(payload)
    assert _saved(snapshot) == before
    net(torch.randn(2, 6)).sum().backward()
    optimizer.step()  # the live weights and moments change in place
    payload["view"].add_(1)
    assert _saved(snapshot) == before and _saved(payload) != before


def test_storages_of_every_size_are_copied_whole():
    """A storage is copied as the widest words that tile it: every byte count (1, 2, 3, 6, 12,
    empty...) and dtype keeps its bytes."""
    torch.manual_seed(1)
    payload = {
        f"{dtype}-{n}": (torch.randn(n) * 100).to(dtype) for dtype in (torch.uint8, torch.int16, torch.bool,
                                                                     torch.float16, torch.float32, torch.float64)
        for n in (0, 1, 3, 5)
    }
    snapshot = Staging().snapshot(payload)
    assert _saved(snapshot) == _saved(payload)
    assert all(torch.equal(snapshot[k], payload[k]) for k in payload)


def test_buffers_are_reused_and_a_new_snapshot_overwrites_them():
    _, _, payload = _payload()
    staging = Staging()
    staging.snapshot(payload)
    buffers = [b.data_ptr() for b, _ in staging._buffers]
    payload["weights"]["0.weight"].add_(1)
    again = staging.snapshot(payload)
    assert [b.data_ptr() for b, _ in staging._buffers] == buffers  # no allocation per commit
    assert _saved(again) == _saved(payload)


def test_holds_only_a_payload_with_the_same_bytes():
    _, _, payload = _payload()
    staging = Staging()
    assert not staging.holds(payload)  # nothing staged yet
    staging.snapshot(payload)
    assert staging.holds(payload)
    payload["weights"]["2.bias"][0] += 1e-7
    assert not staging.holds(payload)
    staging.snapshot(payload)
    payload["ordered"]["a"] = 0.0  # equal to -0.0, but pickled with other bytes
    assert not staging.holds(payload)
    staging.snapshot(payload)
    payload["tied"]["b"]["weight"] = payload["tied"]["b"]["weight"].clone()  # the same values, no longer shared
    assert not staging.holds(payload)
    staging.snapshot(payload)
    payload["plain"].append(4)
    assert not staging.holds(payload)
