"""Times on a database's clock, for the outbox's rows (outbox/rows.py, outbox/relay.py).

A row's due and relay times are computed in SQL from the database's now, never from this
process's clock, so a producer whose clock is off never makes a job early (outbox promise
I7, docs/internals.rst). On SQLite, which runs in this process, the database's clock is
this process's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, Value
from django.db.models.functions import Now
from django.utils import timezone

from django_delayq.outbox.databases import _model


@dataclass(frozen=True)
class When:
    """A time the database's clock makes: ``seconds`` after its now (``relative``), else
    the epoch ``seconds``."""

    seconds: float
    relative: bool = True


def column_time(epoch: float) -> datetime:
    """An epoch as the DateTimeFields take it: aware (UTC), naive in the default time zone
    when USE_TZ is off (outbox promise I9)."""
    moment = datetime.fromtimestamp(epoch, UTC)
    if not settings.USE_TZ:
        return timezone.make_naive(moment, timezone.get_default_timezone())
    return moment


def epoch(moment: datetime) -> float:
    """A DateTimeField's value as epoch seconds (naive: in the default time zone)."""
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
    return moment.timestamp()


def now_sql(alias: str, now: float | None = None) -> Any:
    """The database's now as an SQL expression (SQLite runs in this process: its clock is
    this process's, passed as a value, in the form the column holds). ``now``: a test's."""
    vendor = connections[alias].vendor
    if now is not None or vendor == "sqlite":
        return Value(column_time(time.time() if now is None else now), output_field=DateTimeField())
    return Now()  # STATEMENT_TIMESTAMP() on PostgreSQL: not the transaction's start


def after(moment: Any, seconds: float) -> Any:
    """The SQL expression ``moment`` + ``seconds``."""
    return ExpressionWrapper(
        moment + Value(timedelta(seconds=seconds), output_field=DurationField()),
        output_field=DateTimeField(),
    )


def sql_time(alias: str, when: When | float, moment: Any = None) -> Any:
    """``when`` (an epoch or a :class:`When`) as a value or an SQL expression on the
    database's clock (``moment``: its now, :func:`now_sql`'s, read once for several)."""
    if not isinstance(when, When):
        return column_time(when)
    if not when.relative:
        return column_time(when.seconds)
    return after(now_sql(alias) if moment is None else moment, when.seconds)


def db_now(alias: str) -> float:
    """The database's clock now (epoch seconds): one query, except on SQLite."""
    if connections[alias].vendor == "sqlite":
        return time.time()
    with connections[alias].cursor() as cursor:
        sql, params = (
            _model().objects.using(alias).query.get_compiler(alias).compile(now_sql(alias))
        )
        cursor.execute(f"SELECT {sql}", params)
        (moment,) = cursor.fetchone()
    if isinstance(moment, str):  # pragma: no cover - a backend without a converter
        moment = datetime.fromisoformat(moment)
    if timezone.is_naive(moment) and settings.USE_TZ:
        moment = moment.replace(tzinfo=UTC)
    return epoch(moment)
