"""A variational autoencoder trained with an objective of two summed loss terms.

    python examples/vae.py [--root runs] [--epochs 3]

The objective returns ``"reconstruction"`` (binary cross-entropy of the decoded pixels, summed
over the batch) and ``"kl"`` (the KL divergence of the encoder's Gaussian to N(0, I), summed over
the batch), both ``reduction="sum"``: the gradient is that of the batch's summed loss, as a plain
PyTorch VAE loop computes it. The epoch's ``train_summary`` holds each term per sample (the
epoch's sum divided by the rows it saw) in ``extra`` and their sum as ``loss``: the per-sample
average such a loop prints.

The script checks itself against a hand-written PyTorch twin (the same model, seed, batches,
noise, summed loss and Adam): the final weights agree within float32 tolerance, and the twin's
per-sample average is NNx's ``train_summary.loss``.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

import nnx_api as nnx

LATENT = 4
LR = 3e-3


class DigitsVAE(nn.Module):
    """64 pixels → a Gaussian over a 4-d latent → 64 pixel logits."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(64, 32), nn.ReLU())
        self.mu = nn.Linear(32, LATENT)
        self.log_var = nn.Linear(32, LATENT)
        self.decoder = nn.Sequential(nn.Linear(LATENT, 32), nn.ReLU(), nn.Linear(32, 64))

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.hidden(x)
        return self.mu(h), self.log_var(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The decoded pixels of the latent mean (what prediction and validation use)."""
        return torch.sigmoid(self.decoder(self.encode(x)[0]))


def noise(shape: torch.Size, epoch: int, batch_idx: int) -> torch.Tensor:
    """The reparameterisation noise of one batch, keyed by its position (so a twin draws the same)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(10_000 * epoch + batch_idx))


def vae_sums(net: DigitsVAE, x: torch.Tensor, epoch: int, batch_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's summed reconstruction loss and summed KL divergence."""
    mu, log_var = net.encode(x)
    z = mu + torch.exp(0.5 * log_var) * noise(mu.shape, epoch, batch_idx)
    reconstruction = F.binary_cross_entropy_with_logits(net.decoder(z), x, reduction="sum")
    kl = -0.5 * torch.sum(1 + log_var - mu.pow(2) - log_var.exp())
    return reconstruction, kl


def vae_objective(ctx: nnx.ObjectiveContext) -> nnx.ObjectiveResult:
    x, _ = ctx.inputs_and_target()
    reconstruction, kl = vae_sums(ctx.model.net, x, ctx.epoch_idx, ctx.batch_idx)
    return nnx.ObjectiveResult([
        nnx.LossTerm("reconstruction", reconstruction, reduction="sum"),
        nnx.LossTerm("kl", kl, reduction="sum"),
    ])


def batches(batch_size: int = 128) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Digits' 1797 images scaled to [0, 1], in 15 batches (the last of 5 rows); the target is the input."""
    x, _ = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    return [(b, b) for b in x.split(batch_size)]


def twin(loader: list, epochs: int) -> tuple[DigitsVAE, list[float]]:
    """The same training in plain PyTorch: each epoch's summed loss over the rows it saw."""
    torch.manual_seed(0)
    net = DigitsVAE()
    optimizer = torch.optim.Adam(net.parameters(), lr=LR)
    averages = []
    for epoch in range(epochs):
        total, rows = 0.0, 0
        for batch_idx, (x, _) in enumerate(loader):
            optimizer.zero_grad()
            reconstruction, kl = vae_sums(net, x, epoch, batch_idx)
            loss = reconstruction + kl
            loss.backward()
            optimizer.step()
            total, rows = total + loss.item(), rows + len(x)
        averages.append(total / rows)
    return net, averages


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    loader = batches()

    torch.manual_seed(0)
    model = nnx.NNModel(module=DigitsVAE(), params=nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR))
    params = nnx.NNTrainParams(
        n_epochs=args.epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=LR), seed=0,
        data_id="digits-vae", train_loader=loader, resume="auto",
    )
    run = model.train(params, objective=vae_objective, root=args.root)

    reference, averages = twin(loader, args.epochs)
    for epoch, expected in enumerate(averages):
        summary = run.epochs[epoch].train_summary
        print(f"epoch {epoch}: loss per sample {summary.loss:.4f} (reconstruction {summary.extra['reconstruction']:.4f}, "
              f"kl {summary.extra['kl']:.4f}); plain PyTorch {expected:.4f}")
        assert abs(summary.loss - expected) <= 1e-4 * abs(expected), (summary.loss, expected)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.net.state_dict()[name], value, rtol=1e-4, atol=1e-5)
    print("final weights match the plain PyTorch loop")
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
