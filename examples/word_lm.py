"""A word-level LSTM language model with truncated back-propagation through time (BPTT).

    python examples/word_lm.py [--root runs] [--epochs 2]

The text is the standard library's own documentation: the docstrings (``inspect.getdoc``) of a
few modules and of their public names, lower-cased and split into words; the most frequent words
form the vocabulary, every other word is ``<unk>``. The word stream is cut into ``STREAMS``
parallel streams; batch ``i`` holds the next ``BPTT`` words of every stream, and its target is
the same window shifted by one word.

Truncated BPTT carries the LSTM's hidden state from one batch to the next (batch ``i + 1``
continues the streams of batch ``i``) but back-propagates only through the current batch: the
state is detached after each batch. It lives in a small ``CarriedState`` that the custom
``train_step_fn`` closes over, and it starts from zeros at each epoch's first batch
(``ctx.batch_idx == 0``), so every epoch — and a run resumed at an epoch boundary — starts from
the same state.

The script checks itself against a hand-written PyTorch twin (same seed, same batches, the same
hidden-state handling, clipping and Adam): the final weights agree within float32 tolerance, and
each epoch's per-token perplexity (``exp`` of the mean cross-entropy per predicted word, from the
step's batch records, each weighted by its ``count`` of predicted words) is the twin's.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import math
import re

import torch
import torch.nn.functional as F
from torch import nn

import nnx_api as nnx

MODULES = (
    "collections", "itertools", "functools", "textwrap", "heapq", "bisect", "json", "argparse", "statistics", "re",
    "typing", "inspect", "shutil", "subprocess", "logging", "threading", "difflib", "contextlib", "csv", "dataclasses",
)  # about 25,000 words
VOCAB = 400  # the most frequent words, <unk> included
STREAMS, BPTT = 16, 24  # parallel word streams per batch, words per batch and stream
EMBED, HIDDEN = 32, 64
LR, CLIP = 5e-3, 1.0


def corpus() -> list[str]:
    """The words of the chosen modules' docstrings and of their public names' docstrings."""
    docs = []
    for name in MODULES:
        module = __import__(name)
        docs.append(inspect.getdoc(module) or "")
        for attr in sorted(getattr(module, "__all__", None) or [a for a in vars(module) if not a.startswith("_")]):
            member = getattr(module, attr, None)
            if inspect.isclass(member) or inspect.isfunction(member) or inspect.isbuiltin(member):
                docs.append(inspect.getdoc(member) or "")
    return re.findall(r"[a-z]+", "\n".join(docs).lower())


def encode(words: list[str]) -> tuple[torch.Tensor, list[str]]:
    """The word ids (``int64``) and the vocabulary: ``<unk>`` (id 0), then the most frequent words."""
    vocab = ["<unk>"] + [w for w, _ in collections.Counter(words).most_common(VOCAB - 1)]
    index = {w: i for i, w in enumerate(vocab)}
    return torch.tensor([index.get(w, 0) for w in words], dtype=torch.int64), vocab


def batches(ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(words, next words)`` windows of shape (STREAMS, BPTT); the tail that fills no window is dropped."""
    length = (len(ids) - 1) // STREAMS  # each stream keeps one word more for its last target
    streams = ids[: STREAMS * length + 1]
    inputs = streams[:-1].view(STREAMS, length)
    targets = streams[1:].view(STREAMS, length)
    return [(inputs[:, i:i + BPTT], targets[:, i:i + BPTT]) for i in range(0, length - BPTT + 1, BPTT)]


class WordLSTM(nn.Module):
    """Embedding → one LSTM layer → a linear layer over the vocabulary."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, vocab)

    def forward(self, words: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None):
        """Logits of each next word (streams × words × vocab) and the LSTM's state after the window."""
        out, state = self.lstm(self.embed(words), state)
        return self.head(out), state


