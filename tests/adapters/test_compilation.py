"""``CompiledForward``: graph breaks are counted, a compiler error ends compilation under either
``on_failure`` with the net's buffers and the RNG streams as an uncompiled call would leave them,
the record says where it stopped, and the forward's own errors pass through untouched (torch's
``"eager"`` backend)."""

from __future__ import annotations

import pytest
import torch

from nnx_core.errors import CompileError
from nnx_adapters.pytorch.compilation import CompiledForward, known_backends


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Breaking(torch.nn.Module):
    """A forward with one graph break (a print dynamo cannot trace) and a refusal of 3-row batches."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] == 3:
            raise ValueError("three rows")
        h = self.first(x)
        print("", end="")  # the graph break
        return self.second(h)


class Counting(Breaking):
    """``Breaking`` with a buffer its forward bumps and a random draw on the way."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return super().forward(x) + 0 * torch.rand(1)


def wrap(net, **options):
    spec = {"backend": "eager", "mode": None, "fullgraph": False, "dynamic": None, "on_failure": "error", **options}
    return CompiledForward.wrap(net, capture=("train_forward",), **spec)


def test_graph_breaks_are_counted_and_the_net_keeps_its_keys():
    net = Breaking()
    keys = list(net.state_dict())
    forward = wrap(net)
    assert forward.record.effective == "pending" and forward.record.capture is None
    x = torch.randn(2, 4)
    assert torch.equal(forward(x), net(x))
    assert forward.record.effective == "compiled" and forward.record.graph_breaks >= 1
    assert forward.record.capture == "partial" and forward.record.torch_version == torch.__version__
    assert list(net.state_dict()) == keys


def test_a_forward_without_a_break_is_full_capture():
    forward = wrap(torch.nn.Linear(4, 2))
    forward(torch.randn(2, 4))
    assert (forward.record.effective, forward.record.graph_breaks, forward.record.capture) == ("compiled", 0, "full")


def test_a_class_compiled_earlier_in_the_process_leaves_the_capture_unknown():
    """Dynamo counts a graph break it has seen for a code object once: the second run of the class
    cannot tell its breaks, so it says so (None) instead of claiming a full capture."""
    wrap(Breaking())(torch.randn(2, 4))
    second = wrap(Breaking())
    second(torch.randn(2, 4))
    assert second.record.effective == "compiled" and second.record.capture is None


def test_the_forwards_own_error_passes_through_and_compilation_goes_on():
    forward = wrap(Breaking())
    forward(torch.randn(2, 4))
    with pytest.raises(ValueError, match="three rows"):
        forward(torch.randn(3, 4))
    assert forward.record.effective == "compiled" and forward.record.restart is None


def test_fullgraph_with_a_graph_break_is_a_compile_error_naming_where():
    forward = wrap(Breaking(), fullgraph=True)
    forward.at("train", 2, 5)
    with pytest.raises(CompileError, match="on_failure='eager'") as raised:
        forward(torch.randn(2, 4))
    assert raised.value.record is forward.record and forward.record.effective == "failed"
    assert isinstance(raised.value.__cause__, torch._dynamo.exc.Unsupported)
    restart = forward.record.restart
    assert (restart["phase"], restart["epoch"], restart["batch"], restart["stage"], restart["error"]) == (
        "train", 2, 5, "forward", "Unsupported")


def test_a_failure_under_the_error_policy_leaves_buffers_and_rng_as_found():
    net = Counting()
    forward = wrap(net, fullgraph=True)
    torch.manual_seed(3)
    with pytest.raises(CompileError):
        forward(torch.randn(2, 4))
    after = torch.rand(4)
    torch.manual_seed(3)
    torch.randn(2, 4)
    assert net.calls.item() == 0 and torch.equal(after, torch.rand(4))  # no draw, no bump survived


def test_fullgraph_with_a_graph_break_falls_back_to_eager_when_asked():
    net = Breaking()
    forward = wrap(net, fullgraph=True, on_failure="eager")
    x = torch.randn(2, 4)
    with pytest.warns(RuntimeWarning, match="eager forward"):
        out = forward(x)
    assert torch.equal(out, net(x))  # the failed call ran again eagerly
    assert forward.record.effective == "eager" and forward.record.restart["error"] == "Unsupported"
    assert forward.record.graph_breaks is None and forward.record.capture is None
    assert torch.equal(forward(x), net(x))  # eager from then on, without another warning


def test_an_eager_restart_draws_and_bumps_exactly_what_one_eager_call_does():
    torch.manual_seed(0)
    counted, plain = Counting(), Counting()
    plain.load_state_dict(counted.state_dict())
    forward = wrap(counted, fullgraph=True, on_failure="eager")
    x = torch.randn(2, 4)
    torch.manual_seed(7)
    with pytest.warns(RuntimeWarning):
        out = forward(x)
    after = torch.rand(4)
    torch.manual_seed(7)
    expected = plain(x)
    assert torch.equal(out, expected) and torch.equal(after, torch.rand(4))
    assert counted.calls.item() == plain.calls.item() == 1


def test_state_is_saved_only_before_a_call_dynamo_may_compile(monkeypatch):
    """The RNG streams and buffers are copied before the first call of each (mode, input shapes)
    signature, not on every call: a signature that ran compiled reuses its code."""
    from nnx_adapters.pytorch import compilation

    made = []
    original = compilation._Saved.__init__

    def counted(self, net):
        made.append(net.training)
        original(self, net)

    monkeypatch.setattr(compilation._Saved, "__init__", counted)
    net = Counting()
    forward = wrap(net)
    for rows in (2, 2, 2, 5, 2, 5):  # two shapes in training
        forward(torch.randn(rows, 4))
    net.eval()
    forward(torch.randn(2, 4))
    forward(torch.randn(2, 4))
    assert made == [True, True, False]  # (train, 2 rows), (train, 5 rows), (eval, 2 rows)
    assert net.calls.item() == 8


def test_a_call_in_eval_mode_after_training_calls_is_the_epochs_validation():
    net = Breaking()
    forward = wrap(net, fullgraph=True, on_failure="eager")
    forward.at("train", 4, 0)
    net.eval()
    with pytest.warns(RuntimeWarning):
        forward(torch.randn(2, 4))
    assert {k: forward.record.restart[k] for k in ("phase", "epoch", "batch")} == {
        "phase": "validation", "epoch": 4, "batch": 0}


def test_the_known_backends_are_torchs_list():
    assert {"eager", "aot_eager", "inductor"} <= set(known_backends())
    assert "no-such-backend" not in known_backends()
