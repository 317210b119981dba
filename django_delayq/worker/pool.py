"""What a worker's runner threads (runners.py) and its event loop (aio.py) share: the
attempts held (holdings), the claim sizing (prefetch), the start marks (starts), the
executor, and the dispatcher's events (``wake`` wakes it, ``stopped`` ends the pool,
``stopping()`` says a stop was requested)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django_delayq.worker.execution import Executor
from django_delayq.worker.holdings import Holdings
from django_delayq.worker.prefetch import Prefetch
from django_delayq.worker.starts import Starts


class Pool:
    def __init__(
        self,
        holdings: Holdings,
        prefetch: Prefetch,
        starts: Starts,
        executor: Executor,
        *,
        wake: threading.Event,
        stopped: threading.Event,
        stopping: Callable[[], bool],
    ) -> None:
        self.holdings, self.prefetch, self.starts, self.executor = (
            holdings,
            prefetch,
            starts,
            executor,
        )
        self.wake, self.stopped, self.stopping = wake, stopped, stopping

    def wake_after(self, ok: bool, refill_due: Callable[[], bool]) -> None:
        """After an attempt: wake the dispatcher when a round trip is worth it (a failure
        to deliver, a stop under way, or ``refill_due()``), unless a wake is pending
        already. A pending wake needs no second one, nor the prefetch's look: the
        dispatcher clears it before it reads the holdings, so it sees this attempt."""
        if not self.wake.is_set() and (not ok or self.stopping() or refill_due()):
            self.wake.set()
