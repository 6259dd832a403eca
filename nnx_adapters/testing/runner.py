"""A ``Runner`` whose work runs when a test says (``nnx_core.background``): the commit in flight is
held while the test moves training on, then run, crashed or failed at any of its file events."""

from __future__ import annotations

from collections.abc import Callable


class Held:
    """One held commit: ``run`` it now, or it runs when waited for."""

    def __init__(self, work: Callable[[], None]) -> None:
        self.work: Callable[[], None] | None = work

    def done(self) -> bool:
        """Whether the work ran."""
        return self.work is None

    def run(self) -> None:
        """Run the work (once)."""
        work, self.work = self.work, None
        if work is not None:
            work()

    def wait(self) -> None:
        """The training thread waits: the work runs now if it has not yet."""
        self.run()


class HeldRunner:
    """Holds every started commit until the test runs it, or training waits for it."""

    def __init__(self) -> None:
        self.started: list[Held] = []
        self.peak = 0  # the most commits started and not yet run at once (the one starting included)

    def start(self, work: Callable[[], None]) -> Held:
        """Hold ``work``; the newest is ``started[-1]``."""
        held = Held(work)
        self.started.append(held)
        self.peak = max(self.peak, len(self.held()))
        return held

    def held(self) -> list[Held]:
        """The started commits that have not run yet, oldest first."""
        return [held for held in self.started if not held.done()]
