"""``CompiledForward``: graph breaks are counted, a compiler error ends compilation under either
``on_failure``, and the forward's own errors pass through untouched (torch's ``"eager"`` backend)."""

from __future__ import annotations

import pytest
import torch

from nnx_core.errors import CompileError
from nnx_adapters.pytorch.compilation import CompiledForward


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


def wrap(net, **options):
    spec = {"backend": "eager", "mode": None, "fullgraph": False, "dynamic": None, "on_failure": "error", **options}
    return CompiledForward.wrap(net, capture=("train_forward",), **spec)


def test_graph_breaks_are_counted_and_the_net_keeps_its_keys():
    net = Breaking()
    keys = list(net.state_dict())
    forward = wrap(net)
    assert forward.record.status == "pending"
    x = torch.randn(2, 4)
    assert torch.equal(forward(x), net(x))
    assert forward.record.status == "compiled" and forward.record.graph_breaks >= 1
    assert list(net.state_dict()) == keys


def test_the_forwards_own_error_passes_through_and_compilation_goes_on():
    forward = wrap(Breaking())
    forward(torch.randn(2, 4))
    with pytest.raises(ValueError, match="three rows"):
        forward(torch.randn(3, 4))
    assert forward.record.status == "compiled" and forward.record.reason is None


def test_fullgraph_with_a_graph_break_is_a_compile_error():
    forward = wrap(Breaking(), fullgraph=True)
    with pytest.raises(CompileError, match="on_failure='eager'") as raised:
        forward(torch.randn(2, 4))
    assert raised.value.record is forward.record and forward.record.status == "failed"


def test_fullgraph_with_a_graph_break_falls_back_to_eager_when_asked():
    net = Breaking()
    forward = wrap(net, fullgraph=True, on_failure="eager")
    x = torch.randn(2, 4)
    with pytest.warns(RuntimeWarning, match="eager forward"):
        out = forward(x)
    assert torch.equal(out, net(x))  # the failed call ran again eagerly
    assert forward.record.status == "eager" and "Unsupported" in forward.record.reason
    assert torch.equal(forward(x), net(x))  # eager from then on, without another warning
