"""The NCCL branches of the process group and the collective, on a machine without NCCL or a GPU.

NCCL needs one GPU per rank, so these paths cannot run here (on one node or several). What they do is decided in Python
before anything reaches NCCL: which backend is chosen, which device each rank binds, what is
refused before a group is joined, and how long a teardown barrier may keep the host waiting.
These tests replace the ``torch.distributed`` and ``torch.cuda`` calls with a recording fake
(``FakeNccl``) and check those decisions. ``tests/gpu/nccl_smoke.py`` runs the real thing on one
GPU (world size 1).
"""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from nnx_adapters.collective import torch as torch_collective
from nnx_adapters.collective.torch import TorchCollective, nccl_barrier
import nnx_api as nnx


class FakeWork:
    """An async barrier's work. ``blocking_wait``: torch 2.13's ``wait(timeout)`` (blocks until the
    barrier completes, raises when it times out); otherwise older torch (``wait`` returns at once).
    ``completes_after``: how many ``is_completed`` queries return False first (None: never)."""

    def __init__(self, *, blocking_wait: bool, completes_after: int | None) -> None:
        self.blocking_wait, self.completes_after = blocking_wait, completes_after
        self.queries, self.waits = 0, []

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        self.waits.append(timeout)
        if self.blocking_wait:
            if self.completes_after is None:
                raise RuntimeError("DistBackendError: Work timed out in blocking wait")
            self.queries = self.completes_after  # it blocked until the barrier completed
        return True

    def is_completed(self) -> bool:
        done = self.completes_after is not None and self.queries >= self.completes_after
        self.queries += 1
        return done


class FakeNccl:
    """Records the ``torch.distributed`` / ``torch.cuda`` calls of one process of an nccl group."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, gpus: int, rank: int = 0, world: int = 2,
                 initialized: bool = False, nccl_built: bool = True) -> None:
        self.gpus, self.rank, self.world, self.initialized = gpus, rank, world, initialized
        self.backend, self.current = "nccl", 0
        self.calls: list[tuple] = []
        self.work: FakeWork | None = None
        fakes = {
            (dist, "is_available"): lambda: True,
            (dist, "is_initialized"): lambda: self.initialized,
            (dist, "is_nccl_available"): lambda: nccl_built,
            (dist, "get_rank"): lambda group=None: self.rank,
            (dist, "get_world_size"): lambda group=None: self.world,
            (dist, "get_backend"): lambda group=None: self.backend,
            (dist, "init_process_group"): self._init,
            (dist, "barrier"): self._barrier,
            (dist, "monitored_barrier"): lambda **kw: self.calls.append(("monitored_barrier", kw)),
            (dist, "destroy_process_group"): lambda group=None: self.calls.append(("destroy",)),
            (dist, "all_reduce"): lambda tensor, **kw: self.calls.append(("all_reduce", tensor.device)),
            (dist, "broadcast_object_list"): lambda box, src=0, group=None, device=None: self.calls.append(
                ("broadcast", src, device)),
            (torch.cuda, "is_available"): lambda: self.gpus > 0,
            (torch.cuda, "device_count"): lambda: self.gpus,
            (torch.cuda, "current_device"): lambda: self.current,
            (torch.cuda, "set_device"): self._set_device,
        }
        for (owner, name), fake in fakes.items():
            monkeypatch.setattr(owner, name, fake)

    def _init(self, backend=None, timeout=None, **kw):
        self.calls.append(("init", backend, timeout))
        self.backend, self.initialized = backend, True

    def _set_device(self, index):
        self.calls.append(("set_device", index))
        self.current = index

    def _barrier(self, group=None, async_op=False, device_ids=None, timeout=None):
        self.calls.append(("barrier", async_op, device_ids))
        return self.work if async_op else None

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def torchrun_env(monkeypatch, *, rank: int, world: int, nodes: int = 1) -> None:
    """torchrun's environment for global rank ``rank`` of ``world``, ``world // nodes`` ranks per node."""
    local_world = world // nodes
    for key, value in {"RANK": rank, "LOCAL_RANK": rank % local_world, "WORLD_SIZE": world,
                       "LOCAL_WORLD_SIZE": local_world, "GROUP_RANK": rank // local_world, "GROUP_WORLD_SIZE": nodes,
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29511}.items():
        monkeypatch.setenv(key, str(value))


# ------------------------------------------------------------------------ init_process_group
def test_a_gpu_per_local_rank_chooses_nccl_and_binds_the_rank_to_its_gpu_before_joining(monkeypatch):
    torchrun_env(monkeypatch, rank=1, world=2)
    fake = FakeNccl(monkeypatch, gpus=2, rank=1)
    info = nnx.distributed.init_process_group(timeout_seconds=42)
    assert fake.calls == [("set_device", 1), ("init", "nccl", datetime.timedelta(seconds=42))]
    assert info == nnx.distributed.GroupInfo(rank=1, world_size=2, local_rank=1, backend="nccl")


