"""A debounce in the outbox (``schedule(..., key=k, on_conflict="replace", max_wait=...)``):
a row that replaces the row holding its key is due no later than the key's first due time
plus the replacing call's ``max_wait``, as schedule.lua caps a job in Redis (its ARGV[14]).

A row keeps the cap of the call that wrote it (``max_wait``) and the first due time of its
key's job (``first_due_at``, migration 0007): its own due time when it took the key, the
held row's when it replaced one (the held row's due time for a row written without
max_wait, by 0.7.0 say, as schedule.lua counts from a job created without it). A relay
sends both to schedule.lua (ARGV[14], ARGV[15]): over a Redis job holding the key, the
adopted job is capped by that job's first due time too, and Redis keeps the earlier of the
two as the key's first due time (so a replace once the job is in Redis is capped the same).
Times are epochs on the database's clock (outbox promise I7), as the rows' due times are.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django_delayq.conf import delayq_settings
from django_delayq.outbox.database_time import When, column_time, db_now

Row = Any  # outbox/rows.py's Row (which imports this module)


def first_due(alias: str, row: Row, due_sql: Any) -> Any:
    """The ``first_due_at`` of a new row: the first due time it was given (a far replace of
    a Redis holder: that job's), else its own due time (``due_sql``); None without max_wait."""
    if row.max_wait is None:
        return None
    return due_sql if row.first_due is None else column_time(row.first_due)


def replacing(
    alias: str, row: Row, held: Row, relay_at: When | float
) -> tuple[Row, float | None, When | float, dict[str, Any]]:
    """``row`` replacing ``held`` (the row holding its key): (the row with its due time as
    stored, that due time when the cap moved it earlier else None, its relay time, the
    ``first_due_at`` to write). Without max_wait nothing changes, and the held row's first
    due time stays (a later debounced replace still counts from it)."""
    if row.max_wait is None:
        return row, None, relay_at, {}
    first = held.due_at if held.first_due is None else held.first_due
    cap = first + row.max_wait
    kept = {"first_due_at": column_time(first)}
    if row.delay is None:
        due = row.due_at
    else:
        now = db_now(alias)
        due = now + row.delay
    if due <= cap:
        return row, None, relay_at, kept
    horizon = delayq_settings.HORIZON
    if horizon is not None:  # relayed as the capped time comes within the horizon
        relay_at = min(_epoch(alias, relay_at), cap - horizon)
    return replace(row, due_at=cap), cap, relay_at, kept


def _epoch(alias: str, when: When | float) -> float:
    """A relay time as an epoch on the database's clock."""
    if not isinstance(when, When):
        return when
    if not when.relative:
        return when.seconds
    return db_now(alias) + when.seconds
