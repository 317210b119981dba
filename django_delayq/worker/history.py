"""A worker's share of its queues' history (storage/history.py): counted in memory as the
dispatcher settles attempts, flushed to Redis by a duty every :data:`FLUSH_EVERY` seconds and
once more when the worker stops.

The dispatcher's cost per attempt is a few dict increments (one uncontended lock for the
attempts one round trip settled); the flush is one pipelined round trip of HINCRBYs. A
worker killed with SIGKILL (or whose host died) loses what it counted since its last flush:
at most FLUSH_EVERY seconds of its own attempts (the jobs themselves are unaffected:
recovery settles them, and counts them if it moves them to the dead-letter set). While Redis
is unreachable the counts wait in memory (at most KEEP_HOURS of minutes per queue) and go
with the next flush that gets through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django_delayq.conf import delayq_settings
from django_delayq.storage.history import KEEP_HOURS, bucket_of
from django_delayq.storage.store import Store
from django_delayq.worker.execution import Attempt

logger = logging.getLogger("django_delayq.worker")

FLUSH_EVERY = 5.0  # seconds between flushes

Counts = dict[tuple[str, int], dict[str, int]]


def history_on() -> bool:
    """Whether workers keep the history (DELAYQ["HISTORY"])."""
    return delayq_settings.HISTORY is True


class HistoryCounts:
    """Counts per (queue, epoch minute) not flushed yet (thread-safe)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock  # Redis's clock as this worker sees it (epoch s)
        self._lock = threading.Lock()
        self._counts: Counts = {}

    def add(self, queue: str, kind: str, count: int = 1, at: float | None = None) -> None:
        """``count`` more of ``kind`` ("d" done, "f" failed, "x" dead, "e" expired) in the minute of
        ``at`` (epoch s; now when None)."""
        minute = int((self.clock() if at is None else at) // 60)
        with self._lock:
            fields = self._counts.setdefault((queue, minute), {})
            fields[kind] = fields.get(kind, 0) + count

    def settled(self, attempts: list[tuple[Attempt, str, bool]]) -> None:
        """Attempts Redis just settled, each with its kind ("d" done, "f" failed, "": its
        lease was lost) and whether its job died; the lateness of each that started and
        whose due time the claim read: its start (monotonic) on Redis's clock minus its due
        time (claim.lua returns it), counted in the minute it started. One lock for all of them."""
        now = self.clock()
        minute, wall = int(now // 60), now - time.monotonic()
        with self._lock:
            counts = self._counts
            for a, kind, dead in attempts:
                fields = counts.get((a.queue, minute))
                if fields is None:
                    fields = counts[a.queue, minute] = {}
                if kind:
                    fields[kind] = fields.get(kind, 0) + 1
                if dead:
                    fields["x"] = fields.get("x", 0) + 1
                if a.due is not None and a.started is not None:
                    started = wall + a.started
                    late = f"l{bucket_of((started - a.due) * 1000)}"
                    fields = counts.setdefault((a.queue, int(started // 60)), {})
                    fields[late] = fields.get(late, 0) + 1

    def take(self) -> Counts:
        """Every count so far (they are forgotten here)."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def give_back(self, counts: Counts) -> None:
        """A flush failed: keep ``counts`` for the next one (minutes older than the history
        keeps are dropped, so an outage cannot grow this without bound)."""
        oldest = int(self.clock() // 60) - KEEP_HOURS * 60
        with self._lock:
            for where, fields in counts.items():
                if where[1] < oldest:
                    continue
                mine = self._counts.setdefault(where, {})
                for kind, count in fields.items():
                    mine[kind] = mine.get(kind, 0) + count


class HistoryFlush:
    """The duty (duties.py runs it) that writes a worker's counts to Redis."""

    name = "history"
    what = "history flush"
    log = logger
    first = FLUSH_EVERY

    def __init__(self, store: Store, counts: HistoryCounts) -> None:
        self.store, self.counts = store, counts

    def step(self) -> float:
        self.flush()
        return FLUSH_EVERY

    def retry_in(self, exc: Exception, backoff: float) -> float:
        return max(backoff, 1.0)

    def flush(self) -> None:
        """Write the counts so far; on failure they are kept and the error raised."""
        counts = self.counts.take()
        if not counts:
            return
        try:
            left, error = self.store.history.flush(counts)
        except Exception:
            self.counts.give_back(counts)
            raise
        if left:
            self.counts.give_back(left)
        if error is not None:
            raise error

    def last_flush(self) -> None:
        """The worker stops: one flush more, its failure only logged."""
        try:
            self.flush()
        except Exception as exc:
            logger.warning("history: the last counts could not be written (%s)", exc)
