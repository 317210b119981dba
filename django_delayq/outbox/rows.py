"""The outbox: jobs that wait in the project's database (``models.OutboxJob``). The only
module that reads or writes that table, the way store.py is the only one that talks to
Redis; it deals in :class:`Row`. Moving rows into Redis is outbox/relay.py's.

Two kinds of rows:

- ``schedule(..., on_commit=True)`` inside a transaction inserts the job's row in that
  transaction. After the commit the committing process relays the row at once (relay_now,
  the fast path) and deletes it; if that fails (Redis down, process killed) the row's
  ``relay_at`` (``GRACE`` seconds after it was written) passes and any worker relays it.
- With ``DELAYQ["HORIZON"]``, a job due later than now + HORIZON is a row whose
  ``relay_at`` is ``due_at - HORIZON``: workers move it into Redis as it comes within the
  horizon, long before it is due, so it runs as on time as a job held in Redis.

How a relay moves rows into Redis, exactly once, several at once: outbox/relay.py.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, transaction

from django_delayq.exceptions import DelayQError, migrated
from django_delayq.outbox import debounce
from django_delayq.outbox.database_time import When, column_time, epoch, now_sql, sql_time
from django_delayq.outbox.database_time import db_now as db_now
from django_delayq.outbox.databases import _model as _model
from django_delayq.outbox.databases import aliases as aliases
from django_delayq.outbox.databases import check_on_commit as check_on_commit
from django_delayq.outbox.databases import routed_alias as routed_alias
from django_delayq.outbox.databases import write_alias as write_alias

if TYPE_CHECKING:
    from django_delayq.models import OutboxJob

logger = logging.getLogger("django_delayq.outbox")

GRACE = 2.0  # seconds an on_commit row leaves its fast path before workers relay it
DELETE_CHUNK = 500  # ids per DELETE (SQLite allows 999 parameters)
# Each function that reads or writes the table: NotMigrated when the table (or a column) is
# not there, naming the command to run.
OUTBOX = "the outbox (jobs scheduled with on_commit=True, or due beyond DELAYQ['HORIZON'])"
migrated_table = migrated(OUTBOX, lambda: aliases())


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
    link: str = ""  # its batch, its place in a chain (batches/links.py): record flag 'l'
    max_wait: float | None = None  # a debounce's cap, seconds (outbox/debounce.py)
    first_due: float | None = None  # epoch seconds: its key's job's first due time (the same)
    group: str | None = None  # schedule(group=...): relayed beside the record (flag 'g')


ROW_FIELDS = ("id", "queue", "due_at", "record", "key", "on_conflict", "relative", "link")
ROW_FIELDS += ("max_wait", "first_due_at", "group")


def key_hash(key: str | None) -> str | None:
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()


def _row(obj: OutboxJob) -> Row:
    first = None if obj.first_due_at is None else epoch(obj.first_due_at)
    fields = (obj.key, obj.on_conflict, None, obj.link, obj.max_wait, first, obj.group)
    return Row(obj.id, obj.queue, epoch(obj.due_at), bytes(obj.record), *fields)


def _rows(alias: str) -> Any:
    return _model().objects.using(alias)


# -- writing ---------------------------------------------------------------------------


# Told, inside the transaction that deletes or rewrites it, of a linked row whose link ends
# there (cancelled, or replaced under another link): (alias, the row as it was).
Ended = Callable[[str, Row], None]


@migrated_table
def save(
    alias: str,
    row: Row,
    relay_at: When | float,
    now: float | None = None,
    ended: Ended | None = None,
) -> tuple[str, Row]:
    """Insert ``row`` (in the current transaction of ``alias``, if any, inside a savepoint).
    A row with a ``delay`` is due that long after the database's now, computed in SQL;
    ``relay_at`` is an epoch or a :class:`When` on the database's clock (outbox promise I7).
    With a unique key held by another row of its queue: ``replace`` gives that row this
    record, due time and relay time (it keeps its id), ``keep`` leaves it; ``ended`` is told
    of the held row, in the savepoint, when the replace takes a link away from it (another
    link, or none). Returns (outcome, the row as stored): 'created', 'replaced' or 'kept'."""
    now = time.time() if now is None else now
    if row.key is None:  # one INSERT, no savepoint: nothing can conflict (a new ULID)
        return _save(alias, row, relay_at, now)
    for attempt in range(3):
        try:
            with transaction.atomic(using=alias):
                write_lock(alias)
                return _save(alias, row, relay_at, now, ended)
        except IntegrityError:
            # Another transaction inserted the key first (it committed meanwhile): read it.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def write_lock(alias: str) -> None:
    """SQLite: take the database's write lock now, before the first read. SQLite has no
    row locks: relays take it so two never read the same rows, and a keyed save so its
    read-then-write waits for a relay's pass (busy timeout) instead of failing at once with
    "database is locked" (a deferred transaction that read cannot wait for the lock). A
    no-op DELETE does it; elsewhere nothing."""
    conn = connections[alias]
    if conn.vendor == "sqlite":
        with conn.cursor() as cursor:
            table = conn.ops.quote_name(_model()._meta.db_table)
            cursor.execute(f"DELETE FROM {table} WHERE id = %s", [""])


def _due_sql(alias: str, row: Row, moment: Any) -> Any:
    when = When(row.due_at, False) if row.delay is None else When(row.delay)
    return sql_time(alias, when, moment)


def _save(
    alias: str, row: Row, relay_at: When | float, now: float, ended: Ended | None = None
) -> tuple[str, Row]:
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
            if ended is not None and held.link and held.link != row.link:
                ended(alias, _row(held))  # as schedule.lua forwards a replaced holder's link
            row, due, relay_at, first = debounce.replacing(alias, row, _row(held), relay_at)
            moment = now_sql(alias)  # once: on SQLite, the process's clock read as made
            _rows(alias).filter(id=held.id).update(
                record=row.record,
                due_at=_due_sql(alias, row, moment) if due is None else column_time(due),
                relay_at=sql_time(alias, relay_at, moment),
                relative=row.delay is not None,
                on_conflict=row.on_conflict,
                link=row.link,
                max_wait=row.max_wait,
                group=row.group,
                **first,
            )
            return "replaced", replace(row, id=held.id)
    moment = now_sql(alias)  # once: on SQLite, the process's clock read as made
    due = _due_sql(alias, row, moment)
    _rows(alias).create(
        id=row.id,
        queue=row.queue,
        due_at=due,
        relay_at=sql_time(alias, relay_at, moment),
        relative=row.delay is not None,
        key=row.key,
        key_hash=hashed,
        on_conflict=row.on_conflict,
        record=row.record,
        created_at=column_time(now),
        link=row.link,
        max_wait=row.max_wait,
        first_due_at=debounce.first_due(alias, row, due),
        group=row.group,
    )
    return "created", row


@migrated_table
def save_many(
    alias: str, rows: Sequence[tuple[Row, When | float]], now: float | None = None
) -> None:
    """Insert rows without unique keys ((row, relay_at) pairs, relay_at an epoch or a
    :class:`When`), in batches: times on the database's clock, read once (:func:`db_now`)."""
    created = column_time(time.time() if now is None else now)
    base = db_now(alias)

    def on_db_clock(when: When | float) -> float:
        if not isinstance(when, When):
            return when
        return base + when.seconds if when.relative else when.seconds

    objs = [
        _model()(
            id=row.id,
            queue=row.queue,
            due_at=column_time(row.due_at if row.delay is None else base + row.delay),
            relay_at=column_time(on_db_clock(relay_at)),
            relative=row.delay is not None,
            record=row.record,
            on_conflict=row.on_conflict,
            created_at=created,
            link=row.link,
            group=row.group,
        )
        for row, relay_at in rows
    ]
    with transaction.atomic(using=alias):
        _rows(alias).bulk_create(objs, batch_size=DELETE_CHUNK)


