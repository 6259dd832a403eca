"""A deep convolutional GAN (DCGAN) that learns to draw 8×8 handwritten digits.

    python examples/dcgan_digits.py [--root runs] [--epochs 50]

What PyTorch's DCGAN example does, sized for scikit-learn's bundled 8×8 digits (``load_digits``,
scaled to [-1, 1]): a generator of transposed convolutions with batch norm and ReLU, ending in
Tanh, maps 16-d noise to an image; a discriminator of strided convolutions with LeakyReLU (batch
norm on its inner layer), ending in Sigmoid, gives the probability that an image is real; both
start from N(0, 0.02) weights (batch-norm scales N(1, 0.02)); the loss is binary cross-entropy
against a constant real label (1) or fake label (0); Adam with lr 2e-4 and betas (0.5, 0.999).
Each batch updates the discriminator on the real images and on the generator's fakes, then the
generator, judged by the updated discriminator, towards the real label. A fixed noise batch shows
the generator's progress: its images are drawn (as characters) after the last epoch.

How it maps onto NNx (as ``examples/gan_trainer.py``): both networks are submodules of one
``nn.Module``; ``nnx.Trainer`` with ``NNTrainerParams(optims={"gen": ..., "disc": ...})`` gives
each its own Adam over its own parameters (``param_groups`` patterns ``gen.*`` / ``disc.*``); the
step function makes the two updates through ``nnx.finalize_step``. The betas are
``NNOptimParams(momentum=(0.5, 0.999))``. A Trainer gives an optimizer without a schedule the
default reduce-on-plateau one, which would follow the summed GAN losses (they do not converge
the way a supervised loss does); the DCGAN keeps its learning rates constant, so both schedules
here are ``NNSchedulerParams(factor=1.0)``. For the same reason the run's BEST checkpoint (chosen
by the records' summed losses when nothing is validated) says little about a GAN: use LAST. The
module has no ``nn.Linear`` to infer an output width from, so ``NNModelParams`` declares one
(``TaskSpec.multilabel(n=1)``: one real/fake output per image); the step computes its own losses.

The script checks itself against ``plain_torch``, the same training as a hand-written loop (same
initial weights, seeded shuffling ``DataLoader``, the same noise from torch's global stream after
the same seed, the same losses and Adam steps): the final weights — batch-norm running statistics
included — and every batch's two losses are **bit-identical**, because the same kernels run in
the same order.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx

NOISE, GEN_WIDTH, DISC_WIDTH = 16, 32, 32
BATCH, LR, BETAS = 64, 2e-4, (0.5, 0.999)
REAL, FAKE = 1.0, 0.0
SEED, SHUFFLE_SEED = 0, 1


def init_weights(module: nn.Module) -> None:
    """DCGAN's initialisation: convolution weights N(0, 0.02); batch-norm scales N(1, 0.02), shifts 0."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class DigitsDCGAN(nn.Module):
    """``gen``: noise (16×1×1) → 2×2 → 4×4 → 1×8×8 in [-1, 1]; ``disc``: 1×8×8 → 4×4 → 2×2 → P(real)."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = nn.Sequential(
            nn.ConvTranspose2d(NOISE, GEN_WIDTH * 2, 2, 1, 0, bias=False), nn.BatchNorm2d(GEN_WIDTH * 2), nn.ReLU(),
            nn.ConvTranspose2d(GEN_WIDTH * 2, GEN_WIDTH, 4, 2, 1, bias=False), nn.BatchNorm2d(GEN_WIDTH), nn.ReLU(),
            nn.ConvTranspose2d(GEN_WIDTH, 1, 4, 2, 1, bias=False), nn.Tanh(),
        )
        self.disc = nn.Sequential(
            nn.Conv2d(1, DISC_WIDTH, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
            nn.Conv2d(DISC_WIDTH, DISC_WIDTH * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(DISC_WIDTH * 2), nn.LeakyReLU(0.2),
            nn.Conv2d(DISC_WIDTH * 2, 1, 2, 1, 0, bias=False), nn.Sigmoid(),
        )
        self.apply(init_weights)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The discriminator's probability that each image is real (one per image)."""
        return self.disc(images).view(-1)


def digit_images() -> torch.Tensor:
    """The 1797 digits as 1×8×8 images scaled from 0..16 to [-1, 1] (the generator's Tanh range)."""
    x, _ = load_digits(return_X_y=True)
    return torch.tensor(x / 8.0 - 1.0, dtype=torch.float32).view(-1, 1, 8, 8)


def loader(images: torch.Tensor) -> DataLoader:
    """Shuffled ``(images,)`` batches, from a generator of their own: the same order on every run."""
    return DataLoader(TensorDataset(images), batch_size=BATCH, shuffle=True,
                      generator=torch.Generator().manual_seed(SHUFFLE_SEED))


def fixed_noise() -> torch.Tensor:
    """The noise whose images show the generator's progress (its own stream: training never draws it)."""
    return torch.randn(8, NOISE, 1, 1, generator=torch.Generator().manual_seed(1234))