@pytest.mark.parametrize(("gpus", "nccl_built"), [(1, True), (2, False)], ids=["fewer-gpus", "no-nccl-build"])
def test_without_nccl_for_every_local_rank_the_choice_is_gloo_and_no_gpu_is_bound(monkeypatch, gpus, nccl_built):
    torchrun_env(monkeypatch, rank=0, world=2)
    fake = FakeNccl(monkeypatch, gpus=gpus, nccl_built=nccl_built)
    nnx.distributed.init_process_group()
    assert fake.calls == [("init", "gloo", datetime.timedelta(seconds=1800))]


@pytest.mark.parametrize(("gpus", "nccl_built", "match"), [(0, True, "local rank 1 has none"),
                                                            (1, True, "local rank 1 has none"),
                                                            (2, False, "no NCCL")])
def test_nccl_without_a_gpu_for_this_rank_is_refused_before_any_group_is_joined(monkeypatch, gpus, nccl_built, match):
    torchrun_env(monkeypatch, rank=1, world=2)
    fake = FakeNccl(monkeypatch, gpus=gpus, rank=1, nccl_built=nccl_built)
    with pytest.raises(nnx.ParamsError, match=match):
        nnx.distributed.init_process_group(backend="nccl")
    assert fake.calls == []  # no device bound, no group joined


# ------------------------------------------------------------------------ several nodes
@pytest.mark.parametrize(("rank", "world", "nodes", "gpus", "device"),
                         [(1, 2, 2, 1, 0), (0, 2, 2, 1, 0), (3, 4, 2, 2, 1), (2, 4, 2, 2, 0)],
                         ids=["2x1-node1", "2x1-node0", "2x2-node1-local1", "2x2-node1-local0"])
