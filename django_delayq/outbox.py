"""The outbox: jobs that wait in the project's database (``models.OutboxJob``), and their
relay into Redis. The only module that reads or writes that table, the way store.py is the
only one that talks to Redis; it hands Redis writes to the store and deals in :class:`Row`.

Two kinds of rows:

- ``schedule(..., on_commit=True)`` inside a transaction inserts the job's row in that
  transaction. After the commit the committing process relays the row at once
  (:func:`relay_now`, the fast path) and deletes it; if that fails (Redis down, process
  killed) the row's ``relay_at`` (``GRACE`` seconds after it was written) passes and any
  worker relays it.
- With ``DELAYQ["HORIZON"]``, a job due later than now + HORIZON is a row whose
  ``relay_at`` is ``due_at - HORIZON``: workers move it into Redis as it comes within the
  horizon, long before it is due, so it runs as on time as a job held in Redis.

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

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import (
    DatabaseError,
    IntegrityError,
    close_old_connections,
    connections,
    router,
    transaction,
)
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, Q, Value
from django.db.models.functions import Now
from django.utils import timezone

from .conf import delayq_settings
from .exceptions import ConfigurationError, DelayQError
from .store import Scheduled, Store
from .wording import counted

if TYPE_CHECKING:
    from .models import OutboxJob

logger = logging.getLogger("django_delayq.outbox")

GRACE = 2.0  # seconds an on_commit row leaves its fast path before workers relay it
RELAY_BATCH = 1_000  # rows per pass (one transaction, one Redis round trip)
RELAY_PASSES = 10  # passes per turn at most while full batches keep coming
RELAY_EVERY = 1.0  # seconds between two turns of a worker's relay
TABLE_RECHECK = 60.0  # seconds before a relay looks again for a missing outbox table
DELETE_CHUNK = 500  # ids per DELETE (SQLite allows 999 parameters)
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


@dataclass(frozen=True)
class Row:
    """A job in the outbox: what a relay needs.

    ``delay``: None for a job due at an absolute time (``at=``, relayed as 'at': Redis
    clamps it at its now); for a job scheduled with ``delay=``, the seconds from the
    database's now to its due time (when written: the delay; when read by a relay: what
    remains, sent to Redis as 'delay' so Redis's clock counts it: outbox promise I7)."""

    id: str
    queue: str
    due_at: float  # epoch seconds (for a delay row, as this process's clock sees it)
    record: bytes
    key: str | None = None
    on_conflict: str = "replace"
    delay: float | None = None


ROW_FIELDS = ("id", "queue", "due_at", "record", "key", "on_conflict", "relative")


@dataclass(frozen=True)
class When:
    """A time the database's clock makes: ``seconds`` after its now (``relative``), else
    the epoch ``seconds``."""

    seconds: float
    relative: bool = True


def key_hash(key: str | None) -> str | None:
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()


def _dt(epoch: float) -> datetime:
    """An epoch as the DateTimeFields take it: aware (UTC), naive in the default time zone
    when USE_TZ is off (outbox promise I9)."""
    moment = datetime.fromtimestamp(epoch, UTC)
    if not settings.USE_TZ:
        return timezone.make_naive(moment, timezone.get_default_timezone())
    return moment


def _epoch(moment: datetime) -> float:
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
    return moment.timestamp()


def _now_sql(alias: str, now: float | None = None) -> Any:
    """The database's now as an SQL expression (SQLite runs in this process: its clock is
    this process's, passed as a value, in the form the column holds)."""
    vendor = connections[alias].vendor
    if now is not None or vendor == "sqlite":
        return Value(_dt(time.time() if now is None else now), output_field=DateTimeField())
    return Now()  # STATEMENT_TIMESTAMP() on PostgreSQL: not the transaction's start


def _sql_time(alias: str, when: When | float) -> Any:
    """``when`` as a value or an SQL expression on the database's clock."""
    if not isinstance(when, When):
        return _dt(when)
    if not when.relative:
        return _dt(when.seconds)
    return ExpressionWrapper(
        _now_sql(alias) + Value(timedelta(seconds=when.seconds), output_field=DurationField()),
        output_field=DateTimeField(),
    )


