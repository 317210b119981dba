"""When a worker runs the reconcile pass (reconcile.py): every worker has a thread that
looks every RECONCILE_INTERVAL seconds whether anything a pass depends on changed, and runs
a full pass then, and otherwise once the last full pass's CPU time is at most FULL_SHARE of
the time since (a few schedules: every look; 10,000: about every 100 s).

A look costs two aggregate queries and one Redis command, whatever the number of schedules:
- the Schedule rows (how many, the latest ``updated_at``: every ``save()``, ``create()``,
  ``bulk_create()`` and admin edit sets it);
- the recorded states (how many, the sum of their generations: another worker recorded a
  change, or a new deploy's settings);
- the mark of the last full pass in Redis (gone after a FLUSHALL or a restart without
  persistence: the pending occurrences must be created again);
- this worker's settings (``override_settings`` in tests; a deploy starts new processes).
A row changed by ``QuerySet.update()`` or SQL leaves ``updated_at`` alone: the next periodic
full pass picks it up. A full pass over 10,000 unchanged schedules costs about 0.2 s of
CPU: every 2 s, in every worker process, that alone was most of an occurrence's cost at one
fire a minute (docs/performance.rst). A pass taking long also spaces the next ones
(PASS_SHARE).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections

from django_delayq.conf import delayq_settings
from django_delayq.recurring.claims import successors_lost as wanted
from django_delayq.recurring.claims import write_outcomes
from django_delayq.recurring.reconcile import Reconciler
from django_delayq.recurring.tables import migrated_tables
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.recurring")

FULL_SHARE = 0.002  # the periodic full pass takes at most this share of one core
# A full pass takes at most about a tenth of the time between passes.
PASS_SHARE = 0.1
DATABASE_RETRY = 30.0  # seconds added to the wait for the next look when the database failed


def fingerprint() -> tuple:
    """What the next full pass would read, in two aggregate queries."""
    from django.db.models import Count, Max, Sum

    from django_delayq.models import Schedule, ScheduleState

    rows = Schedule.objects.aggregate(n=Count("id"), at=Max("updated_at"))
    states = ScheduleState.objects.aggregate(n=Count("name"), g=Sum("generation"))
    raw = delayq_settings.SCHEDULES
    return (rows["n"], rows["at"], states["n"], states["g"], id(raw))


class PassLoop:
    """A worker's duty that runs the passes; ``run_once`` is one look (tests drive it)."""

    name = "schedules"
    what = "recurring schedules"
    log = logger
    first = 0.0

    def __init__(self, reconciler: Reconciler, full_share: float = FULL_SHARE) -> None:
        self.reconciler = reconciler
        self.full_share = full_share
        self.seen: tuple | None = None  # the fingerprint the last full pass started from
        self.last_full = -1e9
        self.cost = 0.0  # CPU seconds of the last full pass
        self.passes = 0

    def due(self) -> tuple[bool, tuple]:
        now = fingerprint()
        since = time.monotonic() - self.last_full
        stale = since >= max(self.reconciler.interval, self.cost / self.full_share)
        lost = not self.reconciler.store.recurring.reconciled()
        return stale or now != self.seen or wanted.is_set() or lost, now

    def run_once(self) -> bool:
        """One look, and a full pass when due; whether a pass ran. Each look also writes the
        occurrences' outcomes that ended since (claims.py; a commit, so not on the
        dispatcher's thread)."""
        write_outcomes()
        due, now = self.due()
        if not due:
            return False
        wanted.clear()
        began = time.thread_time()
        self.reconciler.run_pass()
        self.cost = time.thread_time() - began
        self.seen, self.last_full = now, time.monotonic()
        self.passes += 1
        return True

    def step(self) -> float:
        """One look (a duty's step: the worker's duty loop, worker/duties.py, runs it until
        the worker stops); the seconds until the next look."""
        close_old_connections()
        began = time.monotonic()
        try:
            with migrated_tables():  # a missing table: the error names the command to run
                ran = self.run_once()
        finally:
            close_old_connections()
        took = time.monotonic() - began
        interval = self.reconciler.interval
        return max(interval, took / PASS_SHARE - took) if ran else interval

    def retry_in(self, exc: Exception, backoff: float) -> float:
        """After a failed look: the next in RECONCILE_INTERVAL, and DATABASE_RETRY more
        when the database could not be read (no table yet: migrate; or it is down)."""
        interval = self.reconciler.interval
        return DATABASE_RETRY + interval if isinstance(exc, DatabaseError) else interval


def duty(store: Store, clock: Callable[[], float] | None) -> PassLoop:
    """The worker's hook: the duty that runs the passes (worker/dispatch.py gives it a
    thread of its own)."""
    return PassLoop(Reconciler(store, clock=clock))
