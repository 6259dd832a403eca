"""The shared update engine over torch's adapters: an accumulated window equals one batch of
its union, and the fp16 loss scale unscales before the step and skips an overflow.

The engine's window arithmetic is dtype-independent, so these run in float64: rounding is then
~1e-16 and a tolerance of 1e-12 cannot hide a normalisation error (which moves the weights by
~1e-2 here), on any machine, thread count or kernel.
"""

from __future__ import annotations

import pytest
import torch

from nnx_core.engine import TermReading, UpdateEngine
from nnx_core.update import OVERFLOW
from nnx_adapters.pytorch.gradients import TorchGradientSlots
from nnx_adapters.pytorch.optim import TorchOptimizer
from nnx_adapters.pytorch.scaling import ScaledTorchOptimizer, TorchLossScale

TOL = 1e-12  # float64: ~1e4 ulps of a weight of size ~1


def _net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4)).double()


def _terms(net, x, y, mask, *, kinds):
    """Per microbatch: CE over unmasked rows (mean), squared outputs per row (mean), an L1 (sum)."""
    out = net(x)
    keep = mask.nonzero().flatten()
    ce = torch.nn.functional.cross_entropy(out[keep], y[keep], reduction="sum") if len(keep) else out.sum() * 0
    terms = {
        "ce": (ce, float(len(keep)), "mean", 0.7),
        "sq": ((out**2).sum(), float(out.shape[0]), "mean", 0.3),
        "l1": (out.abs().sum() * 1e-2, None, "sum", 1.0),
    }
    return [(name, *terms[name]) for name in kinds]


def _engine_update(kinds, parts, accumulate):
    net = _net()
    params = list(net.parameters())
    opt = TorchOptimizer(torch.optim.SGD(params, lr=1.0))
    grads = TorchGradientSlots(params)
    eng = UpdateEngine({"default": opt}, grads, accumulate=accumulate)
    commits = []
    for i, (x, y, mask) in enumerate(parts):
        terms = _terms(net, x, y, mask, kinds=kinds)
        grads.set_terms([t[1] for t in terms])
        readings = [
            TermReading(name=n, numerator=float(num.detach()), denominator=den, reduction=red, weight=w)
            for n, num, den, red, w in terms
        ]
        commit = eng.add(readings, is_last_batch=i == len(parts) - 1)
        if commit is not None:
            commits.append(commit)
    return net, commits


def _union_update(kinds, parts):
    net = _net()
    x = torch.cat([p[0] for p in parts])
    y = torch.cat([p[1] for p in parts])
    mask = torch.cat([p[2] for p in parts])
    loss = 0.0
    for _name, num, den, red, w in _terms(net, x, y, mask, kinds=kinds):
        loss = loss + w * (num / den if red == "mean" else num)
    loss.backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= p.grad
    return net


def _parts(sizes, masked_parts):
    g = torch.Generator().manual_seed(3)
    parts = []
    for i, n in enumerate(sizes):
        x = torch.randn(n, 3, generator=g, dtype=torch.float64)
        y = torch.randint(0, 4, (n,), generator=g)
        mask = torch.rand(n, generator=g) > 0.3
        if i in masked_parts:
            mask[:] = False
        parts.append((x, y, mask))
    return parts


@pytest.mark.parametrize("kinds", [("ce",), ("ce", "sq"), ("ce", "sq", "l1"), ("l1",)])
def test_accumulated_window_equals_one_batch_of_the_union(kinds):
    parts = _parts([2, 7, 3, 5], masked_parts={1})  # unequal counts, one fully masked microbatch
    accumulated, commits = _engine_update(kinds, parts, accumulate=4)
    union = _union_update(kinds, parts)
    assert len(commits) == 1 and commits[0].committed and commits[0].microbatches == 4
    for a, b in zip(accumulated.parameters(), union.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=0)


def test_single_microbatch_windows_equal_per_batch_updates():
    parts = _parts([4, 6], masked_parts=set())
    net, commits = _engine_update(("ce", "sq"), parts[:1], accumulate=1)
    union = _union_update(("ce", "sq"), parts[:1])
    assert len(commits) == 1
    for a, b in zip(net.parameters(), union.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=0)


def test_loss_scale_unscales_before_the_step_and_skips_an_overflowing_window():
    """The fp16 mechanics (GradScaler on CPU, fp32 math): scaled backward, unscale, one update
    per window; an overflow steps no optimizer and shrinks the scale."""
    parts = _parts([5, 4], masked_parts=set())
    net = _net()
    params = list(net.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    opt = ScaledTorchOptimizer(torch.optim.SGD(params, lr=1.0), None, scaler, auto_update=False)
    grads = TorchGradientSlots(params, scaler)
    eng = UpdateEngine({"default": opt}, grads, accumulate=2, loss_scale=TorchLossScale(scaler))
    for i, (x, y, mask) in enumerate(parts):
        terms = _terms(net, x, y, mask, kinds=("ce", "sq"))
        grads.set_terms([t[1] for t in terms])
        commit = eng.add(
            [TermReading(name=n, numerator=float(v.detach()), denominator=d, weight=w) for n, v, d, _r, w in terms],
            is_last_batch=i == 1,
        )
    assert commit.committed
    union = _union_update(("ce", "sq"), parts)
    for a, b in zip(net.parameters(), union.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=0)

    before = [p.detach().clone() for p in params]
    x, y, mask = parts[0]
    terms = _terms(net, x, y, mask, kinds=("ce", "sq"))
    grads.set_terms([terms[0][1] * float("inf"), terms[1][1]])
    scale = scaler.get_scale()
    commit = eng.add(
        [TermReading(name=n, numerator=float(v.detach()), denominator=d, weight=w) for n, v, d, _r, w in terms],
        is_last_batch=True,
    )
    assert commit.status == OVERFLOW and scaler.get_scale() < scale
    assert all(torch.equal(a, b) for a, b in zip(before, params, strict=True))
