"""The outbox (outbox.py): on_commit rows relayed after the commit, DELAYQ["HORIZON"] rows
relayed as they come within the horizon, one job wherever it waits (get_job, cancel, unique
keys, schedule_many, run-now), on SQLite and the real PostgreSQL, over fakeredis and the real
Redis. The crash and race scenarios are in tests/reliability/test_outbox.py."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings

from django_delayq import (
    cancel,
    get_job,
    schedule_many,
    signals,
)
from django_delayq.exceptions import DelayQError
from django_delayq.models import OutboxJob
from django_delayq.outbox import placement
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.storage import connection
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.conftest import between, more_settings
from tests.reliability.harness import free_port
from tests.routers import OutboxDatabases, OutboxTo
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


@pytest.fixture(params=["default", "pg"])
def alias(request):
    """The database that holds the rows: SQLite, then PostgreSQL."""
    assert (
        connections[request.param].vendor
        == {"default": "sqlite", "pg": "postgresql"}[request.param]
    )
    with override_settings(DATABASE_ROUTERS=[OutboxTo(request.param), OutboxDatabases()]):
        OutboxDatabases.extra = {"pg"}
        try:
            yield request.param
        finally:
            # The flush after the test skips tables the routers keep off an alias: empty it.
            OutboxJob.objects.using("pg").all().delete()
            OutboxDatabases.extra = set()


@pytest.fixture
def horizon(store):
    """HORIZON = 60 s on top of the store fixture's settings."""
    with override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 60}):
        # The settings change dropped the cached stores: install the test's again.
        connection._stores[(None, False, "default", store.prefix)] = store
        yield 60


def rows(alias: str) -> list[OutboxJob]:
    return list(OutboxJob.objects.using(alias).order_by("due_at"))


def pending_ids(store: Store, queue: str = "default") -> list[str]:
    return [i.decode() for i in store.client.zrange(store.key(queue, "pending"), 0, -1)]


def redis_now(store: Store) -> float:
    seconds, micros = store.client.time()
    return seconds + micros / 1e6


def run_burst(store: Store, queues=("default",)) -> Worker:
    worker = Worker(list(queues), burst=True, store=store, relay=True)
    assert worker.run() == 0
    return worker


# -- on_commit -------------------------------------------------------------------------------


def test_on_commit_row_is_in_the_transaction_then_relayed(store, alias):
    before = redis_now(store)
    with transaction.atomic(using=alias):
        job = t.add.schedule(1, 2, on_commit=alias, delay=30)
        assert job.outcome == "deferred" and job.waits_in == "database"
        (row,) = rows(alias)
        assert row.id == job.id and bytes(row.record).startswith(b"5i\n")  # flag 'i'
        assert pending_ids(store) == []
    # The commit hook relayed the row under the same id and deleted it.
    assert rows(alias) == []
    assert pending_ids(store) == [job.id]
    stored = get_job(job.id)
    assert stored.waits_in == "redis" and stored.args == [1, 2]
    # The row kept its 30 s delay and the commit applied it on Redis's clock: due 30 s after
    # the call (up to the commit), not at once and not twice as late.
    assert between(stored.due_at.timestamp() - 30, before, redis_now(store))


def test_rollback_leaves_nothing_anywhere(store, alias):
    seen = []
    signals.job_scheduled.connect(receiver := lambda sender, job, **kw: seen.append(job.id))
    try:
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            job = t.add.schedule(1, 2, on_commit=alias)
            raise RuntimeError("roll back")
    finally:
        signals.job_scheduled.disconnect(receiver)
    assert rows(alias) == [] and pending_ids(store) == [] and seen == []
    assert get_job(job.id) is None


def test_on_commit_sends_job_scheduled_after_the_commit(store, alias):
    seen = []
    signals.job_scheduled.connect(receiver := lambda sender, job, **kw: seen.append(job.outcome))
    try:
        with transaction.atomic(using=alias):
            t.add.schedule(1, 2, on_commit=alias)
            assert seen == []
    finally:
        signals.job_scheduled.disconnect(receiver)
    assert seen == ["deferred"]


