"""How many due jobs a worker claims beyond its runners.

When jobs are short, a round trip per job would cost more than the jobs, so the dispatcher
claims up to ``PREFETCH_MAX`` more due jobs than it has runners and refills when three
quarters of them are gone. How many depends on how long jobs take (a moving average): enough
that a prefetched job waits about ``PREFETCH_WAIT`` for a runner, none for jobs that take
longer. A claim's fixed cost (the script's, a round trip) is shared by the jobs it brings: at
concurrency 1, a 20 ms wait and a refill at half made claims of about 11 no-op jobs; the
prefetched jobs are leased and heartbeated like running ones, so a longer wait risks no
lease. Claimed jobs
count no attempt until a runner starts them, so a worker that dies with jobs waiting in it
costs them nothing. When every runner has been busy for ``PREFETCH_STALL`` (a slow job in a
fast queue), and when the worker stops, waiting jobs are handed back (dispatch.py). The event
loop (aio.py) has a prefetch of its own, by the same rule: as many jobs as its slots get
through in about LOOP_PREFETCH_WAIT, at most a quarter of its slots, so a freed slot starts the
next attempt without waiting for a round trip.

A worker with an event loop for ``async def`` tasks (``async_concurrency``, aio.py) has two
pools, and a claim cannot choose what it gets: a job's task is known only once it is
claimed. So the claim's limit follows the share ``s`` of loop jobs among recent claims (each
claim moves ``s`` half-way to its own share): with ``T`` free runner threads (plus the
prefetch) and ``R`` free loop slots, it claims ``min(T / (1 - s), R / s)`` jobs, the most
that should fill neither pool past its room, and at least ``ceil(R * s)`` (``ceil(T *
(1 - s))``) while nothing waits in the other pool's line, so jobs of one kind queued behind
the other's are found even while the other pool is full. ``s`` stays within [1/256,
255/256] and starts as the share of registered tasks that can run on the loop (a first
claim of a mostly sync code base takes few jobs for the loop); a worker whose registry has
no such task keeps ``s = 0`` and claims exactly as a worker without a loop. A job a pool
cannot start soon is handed back when that pool stalls (every slot busy for
``PREFETCH_STALL``), as prefetched jobs are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from django_delayq.worker.holdings import Holdings, Load

PREFETCH_MAX = 64  # claimed jobs waiting for a runner, at most
PREFETCH_WAIT = 0.1  # seconds a prefetched job should wait for a runner, at most about
REFILL_AT = 4  # without a loop, claim again when 1/REFILL_AT of the prefetch is left
LOOP_PREFETCH_WAIT = 0.02  # the same for the event loop's prefetch
PREFETCH_STALL = 0.25  # seconds every runner may be busy before waiting jobs are handed back
SHARE_BOUND = 1 / 256  # the share of loop jobs a claim expects stays within [this, 1 - this]
LOOP_REFILL = 8  # with no loop prefetch, the loop is refilled when 1/8 of its slots are free
LOOP_PREFETCH_MAX = 4  # the loop's prefetch is at most a quarter of its slots


class Prefetch:
    """The prefetch of one worker: its jobs' run time, and how many it claimed beyond its
    runners last time (``size``)."""

    def __init__(self, holdings: Holdings, loop_share: Callable[[], float] = lambda: 0.0) -> None:
        """``loop_share()``: the share of registered tasks that may run on the event loop
        (asked once, at the first claim: the worker imports its tasks when it starts)."""
        self.holdings = holdings
        self.job_time: float | None = None  # moving average of a job's run time (s)
        self.size = 0  # jobs claimed beyond the runners in the last claim
        self._loop_share = loop_share
        self.share: float | None = None  # loop jobs among recent claims (None: not asked)
        self.loop_time: float | None = None  # moving average of a loop attempt's time (s)

    def ran(self, took: float) -> None:
        """A runner spent ``took`` seconds on a job. No lock: two runners updating the
        average at once may lose one sample of it, which an estimate can afford (one lock
        less per job)."""
        average = self.job_time
        self.job_time = took if average is None else average + (took - average) / 8

    def wanted(self) -> int:
        """How many due jobs to claim beyond the runners: as many as the runners get through
        in about PREFETCH_WAIT, judging by recent jobs (none before the first)."""
        if self.job_time is None:
            return 0
        estimate = self.job_time
        started = self.holdings.running_since()
        if started:  # a job running for long now says more than the average
            estimate = max(estimate, time.monotonic() - min(started))
        concurrency = self.holdings.concurrency
        return min(PREFETCH_MAX, int(PREFETCH_WAIT * concurrency / max(estimate, 1e-6)))

    def ran_on_loop(self, took: float) -> None:
        """The event loop spent ``took`` seconds on an attempt (its thread only)."""
        average = self.loop_time
        self.loop_time = took if average is None else average + (took - average) / 64

    def loop_wanted(self) -> int:
        """How many jobs to claim beyond the loop's slots: as many as it gets through in
        about LOOP_PREFETCH_WAIT, at most a quarter of its slots (none before the first)."""
        if self.loop_time is None:
            return 0
        slots = self.holdings.async_concurrency
        most = slots // LOOP_PREFETCH_MAX
        return min(most, int(LOOP_PREFETCH_WAIT * slots / max(self.loop_time, 1e-6)))

    # -- the claim's limit and when to claim ---------------------------------------------

    def _share(self) -> float:
        if self.share is None:
            first = self._loop_share() if self.holdings.classify is not None else 0.0
            self.share = min(max(first, SHARE_BOUND), 1 - SHARE_BOUND) if first else 0.0
        return self.share

    def claimed(self, jobs: int, for_loop: int) -> None:
        """A claim brought ``jobs`` jobs, ``for_loop`` of them for the event loop."""
        if jobs and self._share():
            share = (self.share or 0.0) + (for_loop / jobs - (self.share or 0.0)) / 2
            self.share = min(max(share, SHARE_BOUND), 1 - SHARE_BOUND)

    def claim_limit(self, extra: int, load: Load | None = None, loop_extra: bool = True) -> int:
        """How many jobs to claim now, ``extra`` of them beyond the runner threads, and
        with ``loop_extra`` the loop's prefetch beyond its slots (see the module
        docstring)."""
        load = load or self.holdings.load()
        threads = max(self.holdings.concurrency + extra - load.busy, 0)
        share = self._share()
        if not share:
            return threads
        beyond = self.loop_wanted() if loop_extra else 0
        loop = max(self.holdings.async_concurrency + beyond - load.async_busy, 0)
        limit = int(min(threads / (1 - share), loop / share))
        if not load.waiting_threads:
            limit = max(limit, math.ceil(loop * share))
        if not load.waiting_loop:
            limit = max(limit, math.ceil(threads * (1 - share)))
        return limit

    def refill_due(self, load: Load | None = None) -> bool:
        """Worth a round trip to claim more: three quarters of the prefetched jobs are gone
        (with no prefetch: a runner is idle); with a loop, the claim would bring, by the
        share, about as many jobs as half of each pool's prefetch (an eighth of the loop's
        slots when it has none)."""
        load = load or self.holdings.load()
        share = self._share()
        if not share:
            return load.busy < self._refill_below()
        loop_extra = self.loop_wanted()
        loop_part = (loop_extra + 1) // 2 or max(1, self.holdings.async_concurrency // LOOP_REFILL)
        wanted = max(1, round((1 - share) * (self.size // 2 + 1) + share * loop_part))
        return self.claim_limit(self.size, load) >= wanted

    def refill_due_after(self, busy: int) -> bool:
        """:meth:`refill_due` after a runner thread's job, ``busy`` the attempts of the
        threads' pool left (without a loop, nothing more is read)."""
        if not self._share():
            return busy < self._refill_below()
        return self.refill_due()

    def _refill_below(self) -> int:
        """Without a loop: refill once fewer attempts than this are busy (a quarter of the
        prefetch left, rounded up: with a prefetch of one or none, once a runner is idle)."""
        return self.holdings.concurrency + (self.size + REFILL_AT - 1) // REFILL_AT

    def claim_now(self, load: Load) -> bool:
        """After a claim that left due jobs behind: claim again at once (a runner, or enough
        of the loop, is idle)."""
        if not self._share():
            return load.busy < self.holdings.concurrency
        return self.refill_due(load)

    def room(self, load: Load) -> bool:
        """Whether a job due now could be claimed (else the dispatcher sleeps past its due
        time until a runner frees up)."""
        if not self._share():
            return load.busy < self.holdings.concurrency
        return self.claim_limit(self.size, load) > 0

    def stalled(self) -> tuple[bool, bool]:
        """(runner threads, event loop): jobs wait for that pool while each of its slots is
        on a job older than PREFETCH_STALL."""
        return self.holdings.stalled(time.monotonic() - PREFETCH_STALL)