def db_now(alias: str) -> float:
    """The database's clock now (epoch seconds): one query, except on SQLite."""
    if connections[alias].vendor == "sqlite":
        return time.time()
    with connections[alias].cursor() as cursor:
        sql, params = _rows(alias).query.get_compiler(alias).compile(_now_sql(alias))
        cursor.execute(f"SELECT {sql}", params)
        (moment,) = cursor.fetchone()
    if isinstance(moment, str):  # pragma: no cover - a backend without a converter
        moment = datetime.fromisoformat(moment)
    if timezone.is_naive(moment) and settings.USE_TZ:
        moment = moment.replace(tzinfo=UTC)
    return _epoch(moment)


def _model() -> type[OutboxJob]:
    """The model, imported on first use (the package is imported before the app registry
    is ready: django_delayq/__init__.py imports the API)."""
    from .models import OutboxJob

    return OutboxJob


def _row(obj: OutboxJob) -> Row:
    return Row(obj.id, obj.queue, _epoch(obj.due_at), bytes(obj.record), obj.key, obj.on_conflict)


def aliases() -> list[str]:
    """The database aliases that hold outbox rows. Every read, count, lock, relay and delete
    of rows happens on these and nowhere else, so a read replica is never asked (its rows
    are the primary's, and it refuses locks). ``DELAYQ["OUTBOX_DATABASES"]`` when set; else,
    with DATABASE_ROUTERS, the alias the routers' db_for_write() gives the table (a replica
    may let every table migrate to it, so allow_migrate cannot tell it from a primary);
    else every alias the table may migrate to but TEST MIRROR ones (another's database)."""
    named = delayq_settings.OUTBOX_DATABASES
    if named is not None:
        if not isinstance(named, (list, tuple)) or not all(isinstance(a, str) for a in named):
            raise ConfigurationError(
                "DELAYQ['OUTBOX_DATABASES'] must be None or a list of database aliases, got "
                f"{named!r}."
            )
        return list(named)
    if router.routers:
        return [router.db_for_write(_model())]
    return [
        a
        for a in connections
        if not connections.settings[a].get("TEST", {}).get("MIRROR")
        and router.allow_migrate_model(a, _model())
    ]


def routed_alias() -> str:
    """The alias the routers' db_for_write() gives the outbox table ("default" without
    routers)."""
    return router.db_for_write(_model())


def write_alias() -> str:
    """Where a HORIZON row scheduled outside on_commit goes: the routers' choice, which
    must be one of :func:`aliases` (no relay would read a row elsewhere; delayq.E010)."""
    alias = routed_alias()
    held = aliases()
    if alias not in held:
        raise ConfigurationError(
            f"the routers write django_delayq.OutboxJob to database {alias!r}, which is not "
            f"one of the outbox's databases {held}: add {alias!r} to "
            "DELAYQ['OUTBOX_DATABASES'], or route the table's writes to one of them."
        )
    return alias


def check_on_commit(alias: str, on_commit: bool | str) -> None:
    """ValueError unless ``alias``, the database whose transaction
    ``schedule(on_commit=...)`` joins, is one of :func:`aliases` (no relay would read a
    row written elsewhere, and a read replica refuses it)."""
    held = aliases()
    if alias not in held:
        raise ValueError(
            f"schedule(on_commit={on_commit!r}) writes its row to database {alias!r}, which is "
            f"not one of the outbox's databases {held} (a read replica, or a database no "
            f"relay reads): pass on_commit= one of them, or list {alias!r} in "
            "DELAYQ['OUTBOX_DATABASES']."
        )


def _rows(alias: str) -> Any:
    return _model().objects.using(alias)


# -- writing ---------------------------------------------------------------------------


def save(alias: str, row: Row, relay_at: When | float, now: float | None = None) -> tuple[str, Row]:
    """Insert ``row`` (in the current transaction of ``alias``, if any, inside a savepoint).
    A row with a ``delay`` is due that long after the database's now, computed in SQL;
    ``relay_at`` is an epoch or a :class:`When` on the database's clock (outbox promise I7).
    With a unique key held by another row of its queue: ``replace`` gives that row this
    record, due time and relay time (it keeps its id), ``keep`` leaves it. Returns
    (outcome, the row as stored): 'created', 'replaced' or 'kept'."""
    now = time.time() if now is None else now
    if row.key is None:  # one INSERT, no savepoint: nothing can conflict (a new ULID)
        return _save(alias, row, relay_at, now)
    for attempt in range(3):
        try:
            with transaction.atomic(using=alias):
                return _save(alias, row, relay_at, now)
        except IntegrityError:
            # Another transaction inserted the key first (it committed meanwhile): read it.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _due_sql(alias: str, row: Row) -> Any:
    return _sql_time(alias, When(row.due_at, False) if row.delay is None else When(row.delay))


