"""reschedule() and areschedule(): a pending job's due time moved by id or unique key, in
Redis or in the database outbox (on_commit rows in their transaction, rows beyond
HORIZON); None for a job that is not pending. Over fakeredis and the real Redis; the outbox
on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import areschedule, get_job, reschedule, schedule
from django_delayq.jobs.ids import new_job_id
from tests.conftest import between
from tests.test_async_api import astore as astore
from tests.test_async_api import run
from tests.test_outbox import alias, horizon, pending_ids, redis_now, rows, run_burst  # noqa: F401
from tests.testapp import tasks as t


def due_in_redis(store, job_id, queue="default"):
    return store.client.zscore(store.key(queue, "pending"), job_id) / 1000


@pytest.mark.django_db
def test_by_id_returns_the_job_with_its_new_due_time(store):
    job = t.add.schedule(1, 2, delay=60)
    before = redis_now(store)
    moved = reschedule(job.id, delay=timedelta(hours=1))
    after = redis_now(store)
    assert (moved.id, moved.args, moved.status, moved.outcome) == (
        job.id,
        [1, 2],
        "pending",
        "rescheduled",
    )
    assert between(moved.due_at.timestamp() - 3600, before, after)
    assert due_in_redis(store, job.id) == moved.due_at.timestamp()
    assert get_job(job.id).due_at == moved.due_at
    at = timezone.now() + timedelta(minutes=5)
    assert reschedule(job.id, at=at).due_at.timestamp() == pytest.approx(at.timestamp(), abs=0.001)


@pytest.mark.django_db
def test_by_key_in_the_given_queue_or_any(store):
    job = t.send_mail.schedule("a@b.c", delay=60, key="mail:1")
    assert reschedule(key="mail:1", queue="default", delay=5) is None  # another queue
    moved = reschedule(key="mail:1", delay=600)
    assert (moved.id, moved.queue, moved.key) == (job.id, "emails", "mail:1")
    assert reschedule(key="mail:1", queue="emails", delay=0).id == job.id


@pytest.mark.django_db
def test_not_pending_is_none_and_changes_nothing(store):
    job = t.add.schedule(1, 2)
    assert reschedule(new_job_id(), delay=5) is None
    run_burst(store)  # it ran
    assert reschedule(job.id, delay=5) is None
    assert reschedule(key="nobody", delay=5) is None
    assert pending_ids(store) == []


def test_bad_input_names_what_to_pass(store):
    with pytest.raises(TypeError, match="job id or key="):
        reschedule(delay=5)
    with pytest.raises(TypeError, match="job id or key="):
        reschedule("x", key="k", delay=5)
    with pytest.raises(TypeError, match=r"delay= .* or at="):
        reschedule("x")
    with pytest.raises(TypeError, match="not both"):
        reschedule("x", delay=5, at=timezone.now())
    with pytest.raises(ValueError, match="naive datetime"):
        reschedule("x", at=timezone.now().replace(tzinfo=None))
    with pytest.raises(TypeError, match="timedelta or a number"):
        reschedule("x", delay="soon")
    with pytest.raises(TypeError, match="non-empty string"):
        reschedule(123, delay=5)


@pytest.mark.django_db
def test_async_by_id_and_by_key(astore):
    job = t.add.schedule(1, 2, delay=60, key="k")
    moved = run(areschedule, job.id, delay=600)
    assert moved.id == job.id and due_in_redis(astore, job.id) == moved.due_at.timestamp()
    assert run(areschedule, key="k", delay=6).id == job.id
    assert run(areschedule, new_job_id(), delay=6) is None
    with pytest.raises(TypeError):
        run(areschedule, job.id)


# -- the database outbox ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_an_on_commit_row_moves_in_its_transaction(store, alias):  # noqa: F811
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias, delay=0)
        moved = reschedule(job.id, delay=3600)
        assert moved.waits_in == "database" and moved.outcome == "rescheduled"
        assert pending_ids(store) == []
    # The commit relayed the row as the table held it: due in an hour.
    assert rows(alias) == [] and pending_ids(store) == [job.id]
    assert due_in_redis(store, job.id) - redis_now(store) > 3500
    run_burst(store)
    assert t.CALLS == []


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_rolled_back_savepoint_keeps_the_old_due_time(store, alias):  # noqa: F811
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias, key="k", delay=0)
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            assert reschedule(key="k", delay=3600) is not None
            raise RuntimeError("roll back the savepoint")
    assert pending_ids(store) == [job.id]
    assert due_in_redis(store, job.id) - redis_now(store) < 60
    run_burst(store)
    assert [c[0] for c in t.CALLS] == [(1,)]


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_row_beyond_the_horizon(store, alias, horizon):  # noqa: F811
    far = t.add.schedule(1, 2, delay=timedelta(days=7))
    keyed = t.add.schedule(3, 4, delay=timedelta(days=7), key="order-1")
    # Still beyond: the row stays, its relay time follows its due time.
    moved = reschedule(far.id, delay=timedelta(days=1))
    (row, _) = sorted(rows(alias), key=lambda r: r.id != far.id)
    assert abs((row.due_at - row.relay_at).total_seconds() - horizon) < 0.01
    assert abs(row.due_at.timestamp() - moved.due_at.timestamp()) < 1
    assert pending_ids(store) == []
    # Within the horizon: relayed now, due when asked.
    before = redis_now(store)
    near = reschedule(key="order-1", delay=30)
    after = redis_now(store)
    assert near.id == keyed.id and near.waits_in == "database"
    assert [r.id for r in rows(alias)] == [far.id] and pending_ids(store) == [keyed.id]
    assert between(due_in_redis(store, keyed.id) - 30, before - 0.05, after)
    assert get_job(keyed.id).key == "order-1"


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_redis_job_moved_beyond_the_horizon_stays_in_redis(store, alias, horizon):  # noqa: F811
    job = t.add.schedule(1, 2, delay=30)
    moved = reschedule(job.id, delay=timedelta(days=3))
    assert moved.waits_in == "redis" and rows(alias) == []
    assert pending_ids(store) == [job.id]


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_async_moves_a_row(astore, alias, horizon):  # noqa: F811
    far = schedule(t.add, 1, 2, delay=timedelta(days=7))
    moved = run(areschedule, far.id, delay=timedelta(days=2))
    assert moved.waits_in == "database"
    (row,) = rows(alias)
    assert abs(row.due_at.timestamp() - moved.due_at.timestamp()) < 1