@migrated_table
def delete(alias: str, ids: Iterable[str]) -> int:
    ids = list(ids)
    deleted = 0
    for start in range(0, len(ids), DELETE_CHUNK):
        deleted += _rows(alias).filter(id__in=ids[start : start + DELETE_CHUNK])._raw_delete(alias)
    return deleted


# -- reading -----------------------------------------------------------------------------


@migrated_table
def find(job_id: str, queue: str | None = None) -> Row | None:
    """The row of a job id, in whichever alias holds it (get_job() asks on every miss in
    Redis: a miss is one plain SELECT by primary key per alias)."""
    for alias in aliases():
        if not _holds(alias, "id", [job_id]):
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
    from django_delayq.storage.connection import get_store

    try:
        return bool(get_store().relayed(queue, [job_id]))
    except DelayQError:
        return False


@migrated_table
def find_key(queue: str, key: str) -> tuple[str, Row] | None:
    """(alias, row) of the row holding a unique key in a queue. The plain keyed schedule()
    asks this every time: a miss is one plain indexed SELECT per alias (no ORM compile)."""
    hashed = key_hash(key)
    for alias in aliases():
        if not _holds(alias, "key_hash", [hashed], queue):
            continue
        obj = _rows(alias).filter(queue=queue, key_hash=hashed).first()
        if obj is not None:
            return alias, _row(obj)
    return None


@migrated_table
def holds_any_key(keys: Iterable[str]) -> bool:
    """Whether a row holds one of these unique keys, in any queue (schedule_many() asks this
    once for its keyed calls: rows left by an earlier HORIZON, or on_commit rows not yet
    relayed, may hold one). A plain indexed SELECT per alias and DELETE_CHUNK keys."""
    hashes = sorted({key_hash(key) for key in keys})
    chunks = [hashes[i : i + DELETE_CHUNK] for i in range(0, len(hashes), DELETE_CHUNK)]
    return any(_holds(alias, "key_hash", chunk) for alias in aliases() for chunk in chunks)


