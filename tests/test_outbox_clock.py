"""Never early, whatever the producer's clock (outbox promise I7), and USE_TZ=False (I9): outbox
rows take their due times from the database's clock, relays send Redis the remaining delay.
On SQLite and PostgreSQL, over fakeredis and the real Redis."""

from __future__ import annotations

import time
import types
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings

from django_delayq import (
    cancel,
    get_job,
    schedule_many,
)
from django_delayq.models import OutboxJob
from django_delayq.outbox import database_time, placement
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.scheduling import api, plan
from django_delayq.storage import connection
from django_delayq.storage.store import Store
from tests.conftest import between
from tests.routers import OutboxOnly
from tests.test_outbox import (  # noqa: F401
    alias,
    pending_ids,
    redis_now,
    rows,
    run_burst,
)
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])

BEHIND = 30.0


@pytest.fixture
def slow_producer(monkeypatch):
    """This process's time.time() 30 s behind, for the producer's modules only (the
    worker's and fakeredis's clocks stay right)."""
    slow = types.SimpleNamespace(time=lambda: time.time() - BEHIND, monotonic=time.monotonic)
    for module in (api, plan, placement, outbox, database_time):
        monkeypatch.setattr(module, "time", slow)
    return monkeypatch


def due_in_redis(store: Store, job_id: str) -> float:
    return store.client.zscore(store.key("default", "pending"), job_id) / 1000


def test_an_on_commit_job_of_a_slow_producer_is_not_early(store, alias, slow_producer):  # noqa: F811
    before = redis_now(store)
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, delay=60, on_commit=alias)
    after = redis_now(store)
    slow_producer.undo()
    assert pending_ids(store) == [job.id]
    # Due 60 s after Redis's now when it was scheduled, not after the producer's.
    assert between(due_in_redis(store, job.id) - 60, before, after)


def test_a_horizon_job_of_a_slow_producer_is_not_early(store, slow_producer):
    """PostgreSQL: the row's due time is the database's now() + delay, not the producer's.
    (SQLite runs inside the producer's process: its clock is the producer's.)"""
    routed = [OutboxOnly("pg")]
    with override_settings(DATABASE_ROUTERS=routed, DELAYQ={**settings.DELAYQ, "HORIZON": 3590}):
        connection._stores[(None, False, "default", store.prefix)] = store
        try:
            before = redis_now(store)
            job = t.remember.schedule(1, delay=3600)
            (bulk,) = schedule_many(t.remember, [{"args": [2], "delay": 3600}])  # save_many
            slow_producer.undo()
            assert job.waits_in == "database" and bulk.waits_in == "database"
            found = OutboxJob.objects.using("pg").all()
            assert [r.relative for r in found] == [True, True]
            # Their relay time comes (without waiting 10 s): a worker's relay moves them.
            OutboxJob.objects.using("pg").update(relay_at=found[0].created_at)
            assert relaying.relay_pass(store, "pg") == 2
            after = redis_now(store)
            assert between(due_in_redis(store, job.id) - 3600, before, after)
            assert between(due_in_redis(store, bulk.id) - 3600, before, after)
        finally:
            OutboxJob.objects.using("pg").all().delete()


def test_postgresql_due_counts_from_the_call_not_the_transaction_start(store):
    """PostgreSQL's now() is the transaction's start: a delay counts from the statement."""
    with override_settings(DATABASE_ROUTERS=[OutboxOnly("pg")]):
        try:
            with transaction.atomic(using="pg"):
                with connections["pg"].cursor() as cursor:
                    cursor.execute("SELECT pg_sleep(3)")
                before = redis_now(store)  # 3 s after the transaction's start
                job = t.remember.schedule(1, delay=60, on_commit="pg")
            assert between(due_in_redis(store, job.id) - 60, before, redis_now(store))
        finally:
            OutboxJob.objects.using("pg").all().delete()


def test_an_at_job_keeps_its_absolute_time(store, alias):  # noqa: F811
    from django.utils import timezone

    at = timezone.now() + timedelta(seconds=90)
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, at=at, on_commit=alias)
    assert abs(due_in_redis(store, job.id) - at.timestamp()) < 0.002


# -- USE_TZ = False (item 7) -----------------------------------------------------------


@pytest.fixture
def naive(store):
    with override_settings(USE_TZ=False, DELAYQ={**settings.DELAYQ, "HORIZON": 60}):
        connection._stores[(None, False, "default", store.prefix)] = store
        yield
    connection._stores[(None, False, "default", store.prefix)] = store


def test_use_tz_off_rows_are_written_read_and_relayed(store, alias, naive):  # noqa: F811
    before = redis_now(store)
    with transaction.atomic(using=alias):
        near = t.remember.schedule(1, delay=5, on_commit=alias)
        assert get_job(near.id).waits_in == "database"
    assert pending_ids(store) == [near.id]
    assert between(due_in_redis(store, near.id) - 5, before, redis_now(store))
    before = redis_now(store)
    far = t.remember.schedule(2, delay=3600, key="k")
    scheduled = redis_now(store)
    (row,) = rows(alias)
    assert row.id == far.id and abs((row.due_at - row.relay_at).total_seconds() - 60) < 0.01
    found = get_job(far.id)
    assert found.waits_in == "database"
    assert between(found.due_at.timestamp() - 3600, before, scheduled)
    assert between(far.due_at.timestamp() - 3600, before, scheduled)
    assert relaying.relay_pass(store, alias) == 0  # not within the horizon yet
    OutboxJob.objects.using(alias).update(relay_at=row.created_at)
    assert relaying.relay_pass(store, alias) == 1
    assert between(due_in_redis(store, far.id) - 3600, before, redis_now(store))
    assert cancel(key="k") is True and cancel(near.id) is True
    run_burst(store)
    assert t.CALLS == []


def test_a_row_takes_its_due_and_relay_times_from_one_reading_of_sqlites_clock(store, monkeypatch):
    """SQLite's clock is this process's, read as each SQL time is made: a row's due and relay
    times come from one reading, so the gap between them is the one asked for whatever the
    clock does between the two (read twice, they drifted apart under load: a test of the
    same gap in a move failed by 0.5 ms). A clock that moves 1 s at each reading shows it."""
    ticks = iter(range(10_000))
    start = time.time()
    jumpy = types.SimpleNamespace(time=lambda: start + next(ticks), monotonic=time.monotonic)
    with override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 600}):
        connection._stores[(None, False, "default", store.prefix)] = store
        try:
            steady = t.remember.schedule(1, delay=3600)
            monkeypatch.setattr(database_time, "time", jumpy)
            created = t.remember.schedule(2, delay=3600)
            replaced = t.remember.schedule(3, delay=3600, key="gap")
            replaced = t.remember.schedule(4, delay=3600, key="gap")
            monkeypatch.undo()
            assert {steady.waits_in, created.waits_in, replaced.waits_in} == {"database"}
            found = {r.id: r for r in OutboxJob.objects.using("default").all()}
            gaps = {i: found[i].due_at - found[i].relay_at for i in (steady.id, created.id)}
            gaps[replaced.id] = found[replaced.id].due_at - found[replaced.id].relay_at
            assert len(set(gaps.values())) == 1, gaps
        finally:
            OutboxJob.objects.using("default").all().delete()
