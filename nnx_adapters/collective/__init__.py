"""``Collective`` adapters: torch.distributed (``torch``), threads (``threads``), one process (``local``)."""
