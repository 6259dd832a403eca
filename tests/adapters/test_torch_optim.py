"""Scheduler adapter details: a cosine schedule past its period warns once (``UserWarning``),
unless that period was configured on purpose, and goes on with torch's own formula."""

from __future__ import annotations

import warnings

import pytest
import torch

from nnx_adapters.pytorch.optim import build_scheduler

# these unit tests step a bare scheduler without optimizer steps; torch says so
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`:UserWarning")


def cosine(T_max=None, clock="epoch"):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    plateau = dict(min_lr=0.0, factor=0.5, patience=1, cooldown=0, threshold=1e-3)
    return build_scheduler(optimizer, "cosine_annealing", clock=clock, horizon=2, T_max=T_max, **plateau)


def ticked(clock, n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that no optimizer stepped
        warnings.filterwarnings("error", message=".*T_max")
        for _ in range(n):
            clock.tick()


def test_cosine_past_a_default_period_warns_once_and_follows_torchs_formula():
    clock = cosine()
    ticked(clock, 2)  # within T_max = horizon = 2
    with pytest.warns(UserWarning, match=r"passed its T_max of 2 epochs .*set T_max"):
        clock.tick()
    ticked(clock, 2)  # once only
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    plain = torch.optim.lr_scheduler.CosineAnnealingLR(reference, T_max=2)
    for _ in range(5):
        plain.step()
    assert clock.scheduler.optimizer.param_groups[0]["lr"] == pytest.approx(reference.param_groups[0]["lr"])


def test_an_explicit_t_max_is_the_user_s_choice_and_never_warns():
    ticked(cosine(T_max=2), 5)


def test_a_restored_period_other_than_the_configured_one_warns_naming_the_resume():
    parent = cosine(clock="optimizer_update")
    ticked(parent, 2)
    resumed = cosine(T_max=10, clock="optimizer_update")
    resumed.load_state(parent.state())  # torch restores the checkpoint's T_max (2), not this run's 10
    with pytest.warns(UserWarning, match="T_max of 2 optimizer updates.*stateful resume keeps the checkpoint's T_max"):
        resumed.tick()