def test_on_several_nodes_each_rank_binds_the_gpu_of_its_local_rank_and_knows_its_node(
        monkeypatch, rank, world, nodes, gpus, device):
    """A GPU per *local* rank is enough: node 1's first rank (global rank 1 or 2) uses cuda:0."""
    torchrun_env(monkeypatch, rank=rank, world=world, nodes=nodes)
    fake = FakeNccl(monkeypatch, gpus=gpus, rank=rank, world=world)
    info = nnx.distributed.init_process_group(timeout_seconds=42)
    assert fake.calls == [("set_device", device), ("init", "nccl", datetime.timedelta(seconds=42))]
    local_world = world // nodes
    assert info == nnx.distributed.GroupInfo(rank, world, device, "nccl", node_rank=rank // local_world,
                                             local_world_size=local_world)
    assert (info.node_rank, info.local_world_size, tuple(info)) == (rank // local_world, local_world, (rank, world))
    assert nnx.distributed.init_process_group() == info  # joined: the same place, read again


def test_the_collective_and_the_teardown_barrier_of_a_second_nodes_rank_use_its_local_gpu(monkeypatch):
    torchrun_env(monkeypatch, rank=1, world=2, nodes=2)
    fake = FakeNccl(monkeypatch, gpus=1, rank=1, world=2)
    nnx.distributed.init_process_group()
    collective = TorchCollective(shared_memory=False)
    assert collective.device == torch.device("cuda", 0) and collective.rank == 1
    fake.work = FakeWork(blocking_wait=True, completes_after=0)
    nnx.distributed.shutdown(timeout_seconds=7)
    assert fake.calls[-2:] == [("barrier", True, [0]), ("destroy",)]


def test_a_node_with_fewer_gpus_than_its_local_ranks_chooses_gloo_and_refuses_nccl(monkeypatch):
    torchrun_env(monkeypatch, rank=3, world=4, nodes=2)  # node 1, local rank 1, one GPU on the node
    fake = FakeNccl(monkeypatch, gpus=1, rank=3, world=4)
    with pytest.raises(nnx.ParamsError, match="local rank 1 has none"):
        nnx.distributed.init_process_group(backend="nccl")
    assert fake.calls == []
    nnx.distributed.init_process_group()
    assert fake.calls == [("init", "gloo", datetime.timedelta(seconds=1800))]


@pytest.mark.parametrize(("env", "match"), [({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "1"}, "local rank 1 among 1"),
                                            ({"LOCAL_WORLD_SIZE": "3"}, "among 3 rank.s. on this node, of 2")])
def test_an_environment_that_places_the_rank_nowhere_is_refused_before_any_group_is_joined(monkeypatch, env, match):
    torchrun_env(monkeypatch, rank=1, world=2, nodes=2)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fake = FakeNccl(monkeypatch, gpus=2, rank=1)
    with pytest.raises(nnx.ParamsError, match=match):
        nnx.distributed.init_process_group()
    assert fake.calls == []


# ------------------------------------------------------------------------ shutdown
def test_shutdown_on_nccl_waits_for_an_async_barrier_on_this_ranks_gpu_then_destroys_the_group(monkeypatch):
    fake = FakeNccl(monkeypatch, gpus=2, rank=1, initialized=True)
    fake.current = 1
    fake.work = FakeWork(blocking_wait=True, completes_after=0)
    nnx.distributed.shutdown(timeout_seconds=7)
    assert fake.calls == [("barrier", True, [1]), ("destroy",)]
    assert fake.work.waits == [datetime.timedelta(seconds=7)]


@pytest.mark.parametrize("blocking_wait", [True, False], ids=["torch-2.13-wait", "older-torch-wait"])
def test_shutdown_on_nccl_with_a_missing_rank_raises_within_its_timeout_and_leaves_the_group(monkeypatch, blocking_wait):
    fake = FakeNccl(monkeypatch, gpus=1, initialized=True)
    fake.work = FakeWork(blocking_wait=blocking_wait, completes_after=None)  # the peer never arrives
    with pytest.raises(RuntimeError, match="not every rank reached the teardown barrier within 0.05s"):
        nnx.distributed.shutdown(timeout_seconds=0.05)
    assert "destroy" not in fake.names()  # never tear down under a peer that may still be in the barrier


def test_older_torch_polls_the_barrier_until_it_completes(monkeypatch):
    """Where ``wait(timeout)`` does not block (torch before 2.13's semantics), the host polls the work."""
    monkeypatch.setattr(torch_collective, "POLL_SECONDS", 0.0)
    fake = FakeNccl(monkeypatch, gpus=1, initialized=True)
    fake.work = FakeWork(blocking_wait=False, completes_after=3)
    nnx.distributed.shutdown(timeout_seconds=60)
    assert fake.work.queries == 4 and fake.names() == ["barrier", "destroy"]


def test_without_a_timeout_the_nccl_barrier_blocks_on_the_group_timeout(monkeypatch):
    fake = FakeNccl(monkeypatch, gpus=1, initialized=True)
    nccl_barrier(torch.device("cuda", 0), None)
    assert fake.calls == [("barrier", False, [0])]


# ------------------------------------------------------------------------ the collective
def test_the_nccl_collective_lives_on_this_ranks_gpu(monkeypatch):
    fake = FakeNccl(monkeypatch, gpus=2, rank=1, initialized=True)
    fake.current = 1
    collective = TorchCollective(shared_memory=False)
    assert collective.backend == "nccl" and collective.device == torch.device("cuda", 1)
    collective.broadcast({"epoch": 3}, src=0)
    fake.work = FakeWork(blocking_wait=True, completes_after=0)
    collective.barrier(timeout=5)
    collective.barrier()
    assert fake.calls == [("broadcast", 0, torch.device("cuda", 1)), ("barrier", True, [1]), ("barrier", False, [1])]
    assert fake.work.waits == [datetime.timedelta(seconds=5)]
    assert collective.traffic.calls == {"broadcast": 1, "barrier": 2}


def test_the_collectives_numbers_travel_on_its_device(monkeypatch):
    fake = FakeNccl(monkeypatch, gpus=1, initialized=True)
    collective = TorchCollective(device=torch.device("cpu"), shared_memory=False)  # no GPU here to put them on
    assert collective.all_reduce_sum([1.0, 2.0]) == [1.0, 2.0]
    assert fake.calls == [("all_reduce", torch.device("cpu"))]


def test_a_gloo_collective_keeps_the_monitored_barrier(monkeypatch):
    fake = FakeNccl(monkeypatch, gpus=0, initialized=True)
    fake.backend = "gloo"
    TorchCollective(shared_memory=False).barrier(timeout=3)
    assert fake.calls == [("monitored_barrier", {"timeout": datetime.timedelta(seconds=3), "wait_all_ranks": True})]


def test_ddp_on_cuda_trains_fp16_and_bf16(monkeypatch):
    """On CUDA (nccl) fp16 (its scaler's skip-or-step decision agreed over the ranks) and bf16 both
    pass the scope check; fp16 off CUDA: tests/api/test_ddp_cuda_features.py."""
    import types

    from nnx_api.distributed.group import scope_problems

    def entry(mode: str) -> types.SimpleNamespace:
        model = types.SimpleNamespace(
            params=types.SimpleNamespace(precision=nnx.PrecisionPolicy(mode=mode)), precision=mode,
            net=torch.nn.Linear(2, 2), task_adapter=None, device=torch.device("cuda", 0),
        )
        train = types.SimpleNamespace(train_loader=[1], val_loader=None)
        return types.SimpleNamespace(model=model, train=train, objective=None, history=None, callbacks=())

    nccl = types.SimpleNamespace(backend="nccl", world_size=2)
    assert not any("fp16" in p for p in scope_problems(entry("fp16"), nccl))
    assert not any("precision" in p for p in scope_problems(entry("bf16"), nccl))
