"""Run once after commit (outbox promise I6): a row whose job reached Redis is never stored in Redis
again, however long its DELETE is refused: the relay marks the ids it stored ("relayed"),
clears the marks once the DELETE committed, and a worker's relay sweeps old marks. On SQLite
and PostgreSQL, over fakeredis and the real Redis."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import DatabaseError, connections, transaction
from django.test import override_settings

from django_delayq.models import OutboxJob
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.storage.store import DONE_TTL, Store
from django_delayq.worker.dispatch import Worker
from tests.routers import OutboxOnly
from tests.test_outbox import alias, pending_ids, rows, run_burst  # noqa: F401
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


def marked(store: Store, queue: str = "default") -> list[str]:
    return [i.decode() for i in store.client.zrange(store.key(queue, "relayed"), 0, -1)]


def expire_tombstones(store: Store, later: float) -> None:
    """Let DONE_TTL pass for the tombstones (``now=`` injected): a cancel at ``later`` trims
    the tombstones older than ``later - DONE_TTL``, as any tombstone written then would."""
    throwaway = t.remember.schedule(0)  # due now: flag 'i', it leaves a tombstone
    assert store.cancel("default", job_id=throwaway.id, now=later) is not None


def run_without_relay(store: Store) -> None:
    assert Worker(["default"], burst=True, store=store, relay=False).run() == 0


def test_a_refused_delete_never_runs_the_job_twice(store, alias, monkeypatch):  # noqa: F811
    def refused(alias_, ids):
        raise DatabaseError("canceling statement due to lock timeout")

    monkeypatch.setattr(outbox, "delete", refused)
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias)
    # The fast path stored the job; its DELETE was refused: the row stays, marked relayed.
    assert pending_ids(store) == [job.id] and [r.id for r in rows(alias)] == [job.id]
    assert marked(store) == [job.id]
    run_without_relay(store)
    assert t.CALLS == [((1,), {})]
    later = time.time() + DONE_TTL + 60
    expire_tombstones(store, later)
    assert store.client.zscore(store.key("default", "done"), job.id) is None
    # A worker's relay of the stale row (its DELETE still refused) stores nothing...
    with pytest.raises(DatabaseError):
        relaying.relay_pass(store, alias, now=later)
    assert pending_ids(store) == []
    # ... and once the DELETE goes through, the row and its mark go.
    monkeypatch.undo()
    assert relaying.relay_pass(store, alias, now=later) == 1
    assert rows(alias) == [] and marked(store) == [] and pending_ids(store) == []
    run_burst(store)
    assert t.CALLS == [((1,), {})]


def test_keyed_rows_are_marked_too(store, alias, monkeypatch):  # noqa: F811
    monkeypatch.setattr(outbox, "delete", lambda *a: (_ for _ in ()).throw(DatabaseError("x")))
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, key="k", on_commit=alias)
    assert marked(store) == [job.id]
    run_without_relay(store)
    expire_tombstones(store, later := time.time() + DONE_TTL + 60)
    monkeypatch.undo()
    assert relaying.relay_pass(store, alias, now=later) == 1
    assert pending_ids(store) == [] and rows(alias) == [] and marked(store) == []
    assert t.CALLS == [((1,), {})]


def test_the_marks_of_deleted_rows_are_cleared_and_old_ones_swept(store, alias):  # noqa: F811
    with transaction.atomic(using=alias):
        job = t.remember.schedule(1, on_commit=alias)
    assert pending_ids(store) == [job.id] and rows(alias) == [] and marked(store) == []
    # A mark whose ZREM was lost: the sweep removes it once old, if no row holds the id.
    key = store.key("default", "relayed")
    store.client.zadd(key, {job.id: int(time.time() * 1000), "01J0000000000000000000KEEP": 0})
    OutboxJob.objects.using(alias).create(
        id="01J0000000000000000000KEEP",
        queue="default",
        due_at=OutboxJob._meta.get_field("due_at").to_python("2100-01-01T00:00:00Z"),
        relay_at=OutboxJob._meta.get_field("due_at").to_python("2100-01-01T00:00:00Z"),
        record=b"",
        created_at=OutboxJob._meta.get_field("due_at").to_python("2020-01-01T00:00:00Z"),
    )
    assert relaying.sweep_marks(store, [alias]) == 0  # the first mark is young
    later = time.time() + relaying.SWEEP_AGE + 1
    assert relaying.sweep_marks(store, [alias], now=later) == 1
    assert marked(store) == ["01J0000000000000000000KEEP"]  # its row still waits


def pg_connection() -> psycopg.Connection:
    """A second connection to the test's PostgreSQL database (another session's lock)."""
    settings_dict = connections["pg"].settings_dict
    return psycopg.connect(
        host=settings_dict["HOST"],
        port=settings_dict["PORT"],
        user=settings_dict["USER"],
        dbname=settings_dict["NAME"],
    )


def test_postgresql_table_locked_after_the_commit_runs_the_job_once(store):
    """The issue's scenario with a real lock: another connection holds the outbox table in
    ACCESS EXCLUSIVE MODE right after the commit, the producer has lock_timeout."""
    with override_settings(DATABASE_ROUTERS=[OutboxOnly("pg")]):
        locker = pg_connection()
        try:
            with transaction.atomic(using="pg"):
                with connections["pg"].cursor() as cursor:
                    cursor.execute("SET lock_timeout = '500ms'")
                transaction.on_commit(
                    lambda: locker.execute(
                        "LOCK TABLE django_delayq_outbox IN ACCESS EXCLUSIVE MODE"
                    ),
                    using="pg",
                )
                job = t.remember.schedule(1, on_commit="pg")
            # The fast path could not take the row: nothing in Redis, the row waits.
            assert pending_ids(store) == []
            locker.rollback()
            assert OutboxJob.objects.using("pg").get().id == job.id
            later = time.time() + outbox.GRACE + 1
            assert relaying.relay_pass(store, "pg", now=later) == 1
            run_without_relay(store)
            assert t.CALLS == [((1,), {})]
            assert relaying.relay_pass(store, "pg", now=later) == 0
        finally:
            locker.rollback()
            locker.close()
            with connections["pg"].cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
            OutboxJob.objects.using("pg").all().delete()


def test_postgresql_lock_taken_during_the_relay_runs_the_job_once(store, monkeypatch):
    """The lock is asked for between the relay's Redis write and its DELETE (the DELETE
    may be refused by lock_timeout): the job runs once, and a later relay stores nothing."""
    with override_settings(DATABASE_ROUTERS=[OutboxOnly("pg")]):
        locker = pg_connection()
        relay = relaying.relay
        locking = threading.Thread(
            target=lambda: locker.execute(
                "LOCK TABLE django_delayq_outbox IN ACCESS EXCLUSIVE MODE"
            )
        )

        def relay_then_lock(*args, **kwargs):
            result = relay(*args, **kwargs)
            locking.start()
            time.sleep(0.3)  # let the LOCK queue up (not a correctness wait: either way holds)
            return result

        monkeypatch.setattr(relaying, "relay", relay_then_lock)
        try:
            with transaction.atomic(using="pg"):
                with connections["pg"].cursor() as cursor:
                    cursor.execute("SET lock_timeout = '500ms'")
                job = t.remember.schedule(1, on_commit="pg")
            monkeypatch.undo()
            locking.join(10)
            assert pending_ids(store) == [job.id]
            run_without_relay(store)
            assert t.CALLS == [((1,), {})]
            locker.rollback()
            later = time.time() + DONE_TTL + 60
            expire_tombstones(store, later)
            relaying.relay_pass(store, "pg", now=later)
            assert pending_ids(store) == [] and OutboxJob.objects.using("pg").count() == 0
            run_without_relay(store)
            assert t.CALLS == [((1,), {})]
        finally:
            locker.rollback()
            locker.close()
            with connections["pg"].cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
            OutboxJob.objects.using("pg").all().delete()


def test_a_relay_leftover_is_no_pending_job_and_holds_no_key(store, alias, monkeypatch):  # noqa: F811
    """A row relayed into Redis whose DELETE failed is a leftover: get_job() and cancel()
    do not take it for a waiting job, and a later keyed schedule() (on_commit or plain)
    makes a new job instead of updating the leftover, whose relay would be a no-op: the
    call would be lost. Found by the API model test (tests/test_api_model.py)."""
    from django_delayq import cancel, get_job

    def refused(alias_, ids):
        raise DatabaseError("canceling statement due to lock timeout")

    with monkeypatch.context() as patch:
        patch.setattr(outbox, "delete", refused)
        with transaction.atomic(using=alias):
            first = t.remember.schedule(1, key="k", on_commit=alias)
    assert [r.id for r in rows(alias)] == [first.id] and marked(store) == [first.id]
    run_without_relay(store)
    assert t.CALLS == [((1,), {})]
    assert get_job(first.id) is None and cancel(first.id) is False
    assert [r.id for r in rows(alias)] == [first.id]  # left to the relay's clean-up
    with transaction.atomic(using=alias):
        second = t.remember.schedule(2, key="k", on_commit=alias)
    assert second.id != first.id and get_job(second.id).args == [2]
    run_without_relay(store)
    assert t.CALLS == [((1,), {}), ((2,), {})]
    plain = t.remember.schedule(3, key="k", delay=0)  # no row now: straight to Redis
    run_without_relay(store)
    assert plain.id not in (first.id, second.id) and t.CALLS[-1] == ((3,), {})
