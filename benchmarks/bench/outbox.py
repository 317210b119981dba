"""The database outbox (issue 12), on a PostgreSQL database of its own (pg.py) and a
dedicated redis-server: Redis memory with far-future jobs and HORIZON, the relay rate from
rows into Redis, and what ``on_commit=True`` adds to a ``schedule()`` inside a transaction.

The database is added to Django's connections at run time as alias ``outbox`` (the
benchmark settings keep SQLite as ``default``), with a router that puts the outbox table
there only."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from . import pg
from .common import Timer, figure, store_on

ALIAS = "outbox"
DAY = 86_400.0


class OnlyOutbox:
    """The outbox table lives on ALIAS, nowhere else."""

    def _is_outbox(self, model: Any) -> bool:
        return model._meta.label_lower == "django_delayq.outboxjob"

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return ALIAS if self._is_outbox(model) else None

    db_for_read = db_for_write

    def allow_migrate(self, db: str, app_label: str, model_name: Any = None, **hints: Any) -> Any:
        if app_label == "django_delayq" and model_name == "outboxjob":
            return db == ALIAS
        return None


@contextlib.contextmanager
def outbox_database() -> Iterator[str]:
    """A fresh PostgreSQL database as alias ``outbox``, migrated; dropped afterwards."""
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings

    with pg.postgres_database() as name, override_settings(DATABASE_ROUTERS=[OnlyOutbox()]):
        connections.settings[ALIAS] = {
            **connections.settings["default"],
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "HOST": pg.HOST,
            "PORT": pg.PORT,
            "USER": pg.USER,
            "CONN_MAX_AGE": 600,
        }
        try:
            call_command("migrate", "django_delayq", database=ALIAS, verbosity=0)
            yield ALIAS
        finally:
            connections[ALIAS].close()
            del connections[ALIAS]
            del connections.settings[ALIAS]


def _truncate() -> None:
    from django_delayq.models import OutboxJob

    OutboxJob.objects.using(ALIAS).all()._raw_delete(ALIAS)


def bench_memory(client: Any, n: int, runs: int) -> dict[str, Any]:
    """Redis memory growth with ``n`` jobs due in 7 days: HORIZON = 1 day (rows) vs off."""
    from django.test import override_settings

    from benchmarks.tasks import noop
    from django_delayq import schedule_many

    payload = "x" * 16
    values, baselines = [], []
    for _ in range(runs):
        for horizon, out in ((DAY, values), (None, baselines)):
            client.flushdb()
            _truncate()
            with store_on(client, "delayq"):
                noop.schedule("warm", queue="warmup")  # scripts loaded, queue registry
                before = int(client.info("memory")["used_memory"])
                with override_settings(DELAYQ={**_delayq(client), "HORIZON": horizon}):
                    schedule_many(noop, [(payload,)] * n, delay=7 * DAY)
                out.append(int(client.info("memory")["used_memory"]) - before)
    client.flushdb()
    _truncate()
    return figure(
        "outbox_memory",
        f"Redis memory growth, {n:,} jobs due in 7 days, HORIZON = 1 day",
        values,
        baselines,
        "bytes",
        "constant (<= 64 KB)",
        lambda v, r: v <= 64 * 1024,
        note="INFO used_memory delta on a dedicated redis-server; baseline: HORIZON off "
        "(every job in Redis); the rows are on PostgreSQL",
    )


def _delayq(client: Any) -> dict[str, Any]:
    from .common import url_of

    return {"REDIS_URL": url_of(client), "PREFIX": "delayq"}


def bench_relay(client: Any, n: int, runs: int) -> dict[str, Any]:
    """Rows due now -> Redis by relay passes (one transaction and one round trip per 1,000
    rows), vs ``schedule_many()`` of the same jobs straight to Redis."""
    from benchmarks.tasks import noop
    from django_delayq import schedule_many
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.record import encode_record
    from django_delayq.outbox import relay as relaying
    from django_delayq.outbox import rows as outbox

    values, baselines = [], []
    for _ in range(runs):
        client.flushdb()
        _truncate()
        now = time.time()
        rows = [
            (
                outbox.Row(
                    new_job_id(), "default", now, encode_record(noop.name, [i], {}, None, 5, "i")
                ),
                now,
            )
            for i in range(n)
        ]
        outbox.save_many(ALIAS, rows, now)
        with store_on(client, "delayq") as store, Timer() as timer:
            moved = 0
            while moved < n:
                step = relaying.relay_pass(store, ALIAS)
                if not step:
                    raise RuntimeError(f"relay stopped at {moved} of {n} rows")
                moved += step
        assert client.zcard(store.key("default", "pending")) == n
        values.append(n / timer.seconds)
        client.flushdb()
        with store_on(client, "delayq"), Timer() as timer:
            schedule_many(noop, [(i,) for i in range(n)])
        baselines.append(n / timer.seconds)
    client.flushdb()
    return figure(
        "outbox_relay",
        f"relay of {n:,} outbox rows into Redis (PostgreSQL)",
        values,
        baselines,
        "jobs/s",
        ">= 10,000 jobs/s",
        lambda v, r: v >= 10_000,
        note="relay passes of 1,000 rows: SELECT ... FOR UPDATE SKIP LOCKED, one pipelined "
        "schedule_many.lua per batch, DELETE, COMMIT; baseline: schedule_many() to Redis",
    )


def bench_schedule_in_transaction(client: Any, n: int, runs: int) -> list[dict[str, Any]]:
    """Per job: ``with atomic(): schedule(on_commit=...)`` (INSERT in the transaction, then
    the fast path: Redis write + DELETE) vs ``with atomic(): schedule()`` (Redis at once)."""
    from django.db import connections, transaction

    from benchmarks.tasks import noop

    totals, plain, inside = [], [], []
    with connections[ALIAS].cursor() as cursor:  # the caller's own write ("the order")
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_order (id serial PRIMARY KEY, n int)")

    def order(i: int) -> None:
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("INSERT INTO bench_order (n) VALUES (%s)", [i])

    for _ in range(runs):
        client.flushdb()
        _truncate()
        with store_on(client, "delayq"):
            noop.schedule("warm")
            spent_inside = 0.0
            with Timer() as timer:
                for i in range(n):
                    with transaction.atomic(using=ALIAS):
                        order(i)
                        began = time.perf_counter()
                        noop.schedule(i, delay=60, on_commit=ALIAS)
                        spent_inside += time.perf_counter() - began
            totals.append(timer.seconds / n * 1e6)
            inside.append(spent_inside / n * 1e6)
            with Timer() as timer:
                for i in range(n):
                    with transaction.atomic(using=ALIAS):
                        order(i)
                        noop.schedule(i, delay=60)
            plain.append(timer.seconds / n * 1e6)
        from django_delayq.models import OutboxJob

        assert OutboxJob.objects.using(ALIAS).count() == 0  # every fast path relayed
    client.flushdb()
    return [
        figure(
            "outbox_schedule_us",
            f"schedule(on_commit=...) in a transaction, {n:,} jobs, one transaction each",
            totals,
            plain,
            "us",
            "",
            None,
            note="each transaction also INSERTs the caller's own row and COMMITs; on_commit "
            "adds the job's INSERT, the fast path (Redis write) and the row's DELETE; "
            "baseline: the same transaction with a plain schedule() to Redis",
        ),
        figure(
            "outbox_insert_us",
            "of which inside the transaction (the INSERT)",
            inside,
            [],
            "us",
            "",
            None,
            note="time of the schedule() call itself, before the commit",
        ),
    ]
