"""What a commit applies (issue 17, outbox promise I1-I4, I8): a job scheduled with on_commit is,
after the commit, what the outbox table holds at commit; a cancel or a replace inside the
transaction is what the commit relays; the id schedule() returns is the one the job runs
under. On SQLite and PostgreSQL, over fakeredis and the real Redis."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings

from django_delayq import cancel, get_job, schedule_many, signals
from django_delayq.jobs.record import encode_record
from django_delayq.models import OutboxJob
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.storage import connection
from tests.conftest import between
from tests.routers import OutboxOnly
from tests.test_outbox import (  # noqa: F401
    alias,
    horizon,
    pending_ids,
    redis_now,
    rows,
    run_burst,
)
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


@pytest.fixture
def cancelled():
    seen: list = []

    def receiver(sender, job, **kw):
        seen.append((job.id, job.status))

    signals.job_cancelled.connect(receiver)
    try:
        yield seen
    finally:
        signals.job_cancelled.disconnect(receiver)


def test_cancel_by_id_inside_the_transaction(store, alias, cancelled):  # noqa: F811
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias, delay=0)
        # Item 11: the caller's own connection sees its row (HORIZON off).
        assert get_job(job.id).id == job.id
        assert cancel(job.id) is True
        assert get_job(job.id) is None
        assert cancelled == []  # sent when the deletion commits
    assert cancelled == [(job.id, "cancelled")]
    # Item 1: the commit hook relayed what the table held: nothing.
    assert rows(alias) == [] and pending_ids(store) == []
    run_burst(store)
    assert t.CALLS == []


def test_cancel_by_key_inside_the_transaction(store, alias, cancelled):  # noqa: F811
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias, key="order-1")
        assert cancel(key="order-1") is True
    assert cancelled == [(job.id, "cancelled")]
    assert rows(alias) == [] and pending_ids(store) == []
    run_burst(store)
    assert t.CALLS == []


def test_a_rolled_back_cancel_restores_the_row_and_sends_nothing(
    store,
    alias,  # noqa: F811
    cancelled,
):
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias, key="k")
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            assert cancel(job.id) is True
            raise RuntimeError("roll back the savepoint")
    assert cancelled == []
    assert pending_ids(store) == [job.id] and rows(alias) == []


def test_cancel_by_key_removes_the_row_and_the_redis_holder(
    store,
    alias,  # noqa: F811
    cancelled,
):
    held = t.remember.schedule(1, key="k", delay=30)  # pending in Redis
    with transaction.atomic(using=alias):
        row_job = t.remember.schedule(2, key="k", on_commit=alias)
        assert cancel(key="k") is True
        assert pending_ids(store) == []  # Redis at once (it has no transactions)
        assert cancelled == [(held.id, "cancelled")]
    assert cancelled == [(held.id, "cancelled"), (row_job.id, "cancelled")]
    assert rows(alias) == [] and pending_ids(store) == []
    run_burst(store)
    assert t.CALLS == []


def test_two_replaces_in_one_transaction_the_last_wins(store, alias):  # noqa: F811
    before = redis_now(store)
    with transaction.atomic(using=alias):
        first = t.remember.schedule(1, key="k", delay=30, on_commit=alias)
        second = t.remember.schedule(2, key="k", delay=60, on_commit=alias)
        assert second.id == first.id and second.outcome == "deferred"
    assert rows(alias) == [] and pending_ids(store) == [first.id]
    stored = get_job(first.id)
    assert stored.args == [2]
    # The row keeps its delay and the relay applies it on Redis's clock at commit: the job
    # is due 60 s after the calls (the second's delay), never 30 s (the first's).
    assert between(stored.due_at.timestamp() - 60, before, redis_now(store))


def test_near_then_far_in_one_transaction_waits_as_a_row(store, alias, horizon):  # noqa: F811
    with transaction.atomic(using=alias):
        near = t.remember.schedule(1, key="k", delay=30, on_commit=alias)
        far = t.remember.schedule(2, key="k", delay=timedelta(days=2), on_commit=alias)
        assert far.id == near.id
    # The commit hook of the first call did not relay the row that became far.
    assert pending_ids(store) == []
    (row,) = rows(alias)
    assert row.id == near.id
    assert get_job(near.id).args == [2] and get_job(near.id).waits_in == "database"


def test_far_then_near_in_one_transaction_is_relayed(store, alias, horizon):  # noqa: F811
    with transaction.atomic(using=alias):
        far = t.remember.schedule(1, key="k", delay=timedelta(days=2), on_commit=alias)
        near = t.remember.schedule(2, key="k", delay=30, on_commit=alias)
        assert far.id == near.id
    assert rows(alias) == [] and pending_ids(store) == [far.id]
    assert get_job(far.id).args == [2]


def test_two_transactions_racing_on_a_key_the_second_to_commit_wins(store):
    """PostgreSQL: T1 writes the key's row, T2 (another connection) writes it too and waits
    on T1's row; T1 commits (its hook relays), then T2: T2's call is the job."""
    with override_settings(DATABASE_ROUTERS=[OutboxOnly("pg")]):
        started, done = threading.Event(), threading.Event()
        second: dict = {}

        def other() -> None:
            try:
                with transaction.atomic(using="pg"):
                    started.set()
                    second["job"] = t.remember.schedule(2, key="k", delay=60, on_commit="pg")
                    second["in"] = True
            except Exception as exc:  # pragma: no cover - reported below
                second["error"] = exc
            finally:
                connections["pg"].close()
                done.set()

        try:
            with transaction.atomic(using="pg"):
                first = t.remember.schedule(1, key="k", delay=30, on_commit="pg")
                thread = threading.Thread(target=other)
                thread.start()
                assert started.wait(10)
                # T2 is blocked on T1's key (unique index) while T1 is open.
                assert not done.wait(0.5) and "in" not in second
            assert done.wait(30)
            thread.join()
            assert "error" not in second, second.get("error")
            job = second["job"]
            assert pending_ids(store) == [job.id]
            assert get_job(job.id).args == [2]
            assert first.id == job.id or get_job(first.id) is None
            assert OutboxJob.objects.using("pg").count() == 0
        finally:
            OutboxJob.objects.using("pg").all().delete()


# -- a row over a pending Redis job: the relay adopts the key (item 9) -------------------


def test_on_commit_replace_over_a_redis_job_runs_under_the_returned_id(store, alias):  # noqa: F811
    held = t.remember.schedule(1, key="k")  # due now: flag 'i', a tombstone when removed
    with transaction.atomic(using=alias):
        job = t.remember.schedule(2, key="k", delay=30, on_commit=alias)
        assert job.id != held.id
    assert pending_ids(store) == [job.id]
    assert get_job(job.id).args == [2] and get_job(held.id) is None
    # The removed holder left a tombstone: a lost-reply re-send of it stores nothing.
    assert store.client.zscore(store.key("default", "done"), held.id) is not None
    assert cancel(job.id) is True and pending_ids(store) == []


def test_the_adopting_relay_sent_again_changes_nothing(store):
    t.remember.schedule(1, key="k", delay=30)
    record = encode_record("tests.testapp.tasks.remember", [2], {}, "k", 0, "i")
    row = outbox.Row("01J0000000000000000000ADPT", "default", 0.0, record, "k")
    first, error = relaying.relay(store, [row])
    assert error is None and first[row.id].outcome == "created"
    again, error = relaying.relay(store, [row])
    assert error is None and again[row.id].outcome == "created"
    assert pending_ids(store) == [row.id]
    assert store.client.hget(store.key("default", "keys"), "k") == row.id.encode()


def test_on_commit_keep_over_a_redis_job_returns_the_kept_job(store, alias):  # noqa: F811
    held = t.remember.schedule(1, key="k", delay=30)
    with transaction.atomic(using=alias):
        kept = t.remember.schedule(2, key="k", on_conflict="keep", on_commit=alias)
    assert kept.id == held.id and kept.outcome == "kept"
    assert pending_ids(store) == [held.id] and get_job(held.id).args == [1]
    assert rows(alias) == []


# -- HORIZON turned off while rows wait (item 8) ----------------------------------------


def _far_row(store, alias):  # noqa: F811
    with override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 60}):
        connection._stores[(None, False, "default", store.prefix)] = store
        job = t.remember.schedule(1, key="k", delay=3600)
    connection._stores[(None, False, "default", store.prefix)] = store
    assert [r.id for r in rows(alias)] == [job.id]
    return job


def test_horizon_off_get_job_finds_a_waiting_row_and_workers_relay_it(store, alias):  # noqa: F811
    job = _far_row(store, alias)
    assert get_job(job.id).waits_in == "database"
    assert relaying.relay_pass(store, alias) == 1  # its relay time is an hour away: ignored
    assert rows(alias) == [] and pending_ids(store) == [job.id]


def test_horizon_off_a_plain_keyed_schedule_replaces_the_waiting_row(store, alias):  # noqa: F811
    job = _far_row(store, alias)
    again = t.remember.schedule(2, key="k", delay=0)
    assert again.id == job.id and again.outcome == "replaced"
    assert rows(alias) == [] and pending_ids(store) == [job.id]
    run_burst(store)
    assert t.CALLS == [((2,), {})]
    assert relaying.relay_pass(store, alias) == 0 and pending_ids(store) == []


def test_horizon_off_a_keyed_schedule_many_replaces_the_waiting_row(store, alias):  # noqa: F811
    """schedule_many()'s bulk path, taken when there is no horizon, first asks whether a
    row holds one of its keys: it once stored a second job beside the row's."""
    job = _far_row(store, alias)
    again, other = schedule_many(
        t.remember, [{"args": (2,), "key": "k"}, {"args": (3,), "key": "k2"}], delay=0
    )
    assert again.id == job.id and again.outcome == "replaced"
    assert rows(alias) == [] and sorted(pending_ids(store)) == sorted([job.id, other.id])
    run_burst(store)
    assert sorted(t.CALLS) == [((2,), {}), ((3,), {})]


def test_horizon_off_an_on_commit_row_keeps_its_grace_for_the_fast_path(
    store,
    alias,  # noqa: F811
    monkeypatch,
):
    """Rows left from a horizon move at once, but an on_commit row whose fast path has not
    run yet is left to it for GRACE seconds (a worker's pass would only race it)."""
    import time

    monkeypatch.setattr(relaying, "relay_now", lambda *a, **kw: False)  # the fast path stalls
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, delay=30, on_commit=alias)
    assert [r.id for r in rows(alias)] == [job.id]
    assert relaying.relay_pass(store, alias) == 0  # within its GRACE: the fast path's
    assert relaying.relay_pass(store, alias, now=time.time() + outbox.GRACE + 1) == 1
    assert rows(alias) == [] and pending_ids(store) == [job.id]