def test_redis_down_at_commit_the_commit_succeeds_and_a_worker_relays(
    store, alias, monkeypatch, caplog
):
    down = Store(redis.Redis(port=free_port(), socket_connect_timeout=0.2), prefix=store.prefix)
    monkeypatch.setattr(placement, "get_store", lambda: down)
    with caplog.at_level(logging.WARNING, "django_delayq.outbox"), transaction.atomic(alias):
        job = t.remember.schedule(20, 22, on_commit=alias)
    # The commit went through and nothing raised; the row waits.
    assert [r.id for r in rows(alias)] == [job.id]
    assert "stays in the database outbox" in caplog.text
    monkeypatch.undo()
    # Redis is back; a worker relays the row once its relay time (GRACE after it was
    # written) has passed: let that time pass without sleeping.
    OutboxJob.objects.using(alias).update(relay_at=rows(alias)[0].created_at)
    run_burst(store)
    assert t.CALLS == [((20, 22), {})]
    assert rows(alias) == [] and get_job(job.id) is None


def test_a_row_relayed_twice_is_one_job_even_after_it_ran(store, alias):
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, 1, on_commit=alias)
    row = outbox.Row(job.id, "default", time.time(), get_job(job.id) and _record(store, job.id))
    # A crash between the Redis write and the row's delete: the row is relayed again.
    done, error = relaying.relay(store, [row])
    assert error is None and done[job.id].outcome == "created" and pending_ids(store) == [job.id]
    run_burst(store)
    assert t.CALLS == [((1, 1), {})]
    # ... and again after the job ran: its tombstone answers, no second job.
    done, error = relaying.relay(store, [row])
    assert error is None and done[job.id].outcome == "done"
    assert pending_ids(store) == []
    run_burst(store)
    assert t.CALLS == [((1, 1), {})]


def _record(store: Store, job_id: str) -> bytes:
    return store.client.hget(store.key("default", "jobs"), job_id)


def test_on_commit_outside_a_transaction_keeps_storing_at_once(store, alias):
    job = t.add.schedule(1, 2, on_commit=alias)
    assert job.outcome == "created" and job.waits_in == "redis"
    assert rows(alias) == [] and pending_ids(store) == [job.id]


# -- HORIZON -----------------------------------------------------------------------------


def test_horizon_keeps_far_jobs_in_the_database(store, alias, horizon):
    near = t.add.schedule(1, 2, delay=30)
    far = t.add.schedule(3, 4, delay=timedelta(days=7))
    assert near.waits_in == "redis" and far.waits_in == "database"
    assert far.outcome == "created"
    (row,) = rows(alias)
    assert row.id == far.id
    assert abs((row.due_at - row.relay_at).total_seconds() - horizon) < 0.01
    assert pending_ids(store) == [near.id]
    assert get_job(far.id).waits_in == "database" and get_job(far.id).args == [3, 4]
    # A relay pass before the row's relay time moves nothing; after it, the row.
    assert relaying.relay_pass(store, alias) == 0
    later = row.relay_at.timestamp() + 0.001
    before = redis_now(store)
    assert relaying.relay_pass(store, alias, now=later) == 1
    after = redis_now(store)
    assert rows(alias) == [] and set(pending_ids(store)) == {near.id, far.id}
    moved = get_job(far.id)
    assert moved.waits_in == "redis"
    # The relay sent the delay that remains on the database's clock (here the injected
    # one: the horizon), and Redis's clock counts it (outbox promise I7).
    remaining = row.due_at.timestamp() - later
    assert between(moved.due_at.timestamp() - remaining, before, after)


def test_horizon_rows_in_a_transaction_roll_back(store, alias, horizon):
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        t.add.schedule(3, 4, delay=3600)
        assert len(rows(alias)) == 1
        raise RuntimeError("roll back")
    assert rows(alias) == []


def test_horizon_on_commit_far_job_is_not_relayed_at_commit(store, alias, horizon):
    with transaction.atomic(using=alias):
        job = t.add.schedule(3, 4, delay=3600, on_commit=alias)
    assert job.outcome == "deferred"
    assert [r.id for r in rows(alias)] == [job.id] and pending_ids(store) == []