class CarriedState:
    """The hidden state one batch hands to the next: detached (truncated BPTT), reset per epoch."""

    def __init__(self) -> None:
        self.state: tuple[torch.Tensor, torch.Tensor] | None = None

    def take(self, batch_idx: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if batch_idx == 0:  # each epoch starts from zeros
            self.state = None
        return self.state

    def keep(self, state: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.state = (state[0].detach(), state[1].detach())


def lm_loss(net: WordLSTM, carried: CarriedState, batch_idx: int, words: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per predicted word of one window, carrying the state on."""
    logits, state = net(words, carried.take(batch_idx))
    carried.keep(state)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def bptt_step(carried: CarriedState):
    """The custom step: zero grads → forward from the carried state → loss → backward → clip →
    step → report the update. Its record weighs the loss by the window's words."""

    def step(ctx: nnx.TrainStepContext) -> nnx.EvaluationDataPoint:
        words, targets = ctx.batch
        ctx.optimizer.zero_grad()
        loss = lm_loss(ctx.model.net, carried, ctx.batch_idx, words, targets)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite language-model loss at batch {ctx.batch_idx}")
        loss.backward()
        nn.utils.clip_grad_norm_(ctx.model.net.parameters(), CLIP)
        ctx.optimizer.step()
        ctx.report_update()  # exactly once per real optimizer step
        return nnx.EvaluationDataPoint(loss=float(loss.detach()), count=targets.numel())

    return step


def twin(loader: list, vocab: int, epochs: int) -> tuple[WordLSTM, list[float]]:
    """The same training in plain PyTorch: each epoch's per-token perplexity."""
    torch.manual_seed(0)
    net = WordLSTM(vocab)
    optimizer = torch.optim.Adam(net.parameters(), lr=LR)
    carried = CarriedState()
    perplexities = []
    for _ in range(epochs):
        total, tokens = 0.0, 0
        for batch_idx, (words, targets) in enumerate(loader):
            optimizer.zero_grad()
            loss = lm_loss(net, carried, batch_idx, words, targets)
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            optimizer.step()
            total, tokens = total + loss.item() * targets.numel(), tokens + targets.numel()
        perplexities.append(math.exp(total / tokens))
    return net, perplexities


def per_token_perplexity(run: nnx.NNRun, epoch: int) -> float:
    """``exp`` of the epoch's mean cross-entropy per predicted word, from the step's batch records."""
    records = [r.train_edp for r in run.idps if r.epoch_idx == epoch and r.train_edp is not None]
    return math.exp(sum(r.loss * r.count for r in records) / sum(r.count for r in records))


def main(argv: list[str] | None = None) -> nnx.NNRun:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="runs root (default ./runs)")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    words = corpus()
    ids, vocab = encode(words)
    loader = batches(ids)
    print(f"{len(words)} words, vocabulary {len(vocab)}, {len(loader)} windows of {STREAMS}×{BPTT} words per epoch")

    torch.manual_seed(0)
    model = nnx.NNModel(module=WordLSTM(len(vocab)), params=nnx.NNModelParams(loss=nnx.Losses.CROSS_ENTROPY))
    params = nnx.NNTrainParams(
        n_epochs=args.epochs, optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=LR), seed=0,
        data_id="stdlib-docstrings-words", train_loader=loader, resume="auto",
    )
    run = model.train(params, train_step_fn=bptt_step(CarriedState()), root=args.root)

    reference, perplexities = twin(loader, len(vocab), args.epochs)
    for epoch, expected in enumerate(perplexities):
        perplexity = per_token_perplexity(run, epoch)
        print(f"epoch {epoch}: per-token perplexity {perplexity:.2f}; plain PyTorch {expected:.2f}")
        assert abs(perplexity - expected) <= 1e-4 * expected, (perplexity, expected)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(model.net.state_dict()[name], value)
    print("final weights match the plain PyTorch loop")
    print(f"run folder: {run.path}")
    return run


if __name__ == "__main__":
    main()
