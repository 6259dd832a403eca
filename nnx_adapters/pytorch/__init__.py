"""torch adapters: optimizers and schedules, loss scaling, checkpoint codec and RNG, tasks, metrics."""
