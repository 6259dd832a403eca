"""Scheduler adapter details: cosine annealing past an implicit T_max warns once."""

from __future__ import annotations

import warnings

import pytest
import torch

from nnx_adapters.pytorch.optim import build_scheduler

# these unit tests step a bare scheduler without optimizer steps; torch says so
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`:UserWarning")


def cosine(T_max=None):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    plateau = dict(min_lr=0.0, factor=0.5, patience=1, cooldown=0, threshold=1e-3)
    return build_scheduler(optimizer, "cosine_annealing", clock="epoch", horizon=2, T_max=T_max, **plateau)


def test_cosine_past_an_implicit_t_max_warns_once():
    clock = cosine()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        clock.tick(), clock.tick()  # within T_max = horizon = 2
    with pytest.warns(RuntimeWarning, match="implicit T_max=2"):
        clock.tick()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        clock.tick(), clock.tick()  # once only


def test_an_explicit_t_max_is_the_user_s_choice_and_never_warns():
    clock = cosine(T_max=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(5):
            clock.tick()