def _save(alias: str, row: Row, relay_at: When | float, now: float) -> tuple[str, Row]:
    hashed = key_hash(row.key)
    if hashed is not None:
        held = _rows(alias).select_for_update().filter(queue=row.queue, key_hash=hashed).first()
        if held is not None and leftover(row.queue, held.id):
            # A relay stored it in Redis and its DELETE failed: its job is in Redis or ran,
            # so the key is not its; the leftover goes (with this transaction) and this row
            # is a new job (updating it would relay as a no-op, losing this call).
            _rows(alias).filter(id=held.id)._raw_delete(alias)
            held = None
        if held is not None:
            if row.on_conflict == "keep":
                return "kept", _row(held)
            _rows(alias).filter(id=held.id).update(
                record=row.record,
                due_at=_due_sql(alias, row),
                relay_at=_sql_time(alias, relay_at),
                relative=row.delay is not None,
                on_conflict=row.on_conflict,
            )
            return "replaced", replace(row, id=held.id)
    _rows(alias).create(
        id=row.id,
        queue=row.queue,
        due_at=_due_sql(alias, row),
        relay_at=_sql_time(alias, relay_at),
        relative=row.delay is not None,
        key=row.key,
        key_hash=hashed,
        on_conflict=row.on_conflict,
        record=row.record,
        created_at=_dt(now),
    )
    return "created", row


def save_many(
    alias: str, rows: Sequence[tuple[Row, When | float]], now: float | None = None
) -> None:
    """Insert rows without unique keys ((row, relay_at) pairs, relay_at an epoch or a
    :class:`When`), in batches: times on the database's clock, read once (:func:`db_now`)."""
    created = _dt(time.time() if now is None else now)
    base = db_now(alias)

    def epoch(when: When | float) -> float:
        if not isinstance(when, When):
            return when
        return base + when.seconds if when.relative else when.seconds

    objs = [
        _model()(
            id=row.id,
            queue=row.queue,
            due_at=_dt(row.due_at if row.delay is None else base + row.delay),
            relay_at=_dt(epoch(relay_at)),
            relative=row.delay is not None,
            record=row.record,
            on_conflict=row.on_conflict,
            created_at=created,
        )
        for row, relay_at in rows
    ]
    with transaction.atomic(using=alias):
        _rows(alias).bulk_create(objs, batch_size=DELETE_CHUNK)


def delete(alias: str, ids: Iterable[str]) -> int:
    ids = list(ids)
    deleted = 0
    for start in range(0, len(ids), DELETE_CHUNK):
        deleted += _rows(alias).filter(id__in=ids[start : start + DELETE_CHUNK])._raw_delete(alias)
    return deleted


# -- reading -----------------------------------------------------------------------------


def find(job_id: str, queue: str | None = None) -> Row | None:
    """The row of a job id, in whichever alias holds it (get_job() asks on every miss in
    Redis: a miss is one plain SELECT by primary key per alias)."""
    for alias in aliases():
        if not _holds(alias, "id", job_id):
            continue
        rows = _rows(alias).filter(id=job_id)
        if queue is not None:
            rows = rows.filter(queue=queue)
        obj = rows.first()
        if obj is not None:
            return _row(obj)
    return None


def leftover(queue: str, job_id: str) -> bool:
    """Whether the row of ``job_id`` is a leftover of a relay (its job stored in Redis, its
    DELETE refused or lost): marked relayed. False when Redis cannot tell (the row is then
    taken for a waiting job, as before the marks)."""
    from .connection import get_store

    try:
        return bool(get_store().relayed(queue, [job_id]))
    except DelayQError:
        return False


def find_key(queue: str, key: str) -> tuple[str, Row] | None:
    """(alias, row) of the row holding a unique key in a queue. The plain keyed schedule()
    asks this every time: a miss is one plain indexed SELECT per alias (no ORM compile)."""
    hashed = key_hash(key)
    for alias in aliases():
        if not _holds(alias, "key_hash", hashed, queue):
            continue
        obj = _rows(alias).filter(queue=queue, key_hash=hashed).first()
        if obj is not None:
            return alias, _row(obj)
    return None