def test_cancel_and_get_job_of_a_row(store, alias, horizon):
    cancelled = []
    signals.job_cancelled.connect(receiver := lambda sender, job, **kw: cancelled.append(job))
    try:
        before = redis_now(store)
        by_id = t.add.schedule(1, 2, delay=3600)
        by_key = t.add.schedule(3, 4, delay=3600, key="order-7")
        after = redis_now(store)
        assert cancel(by_id.id) is True
        assert get_job(by_id.id) is None
        assert cancel(key="order-7") is True
        assert cancel(key="order-7") is False and cancel(by_id.id) is False
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert rows(alias) == []
    assert [(j.id, j.status, j.waits_in) for j in cancelled] == [
        (by_id.id, "cancelled", "database"),
        (by_key.id, "cancelled", "database"),
    ]
    # Kept as finished, as a job cancelled in Redis is, with the due time it had.
    for job in (by_id, by_key):
        kept = get_job(job.id, finished=True)
        assert kept.status == "cancelled" and kept.args == job.args and kept.key == job.key
        assert between(kept.due_at.timestamp() - 3600, before, after)
        assert kept.waits_in == "redis" and kept.finished_at is not None


def test_a_cancelled_row_is_not_kept_when_keeping_is_off_or_redis_refuses(
    store, alias, horizon, caplog, monkeypatch
):
    job = t.add.schedule(1, 2, delay=3600)
    with more_settings(store, FINISHED_MAX_COUNT=0):
        assert cancel(job.id) is True
    assert get_job(job.id, finished=True) is None
    job = t.add.schedule(3, 4, delay=3600)

    def refused(*args):
        raise DelayQError("Redis answered an error: READONLY (a replica)")

    monkeypatch.setattr(store.finished, "keep_cancelled", refused)
    with caplog.at_level(logging.WARNING, logger="django_delayq.api"):
        assert cancel(job.id) is True  # the cancel stands
    assert rows(alias) == [] and get_job(job.id) is None
    assert f"job {job.id} was cancelled but could not be kept as finished" in caplog.text


def test_replace_and_keep_across_redis_and_the_database(store, alias, horizon):
    # The key's job waits in Redis; a far replace moves the key into the database.
    near = t.add.schedule(1, 1, delay=30, key="k")
    kept = t.add.schedule(2, 2, delay=3600, key="k", on_conflict="keep")
    assert kept.outcome == "kept" and kept.id == near.id and kept.waits_in == "redis"
    assert rows(alias) == []
    far = t.add.schedule(3, 3, delay=3600, key="k")
    assert far.outcome == "created" and far.waits_in == "database"
    assert pending_ids(store) == [] and get_job(near.id) is None
    assert [r.id for r in rows(alias)] == [far.id]
    # The key's job waits in the database: keep keeps it, a far replace updates the row.
    kept = t.add.schedule(4, 4, delay=30, key="k", on_conflict="keep")
    assert kept.outcome == "kept" and kept.id == far.id and kept.args == [3, 3]
    again = t.add.schedule(5, 5, delay=7200, key="k")
    assert again.outcome == "replaced" and again.id == far.id and again.args == [5, 5]
    assert len(rows(alias)) == 1
    # A near replace takes the row into Redis (same id, new arguments), relayed at once.
    last = t.add.schedule(6, 6, delay=30, key="k")
    assert last.outcome == "replaced" and last.id == far.id
    assert rows(alias) == [] and pending_ids(store) == [far.id]
    assert get_job(far.id).args == [6, 6] and get_job(far.id).waits_in == "redis"
    # One job for the key all along; cancel(key=) finds it wherever it is.
    assert cancel(key="k") is True and pending_ids(store) == [] and rows(alias) == []


def test_schedule_many_splits_between_redis_and_the_database(store, alias, horizon):
    jobs = schedule_many(
        t.add,
        [
            {"args": [1, 1], "delay": 10},
            {"args": [2, 2], "delay": 3600},
            {"args": [3, 3], "delay": 3600, "key": "m"},
            {"args": [4, 4], "delay": 5, "key": "n"},
        ],
    )
    assert [j.waits_in for j in jobs] == ["redis", "database", "database", "redis"]
    assert [j.outcome for j in jobs] == ["created"] * 4
    assert {r.id for r in rows(alias)} == {jobs[1].id, jobs[2].id}
    assert set(pending_ids(store)) == {jobs[0].id, jobs[3].id}