def _holds(alias: str, column: str, values: Sequence[Any], queue: str | None = None) -> bool:
    """Whether a row has ``column`` in ``values`` (in ``queue`` if given)."""
    conn = connections[alias]
    table = conn.ops.quote_name(_model()._meta.db_table)
    marks = ", ".join(["%s"] * len(values))
    sql = f"SELECT 1 FROM {table} WHERE {conn.ops.quote_name(column)} IN ({marks})"
    params = list(values)
    if queue is not None:
        sql += " AND queue = %s"
        params.append(queue)
    with conn.cursor() as cursor:
        cursor.execute(sql + " LIMIT 1", params)
        return cursor.fetchone() is not None


@migrated_table
def count(queue: str) -> int:
    return sum(_rows(alias).filter(queue=queue).count() for alias in aliases())


@migrated_table
def page(queue: str, offset: int, limit: int) -> list[Row]:
    """Rows of a queue by due time (the admin's pending list shows them after Redis's)."""
    found: list[Row] = []
    for alias in aliases():
        rows = _rows(alias).filter(queue=queue).order_by("due_at", "id")
        found += [_row(obj) for obj in rows[: offset + limit]]
    found.sort(key=lambda r: (r.due_at, r.id))
    return found[offset : offset + limit]


@migrated_table
def queues() -> list[str]:
    found = (_rows(a).values_list("queue", flat=True).distinct() for a in aliases())
    return sorted({name for names in found for name in names})


@migrated_table
def cancel(
    job_id: str | None = None,
    key: str | None = None,
    queue: str | None = None,
    committed: Callable[[Row], None] | None = None,
    stale: Callable[[list[Row]], set[str]] | None = None,
    ended: Ended | None = None,
) -> list[Row]:
    """Delete the rows of a job id or unique key (in ``queue`` if given); the rows deleted.
    The deletion joins the caller's transaction on an alias where one is open (a rollback
    restores the row); ``committed(row)`` runs once the deletion of ``row`` commits (at
    once without a transaction). A row a relay holds is waited for (its lock): once
    relayed, it is not found here and the caller cancels it in Redis. ``stale(rows)`` names
    the rows a relay already stored in Redis (their DELETE was refused): those are left to
    the relay's clean-up, not cancelled (their job is in Redis, or ran). ``ended(alias,
    row)`` is told of each linked row deleted, in the deleting transaction."""
    gone: list[Row] = []
    for alias in aliases():
        rows = _rows(alias)
        rows = rows.filter(id=job_id) if job_id is not None else rows.filter(key_hash=key_hash(key))
        if queue is not None:
            rows = rows.filter(queue=queue)
        # SQLite: a read, then a DELETE: lock first in a transaction of our own; in the
        # caller's, a no-op lock could fail a read-only transaction that finds no row.
        own = not connections[alias].in_atomic_block
        with transaction.atomic(using=alias):
            write_lock(alias) if own else None
            found = [_row(obj) for obj in rows.select_for_update()]
            left = stale(found) if stale is not None and found else set()
            for row in found:
                if row.id not in left and _rows(alias).filter(id=row.id)._raw_delete(alias):
                    gone.append(row)
                    if ended is not None and row.link:
                        ended(alias, row)
                    if committed is not None:
                        transaction.on_commit(lambda row=row: committed(row), using=alias)
    return gone


@migrated_table
def move(
    job_id: str | None,
    key: str | None,
    queue: str | None,
    when: tuple[When, When],
    stale: Callable[[list[Row]], set[str]],
    committed: Callable[[str, Row], None],
) -> list[Row]:
    """:func:`cancel`, but the rows get ``when``'s due and relay times (database clock);
    the rows as they were. ``committed(alias, row)`` once the move of ``row`` commits."""
    column, value = ("id", job_id) if job_id is not None else ("key_hash", key_hash(key))
    moved: list[Row] = []
    for alias in (a for a in aliases() if _holds(a, column, [value], queue)):
        rows = _rows(alias).filter(**{column: value}, **({} if queue is None else {"queue": queue}))
        own = not connections[alias].in_atomic_block
        with transaction.atomic(using=alias):
            write_lock(alias) if own else None
            found = [_row(obj) for obj in rows.select_for_update()]
            left = stale(found) if found else set()
            for row in (r for r in found if r.id not in left):
                moment = now_sql(alias)  # once: on SQLite, the process's clock read as made
                due, relay = (sql_time(alias, w, moment) for w in when)
                rows.filter(id=row.id).update(due_at=due, relay_at=relay, relative=when[0].relative)
                moved.append(row)
                transaction.on_commit(lambda a=alias, r=row: committed(a, r), using=alias)
    return moved