def disc_loss(gan: DigitsDCGAN, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """BCE of the discriminator on the real images (label REAL) plus on the fakes (label FAKE);
    the fakes are detached: this loss trains the discriminator alone."""
    judged_real, judged_fake = gan(real), gan(fake.detach())
    return F.binary_cross_entropy(judged_real, torch.full_like(judged_real, REAL)) + \
        F.binary_cross_entropy(judged_fake, torch.full_like(judged_fake, FAKE))


def gen_loss(gan: DigitsDCGAN, fake: torch.Tensor) -> torch.Tensor:
    """BCE of the (just updated) discriminator on the fakes against the REAL label."""
    judged = gan(fake)
    return F.binary_cross_entropy(judged, torch.full_like(judged, REAL))


def dcgan_step(ctx: nnx.TrainerStepContext) -> nnx.EvaluationDataPoint:
    """The discriminator's update, then the generator's, each through finalize_step (finite check,
    backward, step, report)."""
    (real,) = ctx.batch
    gan = ctx.model.net
    fake = gan.gen(torch.randn(real.shape[0], NOISE, 1, 1))

    ctx.optimizers["disc"].zero_grad()
    d = nnx.finalize_step(disc_loss(gan, real, fake), ctx, paradigm="dcgan", optimizer="disc")
    ctx.optimizers["gen"].zero_grad()
    g = nnx.finalize_step(gen_loss(gan, fake), ctx, paradigm="dcgan", optimizer="gen")
    return nnx.EvaluationDataPoint(loss=d + g, extra={"d_loss": d, "g_loss": g})


class Samples(nnx.Callback):
    """The generator's images of the fixed noise at each epoch's end (eval mode: batch norm uses
    its running statistics, and no statistic is updated)."""

    def __init__(self) -> None:
        self.noise = fixed_noise()
        self.images: list[torch.Tensor] = []

    def on_epoch_end(self, ctx: nnx.CallbackContext) -> None:
        gen = ctx.model.net.gen
        gen.eval()
        with torch.no_grad():
            self.images.append(gen(self.noise))
        gen.train()


def draw(images: torch.Tensor) -> str:
    """Images in [-1, 1] side by side as characters, darker for more ink."""
    shades = " .:-=+*#%@"
    rows = []
    for r in range(8):
        rows.append("  ".join("".join(shades[min(9, int((float(img[0, r, c]) + 1) / 2 * 10))] * 2 for c in range(8))
                              for img in images))
    return "\n".join(rows)


def plain_torch(images: torch.Tensor, epochs: int) -> tuple[DigitsDCGAN, list[tuple[float, float]]]:
    """The same training as a hand-written loop: the final networks and every batch's (d, g) losses."""
    torch.manual_seed(SEED)
    gan = DigitsDCGAN()
    torch.manual_seed(SEED)  # what NNTrainerParams(seed=0) does before the first epoch: the noise stream
    opt_d = torch.optim.Adam(gan.disc.parameters(), lr=LR, betas=BETAS)
    opt_g = torch.optim.Adam(gan.gen.parameters(), lr=LR, betas=BETAS)
    batches = loader(images)
    losses = []
    gan.train()
    for _ in range(epochs):
        for (real,) in batches:
            fake = gan.gen(torch.randn(real.shape[0], NOISE, 1, 1))
            opt_d.zero_grad()
            d = disc_loss(gan, real, fake)
            d.backward()
            opt_d.step()
            opt_g.zero_grad()
            g = gen_loss(gan, fake)
            g.backward()
            opt_g.step()
            losses.append((d.item(), g.item()))
    return gan, losses


def build(epochs: int, images: torch.Tensor) -> tuple[nnx.Trainer, nnx.NNTrainerParams]:
    """The trainer and its params: one Adam per network, constant learning rates."""
    torch.manual_seed(SEED)
    # The step computes its own losses, but NNx asks every model for its output width, which it
    # infers from a module's last nn.Linear: this one has none, so the width is declared (one
    # real/fake output per image).
    model = nnx.NNModel(module=DigitsDCGAN(), params=nnx.NNModelParams(
        loss=nnx.Losses.BINARY_CROSS_ENTROPY, task=nnx.TaskSpec.multilabel(n=1)))
    adam = {"name": nnx.Optims.ADAM, "max_lr": LR, "momentum": BETAS}  # momentum: Adam's betas
    params = nnx.NNTrainerParams(
        n_epochs=epochs,
        optims={
            "gen": nnx.NNOptimParams(**adam, param_groups=[nnx.NNParamGroupSpec(name_pattern="gen.*")]),
            "disc": nnx.NNOptimParams(**adam, param_groups=[nnx.NNParamGroupSpec(name_pattern="disc.*")]),
        },
        schedulers={"gen": nnx.NNSchedulerParams(factor=1.0), "disc": nnx.NNSchedulerParams(factor=1.0)},
        seed=SEED, data_id="sklearn-digits-8x8-images", train_loader=loader(images), resume="auto",
    )
    return nnx.Trainer(model), params


def main(argv: list[str] | None = None, callbacks=None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=50, help="about 50 epochs draw recognisable digits")
    args = parser.parse_args(argv)
    images = digit_images()
    trainer, params = build(args.epochs, images)
    samples = Samples()
    run = trainer.train(params, trainer_step_fn=dcgan_step, callbacks=[samples, *(callbacks or [])], root=args.root)

    reference, losses = plain_torch(images, args.epochs)
    ours = [(r.train_edp.extra["d_loss"], r.train_edp.extra["g_loss"]) for r in run.idps if r.train_edp is not None]
    if samples.images:  # empty when resume="auto" returned a finished run
        assert ours == losses, "the per-batch losses differ from the plain PyTorch loop's"
    for epoch in range(args.epochs):
        d, g = zip(*losses[epoch * len(params.train_loader):(epoch + 1) * len(params.train_loader)], strict=True)
        print(f"epoch {epoch}: mean d_loss {sum(d) / len(d):.4f}  g_loss {sum(g) / len(g):.4f}")
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(trainer.model.net.state_dict()[name], value, rtol=0, atol=0)
    print("final weights (batch-norm statistics included) are bit-identical to the plain PyTorch loop's")
    if samples.images:
        print("the generator's images of the fixed noise after the last epoch:")
        print(draw(samples.images[-1]))
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