def test_schedule_many_replaces_the_row_an_earlier_call_of_it_made(store, alias):
    """A keyed call is placed when its turn comes, not when it is validated: the row the
    first call made holds the key, so the second replaces it (relayed at once, its record
    encoded for the outbox: flag 'i' even though it is not due soon)."""
    calls = [
        {"args": [1, 1], "delay": 3600, "key": "k"},
        {"args": [2, 2], "delay": 300, "key": "k"},
    ]
    with override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 600}):
        connection._stores[(None, False, "default", store.prefix)] = store
        far, near = schedule_many(t.add, calls)
        assert (far.outcome, far.waits_in) == ("created", "database")
        assert (near.outcome, near.id) == ("replaced", far.id)
        assert rows(alias) == [] and pending_ids(store) == [far.id]
        record = store.client.hget(store.key("default", "jobs"), far.id)
        assert record.startswith(b"5i=1:k\n") and get_job(far.id).args == [2, 2]


def test_run_now_relays_a_row_due_now(store, alias, horizon):
    job = t.remember.schedule(7, 8, delay=3600)
    assert relaying.run_now(store, "default", [job.id]) == [job.id]
    assert rows(alias) == []
    run_burst(store)
    assert t.CALLS == [((7, 8), {})]


def test_worker_relays_due_rows_and_runs_them_once(store, alias, horizon):
    for i in range(5):
        t.remember.schedule(i, 0, delay=3600)
    # Time passes (without sleeping): the rows are due now.
    first = rows(alias)[0].created_at
    OutboxJob.objects.using(alias).update(relay_at=first, due_at=first)
    run_burst(store)
    assert sorted(t.CALLS) == [((i, 0), {}) for i in range(5)]
    assert rows(alias) == []


# -- admin -------------------------------------------------------------------------------


def test_admin_pending_list_counts_and_shows_where_jobs_wait(store, alias, horizon, admin_client):
    from django.urls import reverse

    near = t.add.schedule(1, 1, delay=30)
    far = t.add.schedule(2, 2, delay=3600)
    response = admin_client.get(reverse("admin:django_delayq_job_pending") + "?queue=default")
    assert response.status_code == 200
    body = response.content.decode()
    assert response.context["total"] == 2
    assert [row.job.id for row in response.context["rows"]] == [near.id, far.id]
    assert [row.job.waits_in for row in response.context["rows"]] == ["redis", "database"]
    assert "waits in the database" in body and "waits in Redis" in body
    # The job page of a row, and the dashboard's pending count.
    detail = admin_client.get(reverse("admin:django_delayq_job_detail", args=["default", far.id]))
    assert detail.status_code == 200 and detail.context["job"].waits_in == "database"
    dashboard = admin_client.get(reverse("admin:django_delayq_job_changelist"))
    (summary,) = [q for q in dashboard.context["queues"] if q["name"] == "default"]
    assert summary["pending"] == 2 and summary["in_database"] == 1


def test_admin_run_now_and_cancel_a_row(store, alias, horizon, admin_client):
    from django.urls import reverse

    run = t.remember.schedule(5, delay=3600)
    gone = t.remember.schedule(6, delay=3600)
    action = reverse("admin:django_delayq_job_action")
    for name, job in (("run_now", run), ("cancel", gone)):
        response = admin_client.post(
            action,
            {
                "queue": "default",
                "action": name,
                "ids": [job.id],
                "job_ids": job.id,
                "confirmed": "yes",
            },
        )
        assert response.status_code == 302
    assert rows(alias) == [] and pending_ids(store) == [run.id]
    run_burst(store)
    assert t.CALLS == [((5,), {})]


def test_the_relay_skips_a_database_without_the_table_with_one_warning(
    store, alias, monkeypatch, caplog
):
    connection_ = connections[alias]
    monkeypatch.setattr(connection_.introspection, "table_names", lambda *a, **k: ["other"])
    relay = relaying.Relay(store, threading.Event())
    with caplog.at_level(logging.WARNING, "django_delayq.outbox"):
        assert relay.turn() == 0
        assert relay.turn() == 0
    assert caplog.text.count(f"database {alias!r} has no outbox table") == 1


def test_a_far_keyed_on_commit_job_commits_while_redis_is_down(store, alias, horizon, monkeypatch):
    down = Store(redis.Redis(port=free_port(), socket_connect_timeout=0.2), prefix=store.prefix)
    monkeypatch.setattr(placement, "get_store", lambda: down)
    with transaction.atomic(using=alias):
        job = t.add.schedule(1, 2, delay=3600, key="k", on_commit=alias)
    assert job.outcome == "deferred" and [r.id for r in rows(alias)] == [job.id]
