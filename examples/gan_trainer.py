"""A small GAN with ``Trainer``: two named optimizers, one step function, exact resume.

    python examples/gan_trainer.py [--root runs] [--epochs 20]

The generator maps 4-d noise to points; the discriminator tells them from samples of a ring.
``NNTrainerParams(optims={"gen": ..., "disc": ...})`` gives each network its own optimizer over
its own parameters (``param_groups`` patterns ``gen.*`` / ``disc.*``, which must not overlap).
The step updates the discriminator, then the generator, each through ``finalize_step`` (finite
check → backward → clip → step → ``ctx.report_update(name)``). Rerunning with ``resume="auto"``
continues an interrupted run from its last committed epoch to bit-identical weights.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn

import nnx_api as nnx

NOISE = 4


class GAN(nn.Module):
    """Generator and discriminator as two submodules of one network (``model.net``)."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = nn.Sequential(nn.Linear(NOISE, 32), nn.ReLU(), nn.Linear(32, 2))
        self.disc = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return self.disc(points)


def ring(n: int, seed: int = 0) -> torch.Tensor:
    """``n`` points on a noisy unit circle."""
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=g) * 2 * math.pi
    radius = 1.0 + 0.05 * torch.randn(n, generator=g)
    return torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1)


def gan_step(ctx: nnx.TrainerStepContext) -> nnx.EvaluationDataPoint:
    """One discriminator update, then one generator update (each reported by finalize_step)."""
    (real,) = ctx.batch
    gan = ctx.model.net
    fake = gan.gen(torch.randn(real.shape[0], NOISE))

    ctx.optimizers["disc"].zero_grad()
    real_logits, fake_logits = gan.disc(real), gan.disc(fake.detach())
    d_loss = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits)) + \
        F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
    d = nnx.finalize_step(d_loss, ctx, paradigm="gan", optimizer="disc")

    ctx.optimizers["gen"].zero_grad()
    judged = gan.disc(fake)
    g_loss = F.binary_cross_entropy_with_logits(judged, torch.ones_like(judged))
    g = nnx.finalize_step(g_loss, ctx, paradigm="gan", optimizer="gen")
    return nnx.EvaluationDataPoint(loss=d + g, extra={"d_loss": d, "g_loss": g})


def build(epochs: int, **overrides) -> tuple[nnx.Trainer, nnx.NNTrainerParams]:
    """The trainer and its params (fixed initial weights: the run id names one experiment)."""
    nnx.set_seed(0)
    model = nnx.NNModel(module=GAN())
    adam = {"name": nnx.Optims.ADAM, "max_lr": 2e-3, "momentum": (0.5, 0.999)}
    params = nnx.NNTrainerParams(
        n_epochs=epochs,
        optims={
            "gen": nnx.NNOptimParams(**adam, param_groups=[nnx.NNParamGroupSpec(name_pattern="gen.*")]),
            "disc": nnx.NNOptimParams(**adam, param_groups=[nnx.NNParamGroupSpec(name_pattern="disc.*")]),
        },
        # a GAN's summed loss measures no progress: constant learning rates, BEST by that sum on purpose
        schedulers={"gen": nnx.NNSchedulerParams(factor=1.0), "disc": nnx.NNSchedulerParams(factor=1.0)},
        monitor=nnx.MonitorSpec("loss", split="train"),
        seed=0,
        train_loader=[(chunk,) for chunk in ring(512).split(64)],
        resume="auto",
        **overrides,
    )
    return nnx.Trainer(model), params


def main(argv: list[str] | None = None, callbacks=None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args(argv)
    trainer, params = build(args.epochs)
    run = trainer.train(params, trainer_step_fn=gan_step, callbacks=callbacks, root=args.root)
    with torch.no_grad():
        radius = trainer.model.net.gen(torch.randn(256, NOISE)).norm(dim=1)
    last = run.idps[-1].train_edp
    print(f"d_loss {last.extra['d_loss']:.3f}  g_loss {last.extra['g_loss']:.3f}  "
          f"generated radius {radius.mean():.2f} ± {radius.std():.2f} (target 1.00)")
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