def _holds(alias: str, column: str, value: Any, queue: str | None = None) -> bool:
    """Whether a row has ``column`` = ``value`` (in ``queue`` if given)."""
    conn = connections[alias]
    table = conn.ops.quote_name(_model()._meta.db_table)
    sql = f"SELECT 1 FROM {table} WHERE {conn.ops.quote_name(column)} = %s"
    params = [value]
    if queue is not None:
        sql += " AND queue = %s"
        params.append(queue)
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


def count(queue: str) -> int:
    return sum(_rows(alias).filter(queue=queue).count() for alias in aliases())


def page(queue: str, offset: int, limit: int) -> list[Row]:
    """Rows of a queue by due time (the admin's pending list shows them after Redis's)."""
    found: list[Row] = []
    for alias in aliases():
        rows = _rows(alias).filter(queue=queue).order_by("due_at", "id")
        found += [_row(obj) for obj in rows[: offset + limit]]
    found.sort(key=lambda r: (r.due_at, r.id))
    return found[offset : offset + limit]


def queues() -> list[str]:
    names: set[str] = set()
    for alias in aliases():
        names.update(_rows(alias).values_list("queue", flat=True).distinct())
    return sorted(names)


def cancel(
    job_id: str | None = None,
    key: str | None = None,
    queue: str | None = None,
    committed: Callable[[Row], None] | None = None,
    stale: Callable[[list[Row]], set[str]] | None = None,
) -> list[Row]:
    """Delete the rows of a job id or unique key (in ``queue`` if given); the rows deleted.
    The deletion joins the caller's transaction on an alias where one is open (a rollback
    restores the row); ``committed(row)`` runs once the deletion of ``row`` commits (at
    once without a transaction). A row a relay holds is waited for (its lock): once
    relayed, it is not found here and the caller cancels it in Redis. ``stale(rows)`` names
    the rows a relay already stored in Redis (their DELETE was refused): those are left to
    the relay's clean-up, not cancelled (their job is in Redis, or ran)."""
    gone: list[Row] = []
    for alias in aliases():
        rows = _rows(alias)
        rows = rows.filter(id=job_id) if job_id is not None else rows.filter(key_hash=key_hash(key))
        if queue is not None:
            rows = rows.filter(queue=queue)
        with transaction.atomic(using=alias):
            found = [_row(obj) for obj in rows.select_for_update()]
            left = stale(found) if stale is not None and found else set()
            for row in found:
                if row.id not in left and _rows(alias).filter(id=row.id)._raw_delete(alias):
                    gone.append(row)
                    if committed is not None:
                        transaction.on_commit(lambda row=row: committed(row), using=alias)
    return gone


# -- relaying ------------------------------------------------------------------------------


def relay(
    store: Store, rows: Sequence[Row], budget: float = 2.0
) -> tuple[dict[str, Scheduled], Exception | None]:
    """Store rows in Redis in one round trip: one schedule_many op per queue for rows
    without unique keys, one schedule op per row with one, all marked ``relay``, re-sent for
    ``budget`` seconds. Returns the results of the rows Redis took, by id, and the first
    error (those rows stay)."""
    ops = []
    owners: list[list[Row]] = []
    plain: dict[str, list[Row]] = {}
    for row in rows:
        if row.queue not in plain:
            plain[row.queue] = []
            ops.append(store.remember_queue_op(row.queue))
            owners.append([])
        if row.key is None:
            plain[row.queue].append(row)
        else:
            ops.append(
                store.schedule_op(
                    row.queue,
                    row.id,
                    row.record,
                    **_when(row),
                    key=row.key,
                    on_conflict=row.on_conflict,
                    relay=True,
                    adopt=True,  # the row's id is the job (outbox promise I1, I3)
                )
            )
            owners.append([row])
    for queue, group in plain.items():
        if group:
            jobs = [(r.id, r.record, _when(r)) for r in group]
            ops.append(store.schedule_many_op(queue, jobs, relay=True))
            owners.append(group)
    done: dict[str, Scheduled] = {}
    error: Exception | None = None
    for group, result in zip(owners, store.run(ops, budget=budget), strict=True):
        if isinstance(result, Exception):
            error = error or result
            continue
        if not group:
            continue  # the queue registry's SADD (a lost one heals with the next job)
        if isinstance(result, Scheduled):
            done[group[0].id] = result
        else:
            done.update(zip((r.id for r in group), result, strict=True))
    if error is not None:
        logger.warning(
            "outbox relay: %d of %d rows not relayed (%s)", len(rows) - len(done), len(rows), error
        )
    return done, error


