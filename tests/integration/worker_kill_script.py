"""A run read by two loader worker processes: ``python worker_kill_script.py ROOT [--kill]``.

With ``--kill`` it prints ``run <id>`` and SIGKILLs itself in the middle of epoch 2, while its
workers are alive (they notice their parent's death seconds later). Epoch 0's commit is durable by
then, whatever the background writer was doing: epoch 1's commit point waited for it (one commit in
flight), so the run always has a committed epoch to continue from. Without ``--kill`` it trains to the end
with ``resume="auto"`` and prints ``done <id> <resume mode>``.
"""

from __future__ import annotations

import os
import signal
import sys

os.environ.setdefault("NNX_PROGRESS", "0")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import nnx_api as nnx  # noqa: E402


class KillMidEpoch(nnx.Callback):
    def on_optimizer_update(self, ctx, event) -> None:
        if event.epoch_idx == 2 and event.batch_idx == 2:
            print(f"run {ctx.run.id}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def main(root: str, kill: bool) -> None:
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(1))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=4, seed=0, resume="auto", train_loader=loader, progress=False)
    run = model.train(params, root=root, callbacks=[KillMidEpoch()] if kill else [])
    print(f"done {run.id} {run.resume_status.mode if run.resume_status else None}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], "--kill" in sys.argv[2:])
