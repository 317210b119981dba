"""Relaying: moving outbox rows (outbox.py) into Redis, by the committing process right
after the commit (:func:`relay_now`, the fast path) and by workers (:class:`Relay`, a
thread of each delayq_worker).

A relay reads its rows under their row lock, with the database's now() in the same query,
and sends each row's id and record through schedule.lua / schedule_many.lua in relay mode:
a delay= row as the delay that remains on the database's clock (Redis's clock counts it,
so a producer's clock never makes a job early), an at= row as its absolute time; a keyed
row adopts its key (a pending Redis holder is removed: the job runs under the row's id).
The scripts mark each relayed id in the queue's "relayed" set; a marked id is never stored
again, however long the row's DELETE is refused. The marks are removed once the DELETE
committed (:func:`unmark`), and a worker's relay sweeps old marks of rows that are gone
(:func:`sweep_marks`). The commit hook relays the row *as the table holds it at commit*
(read by id): a cancel or a replace later in the transaction is what the commit applies.

Several workers relay at once without duplicates: on PostgreSQL and MySQL/MariaDB each pass
takes its rows with ``SELECT ... FOR UPDATE SKIP LOCKED`` in a transaction that deletes what
it relayed; SQLite has no row locks, so a pass first takes the database's write lock (a
no-op DELETE) and holds it for the pass (one batch, one Redis round trip).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, close_old_connections, connections, transaction
from django.db.models import Q

from django_delayq.conf import delayq_settings
from django_delayq.outbox import rows as outbox
from django_delayq.outbox.database_time import after, epoch, now_sql
from django_delayq.outbox.rows import GRACE, ROW_FIELDS, Row, aliases
from django_delayq.storage.bulk import Batch, Entry
from django_delayq.storage.store import Scheduled, Store
from django_delayq.wording import counted

logger = logging.getLogger("django_delayq.outbox")

RELAY_BATCH = 1_000  # rows per pass (one transaction, one Redis round trip)
RELAY_PASSES = 10  # passes per turn at most while full batches keep coming
RELAY_EVERY = 1.0  # seconds between two turns of a worker's relay
TABLE_RECHECK = 60.0  # seconds before a relay looks again for a missing outbox table
# A relay marks the ids it stored ("relayed", outbox promise I6) until their rows' DELETE commits;
# a worker's relay sweeps, every SWEEP_EVERY seconds, marks older than SWEEP_AGE whose rows
# are gone (SWEEP_BATCH per queue).
SWEEP_AGE = 300.0
SWEEP_EVERY = 60.0
SWEEP_BATCH = 500
FAST_BUDGET = 0.0  # seconds the fast path re-sends a relay that failed: none
# Seconds a process leaves rows to the workers after one of its fast paths failed: a
# connection attempt to a Redis that is down can take seconds (redis-py retries connects),
# and a request committing many jobs must not pay that per job.
FAST_PAUSE = 5.0
_fast_failed_at = -FAST_PAUSE  # time.monotonic() of the last failed fast path


def relay(
    store: Store, rows: Sequence[Row], budget: float = 2.0
) -> tuple[dict[str, Scheduled], Exception | None]:
    """Store rows in Redis in one round trip: one schedule_many op per queue for rows
    without unique keys, one schedule op per row with one, all marked ``relay``, re-sent for
    ``budget`` seconds. Returns the results of the rows Redis took, by id, and the first
    error (those rows stay)."""
    # Relay mode: a relayed id is never stored twice; a keyed row's id is the job (outbox
    # promises I1, I3).
    batch = Batch(store, [_entry(row) for row in rows], relay=True)
    done, error = batch.results(store.run(batch.ops, budget=budget))
    if error is not None:
        logger.warning(
            "outbox relay: %d of %d rows not relayed (%s)", len(rows) - len(done), len(rows), error
        )
    return done, error


def _entry(row: Row) -> Entry:
    """A row as a batch entry. Its due time: the remaining delay (Redis's clock counts it),
    or the absolute time of an ``at=`` job."""
    when = {"at": row.due_at} if row.delay is None else {"delay": max(row.delay, 0.0)}
    entry = (row.id, row.queue, row.record, when, row.key, row.on_conflict, row.link, row.group)
    # A debounce (outbox/debounce.py): its cap, and its key's first due time unless that is
    # its own (a row never replaced: Redis keeps the due time it stores, on its clock).
    first = row.first_due if row.first_due != row.due_at else None
    return Entry(*entry, max_wait=row.max_wait, first_due=first)


def relay_now(store: Store, alias: str, ids: Sequence[str]) -> bool:
    """The fast path, a commit hook of the committing process: relay the rows of ``ids``
    *as the table holds them now* (read by id under the relay's row lock, so a row
    cancelled or replaced later in the committed transaction relays as cancelled, nothing,
    or as replaced), except rows beyond the horizon, and delete them. Never raises (it runs
    in a commit hook): a failure is logged and the rows wait for a worker. True if the
    pass ran.

    One attempt, nothing re-sent (``FAST_BUDGET``): with Redis down, a request that
    commits jobs is not held up for seconds per job; the workers relay the rows. After a
    Redis failure this process skips the fast path for ``FAST_PAUSE`` seconds."""
    global _fast_failed_at
    if time.monotonic() - _fast_failed_at < FAST_PAUSE:
        logger.info("job %s stays in the database outbox for a worker's relay", ", ".join(ids))
        return False
    try:
        relay_pass(store, alias, limit=len(ids), ids=ids, near=True, budget=FAST_BUDGET)
    except Exception as exc:
        if not isinstance(exc, DatabaseError):
            _fast_failed_at = time.monotonic()
        logger.warning(
            "job %s stays in the database outbox (%s): a delayq_worker relays it to Redis "
            "within seconds",
            ", ".join(ids),
            exc,
        )
        return False
    return True


def relay_pass(
    store: Store,
    alias: str,
    limit: int = RELAY_BATCH,
    now: float | None = None,
    ids: Sequence[str] | None = None,
    near: bool = False,
    budget: float = 2.0,
) -> int:
    """Relay up to ``limit`` rows of ``alias`` and delete them, in one transaction; how
    many. Which rows: those of ``ids`` whatever their relay time (with ``near``, not those
    beyond the horizon); else those whose relay time has come, and with
    ``DELAYQ["HORIZON"]`` off also every row whose relay time lies beyond an on_commit
    row's GRACE (rows left from when it was on move at once; an on_commit row still
    waits its GRACE for its committing process's fast path)."""
    db_now = now_sql(alias, now)  # the database's clock (``now``: a test's)
    with transaction.atomic(using=alias):
        outbox.write_lock(alias)
        batch = _read(_to_relay(alias, db_now, ids, near), db_now, limit)
        if not batch:
            return 0
        done, error = relay(store, batch, budget)
        outbox.delete(alias, done)
    # Committed. (A pass whose transaction fails after its Redis write, a refused DELETE
    # say, leaves its rows for the next pass: they are marked relayed in Redis, so relaying
    # them again stores nothing, however long that lasts.) The marks can go now.
    if done:
        unmark(store, [row for row in batch if row.id in done])
        logger.info(
            "outbox relay: %s moved into Redis from database %r", counted(len(done), "row"), alias
        )
    if error is not None and not done:
        raise error
    return len(done)


def _to_relay(alias: str, db_now: Any, ids: Sequence[str] | None, near: bool) -> Any:
    """The rows a pass takes (see :func:`relay_pass`), oldest relay time first, locked
    (skipping rows another relay holds) where the database can."""
    horizon = delayq_settings.HORIZON
    rows = outbox._rows(alias)
    if ids is not None:
        rows = rows.filter(id__in=ids)
        if near and horizon is not None:
            rows = rows.filter(due_at__lte=after(db_now, horizon))
    elif horizon is not None:
        rows = rows.filter(relay_at__lte=db_now)
    else:
        rows = rows.filter(Q(relay_at__lte=db_now) | Q(relay_at__gt=after(db_now, GRACE + 1.0)))
    rows = rows.order_by("relay_at")
    if connections[alias].features.has_select_for_update_skip_locked:
        rows = rows.select_for_update(skip_locked=True)
    return rows


def _read(rows: Any, db_now: Any, limit: int) -> list[Row]:
    """Up to ``limit`` of ``rows``, a delay= row's delay being what remains on the
    database's clock (read in the same query)."""
    found = []
    for values in rows.values_list(*ROW_FIELDS, db_now)[:limit]:
        i, q, due, record, key, on_conflict, relative, link, max_wait, first, group, at = values
        delay = (due - at).total_seconds() if relative else None
        first_due = None if first is None else epoch(first)
        extra = (delay, link, max_wait, first_due, group)
        found.append(Row(i, q, epoch(due), bytes(record), key, on_conflict, *extra))
    return found


def unmark(store: Store, rows: Sequence[Row]) -> None:
    """Remove the relayed marks of rows whose DELETE committed (one round trip, one try:
    a mark left behind is swept by a worker's relay)."""
    by_queue: dict[str, list[str]] = {}
    for row in rows:
        by_queue.setdefault(row.queue, []).append(row.id)
    ops = [store.unmark_relayed_op(queue, ids) for queue, ids in by_queue.items()]
    for result in store.run(ops, budget=0.0):
        if isinstance(result, Exception):
            logger.info("outbox relay: relayed marks left for the sweep (%s)", result)
            return


def sweep_marks(
    store: Store, in_aliases: Sequence[str], now: float | None = None, limit: int = SWEEP_BATCH
) -> int:
    """Remove relayed marks older than SWEEP_AGE whose rows are in no outbox database (their
    relayer's ZREM was lost), ``limit`` per queue; how many."""
    before = (time.time() if now is None else now) - SWEEP_AGE
    removed = 0
    for queue in store.queues():
        old = store.old_relayed(queue, before, limit)
        if not old:
            continue
        waiting: set[str] = set()
        for alias in in_aliases:
            waiting.update(outbox._rows(alias).filter(id__in=old).values_list("id", flat=True))
        gone = [i for i in old if i not in waiting]
        if gone:
            store.call(store.unmark_relayed_op(queue, gone))
            removed += len(gone)
    return removed


def run_now(store: Store, queue: str, ids: Sequence[str], now: float | None = None) -> list[str]:
    """Make rows due now and relay them at once; the ids relayed."""
    now = time.time() if now is None else now
    moved: list[str] = []
    for alias in aliases():
        with transaction.atomic(using=alias):
            at = now_sql(alias, now)
            outbox._rows(alias).filter(queue=queue, id__in=ids).update(
                due_at=at, relay_at=at, relative=True
            )
        found = list(
            outbox._rows(alias).filter(queue=queue, id__in=ids).values_list("id", flat=True)
        )
        if found:
            relay_pass(store, alias, limit=len(found), now=now, ids=found)
            moved += found
    return moved


class Relay:
    """A worker's relay: a bounded pass over every outbox alias each ``RELAY_EVERY``
    seconds, on a thread of its own (heartbeats have theirs). A duty: the worker's duty
    loop (worker/duties.py) runs it, every RELAY_EVERY seconds after a failure too."""

    name = "relay"
    what = "outbox relay"
    log = logger
    first = 0.0

    def __init__(self, store: Store, stopped: threading.Event) -> None:
        self.store = store
        self.stopped = stopped
        self.turns = 0
        self.relayed = 0
        self._no_table: dict[str, float] = {}  # alias -> when to look for the table again
        self._sweep_at = time.monotonic() + SWEEP_EVERY  # the relayed marks' next sweep

    def _has_table(self, alias: str) -> bool:
        """Whether ``alias`` has the outbox table (looked up again every TABLE_RECHECK
        seconds while it has not: a database without the migration is skipped, with one
        warning, rather than failing every second)."""
        again = self._no_table.get(alias)
        if again is not None and time.monotonic() < again:
            return False
        found = outbox._model()._meta.db_table in connections[alias].introspection.table_names()
        if found:
            self._no_table.pop(alias, None)
        else:
            if again is None:
                logger.warning(
                    "outbox relay: database %r has no outbox table; skipped (run manage.py "
                    "migrate django_delayq --database %s, or leave it out of "
                    "DELAYQ['OUTBOX_DATABASES'])",
                    alias,
                    alias,
                )
            self._no_table[alias] = time.monotonic() + TABLE_RECHECK
        return found

    def turn(self) -> int:
        """One turn: passes per alias while full batches keep coming (RELAY_PASSES at most)."""
        self.turns += 1
        moved = 0
        close_old_connections()
        try:
            present = [alias for alias in aliases() if self._has_table(alias)]
            for alias in present:
                for _ in range(RELAY_PASSES):
                    n = relay_pass(self.store, alias)
                    moved += n
                    if n < RELAY_BATCH or self.stopped.is_set():
                        break
            if time.monotonic() >= self._sweep_at:
                self._sweep_at = time.monotonic() + SWEEP_EVERY
                sweep_marks(self.store, present)
        finally:
            close_old_connections()
        self.relayed += moved
        return moved

    def burst(self) -> None:
        """--burst: one turn before the worker runs anything; a failure is logged, the rows
        wait for the next run."""
        try:
            self.turn()
        except Exception as exc:
            logger.warning("--burst: outbox relay failed (%s); rows wait for the next", exc)

    def step(self) -> float:
        self.turn()
        return RELAY_EVERY

    def retry_in(self, exc: Exception, backoff: float) -> float:
        return RELAY_EVERY