def _when(row: Row) -> dict[str, float]:
    """How a relay tells Redis the due time: the remaining delay (Redis's clock counts it),
    or the absolute time of an ``at=`` job."""
    return {"at": row.due_at} if row.delay is None else {"delay": max(row.delay, 0.0)}


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


def _lock(alias: str) -> None:
    """SQLite: take the database's write lock now (it has no row locks), so two relays
    never read the same rows; a no-op DELETE does it."""
    conn = connections[alias]
    if conn.vendor == "sqlite":
        with conn.cursor() as cursor:
            table = conn.ops.quote_name(_model()._meta.db_table)
            cursor.execute(f"DELETE FROM {table} WHERE id = %s", [""])


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
    horizon = delayq_settings.HORIZON
    db_now = _now_sql(alias, now)  # the database's clock (``now``: a test's)
    with transaction.atomic(using=alias):
        _lock(alias)
        rows = _rows(alias)
        if ids is not None:
            rows = rows.filter(id__in=ids)
            if near and horizon is not None:
                rows = rows.filter(due_at__lte=_sql_time_from(db_now, horizon))
        elif horizon is not None:
            rows = rows.filter(relay_at__lte=db_now)
        else:
            rows = rows.filter(
                Q(relay_at__lte=db_now) | Q(relay_at__gt=_sql_time_from(db_now, GRACE + 1.0))
            )
        rows = rows.order_by("relay_at")
        if connections[alias].features.has_select_for_update_skip_locked:
            rows = rows.select_for_update(skip_locked=True)
        batch = [
            Row(
                i,
                q,
                _epoch(due),
                bytes(record),
                key,
                on_conflict,
                (due - read_at).total_seconds() if relative else None,
            )
            for i, q, due, record, key, on_conflict, relative, read_at in rows.values_list(
                *ROW_FIELDS, db_now
            )[:limit]
        ]
        if not batch:
            return 0
        done, error = relay(store, batch, budget)
        delete(alias, done)
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


def _sql_time_from(db_now: Any, seconds: float) -> Any:
    return ExpressionWrapper(
        db_now + Value(timedelta(seconds=seconds), output_field=DurationField()),
        output_field=DateTimeField(),
    )


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
            waiting.update(_rows(alias).filter(id__in=old).values_list("id", flat=True))
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
            at = _now_sql(alias, now)
            _rows(alias).filter(queue=queue, id__in=ids).update(
                due_at=at, relay_at=at, relative=True
            )
        found = list(_rows(alias).filter(queue=queue, id__in=ids).values_list("id", flat=True))
        if found:
            relay_pass(store, alias, limit=len(found), now=now, ids=found)
            moved += found
    return moved


class Relay:
    """A worker's relay: a bounded pass over every outbox alias each ``RELAY_EVERY``
    seconds, on a thread of its own (heartbeats have theirs)."""

    def __init__(self, store: Store, stopped: threading.Event) -> None:
        self.store = store
        self.stopped = stopped
        self.turns = 0
        self.relayed = 0
        self._failing = False
        self._no_table: dict[str, float] = {}  # alias -> when to look for the table again
        self._sweep_at = time.monotonic() + SWEEP_EVERY  # the relayed marks' next sweep

    def _has_table(self, alias: str) -> bool:
        """Whether ``alias`` has the outbox table (looked up again every TABLE_RECHECK
        seconds while it has not: a database without the migration is skipped, with one
        warning, rather than failing every second)."""
        again = self._no_table.get(alias)
        if again is not None and time.monotonic() < again:
            return False
        found = _model()._meta.db_table in connections[alias].introspection.table_names()
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

    def loop(self) -> None:
        pause = 0.0
        while not self.stopped.wait(pause):
            pause = RELAY_EVERY
            try:
                self.turn()
                if self._failing:
                    logger.warning("outbox relay: working again")
                self._failing = False
            except (DelayQError, DatabaseError) as exc:
                if not self._failing:
                    logger.warning(
                        "outbox relay failing (%s); retrying every %.0f s", exc, RELAY_EVERY
                    )
                self._failing = True
            except Exception:  # never let the thread die: the rows would wait for ever
                logger.exception("outbox relay: unexpected error")
