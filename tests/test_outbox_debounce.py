"""A debounce through the outbox (issue 36): ``schedule(..., key=k, on_conflict="replace",
max_wait=...)`` with ``on_commit=True`` and beyond ``DELAYQ["HORIZON"]``. A replace pushes the
key's job back but never past the first schedule's due time plus max_wait, whether the key's
job waits in Redis, in a row, or moves from one to the other (outbox/debounce.py,
schedule.lua's ARGV[14] and ARGV[15]). A row a 0.7.0 process writes (no max_wait, no first
due time: migration 0007's columns NULL) relays as before. On SQLite and PostgreSQL, over
fakeredis and the real Redis."""

from __future__ import annotations

import pytest
from django.db import connections, transaction

from django_delayq import get_job, schedule
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import JobSpec, encode_job, encode_record
from django_delayq.models import OutboxJob
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.outbox.database_time import column_time, epoch
from django_delayq.worker.dispatch import Worker
from tests.test_outbox import alias, horizon, pending_ids, redis_now, rows  # noqa: F401
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])

KEY = "customer:42:index"
Q = "default"


def due_in_redis(store, job_id: str) -> float:
    return float(store.client.zscore(store.key(Q, "pending"), job_id)) / 1000


def first_mark(store) -> tuple[str, float]:
    """The debounce's first due time Redis keeps for the key: (job id, epoch seconds)."""
    held = store.client.hget(store.key(Q, "keys"), b"\0d" + KEY.encode()).decode()
    job_id, _, at = held.rpartition("|")
    return job_id, int(at) / 1000


def on_commit(alias, **options):  # noqa: F811
    with transaction.atomic(using=alias):
        return schedule(t.remember, "x", key=KEY, on_commit=alias, **options)


def test_on_commit_replaces_are_capped_across_relays(store, alias):  # noqa: F811
    first = on_commit(alias, delay=30, max_wait=40)
    assert pending_ids(store) == [first.id] and rows(alias) == []
    due0 = due_in_redis(store, first.id)
    assert first_mark(store) == (first.id, due0)
    # Each call is a new row whose relay adopts the key: capped by the Redis job's first due.
    second = on_commit(alias, delay=3600, max_wait=40)
    assert pending_ids(store) == [second.id]
    assert due_in_redis(store, second.id) == pytest.approx(due0 + 40, abs=0.002)
    assert first_mark(store) == (second.id, pytest.approx(due0, abs=0.002))
    third = on_commit(alias, delay=7200, max_wait=40)
    assert pending_ids(store) == [third.id]
    assert due_in_redis(store, third.id) == pytest.approx(due0 + 40, abs=0.002)
    assert get_job(third.id).due_at.timestamp() == pytest.approx(due0 + 40, abs=0.002)
    # A replace sooner than the cap moves the job sooner, the first due time kept.
    fourth = on_commit(alias, delay=5, max_wait=40)
    assert due_in_redis(store, fourth.id) < due0 + 40
    assert first_mark(store) == (fourth.id, pytest.approx(due0, abs=0.002))


def test_without_max_wait_an_on_commit_replace_still_pushes_back(store, alias):  # noqa: F811
    """The control: the cap above is max_wait's doing, not the relay's."""
    first = on_commit(alias, delay=30)
    due0 = due_in_redis(store, first.id)
    second = on_commit(alias, delay=3600)
    assert due_in_redis(store, second.id) > due0 + 3000


def test_the_debounced_job_runs_once_after_on_commit_replaces(store, alias):  # noqa: F811
    for value in ("a", "b", "c"):
        with transaction.atomic(using=alias):
            schedule(t.remember, value, key=KEY, on_commit=alias, max_wait=60)
    assert Worker([Q], burst=True, store=store).run() == 0
    assert [c[0][0] for c in t.CALLS] == ["c"]
    assert store.client.hlen(store.key(Q, "keys")) == 0  # the key and its first due gone


def test_rows_beyond_the_horizon_are_capped_by_their_first_due(store, alias, horizon):  # noqa: F811
    first = on_commit(alias, delay=600, max_wait=100)
    (row,) = rows(alias)
    due0 = epoch(row.first_due_at)
    assert epoch(row.due_at) == due0 and row.max_wait == 100
    again = on_commit(alias, delay=3600, max_wait=100)
    assert again.id == first.id and again.outcome == "deferred"
    (row,) = rows(alias)
    assert epoch(row.due_at) == pytest.approx(due0 + 100, abs=0.002)
    assert epoch(row.first_due_at) == pytest.approx(due0, abs=0.002)
    # Relayed as the capped time comes within the horizon, not the asked one's.
    assert epoch(row.relay_at) == pytest.approx(due0 + 100 - horizon, abs=0.002)
    # A plain schedule() of the key (the row holds it) sooner than the cap: moved sooner.
    near = schedule(t.remember, "y", key=KEY, delay=30, max_wait=100)
    assert near.id == first.id and pending_ids(store) == [first.id] and rows(alias) == []
    assert due_in_redis(store, first.id) == pytest.approx(redis_now(store) + 30, abs=1.0)
    assert first_mark(store) == (first.id, pytest.approx(due0, abs=0.002))


def test_a_far_row_keeps_its_first_due_once_relayed(store, alias, horizon):  # noqa: F811
    first = on_commit(alias, delay=600, max_wait=100)
    on_commit(alias, delay=3600, max_wait=100)
    (row,) = rows(alias)
    due0 = epoch(row.first_due_at)
    relayed = relaying.relay_pass(store, alias, now=epoch(row.relay_at) + 1)
    assert relayed == 1 and rows(alias) == [] and pending_ids(store) == [first.id]
    assert first_mark(store) == (first.id, pytest.approx(due0, abs=0.002))
    # In Redis now: a replace is capped by the row's first due time, not its relayed one
    # (sent on a clock 30 s before that first due time, so that it stays within the horizon).
    spec = JobSpec("tests.testapp.tasks.remember", ["z"], {}, KEY, 0, debounced=True)
    record, later = encode_job(spec).data, due0 - 30
    store.schedule(Q, new_job_id(), record, delay=50, key=KEY, now=later, max_wait=100)
    assert due_in_redis(store, first.id) == pytest.approx(due0 + 20, abs=0.002)  # not capped
    store.schedule(Q, new_job_id(), record, delay=59, key=KEY, now=later + 50, max_wait=100)
    assert due_in_redis(store, first.id) == pytest.approx(due0 + 79, abs=0.002)  # not capped
    store.schedule(Q, new_job_id(), record, delay=59, key=KEY, now=later + 100, max_wait=100)
    assert due_in_redis(store, first.id) == pytest.approx(due0 + 100, abs=0.002)  # capped


def test_a_far_replace_of_a_redis_job_is_capped_by_its_first_due(store, alias, horizon):  # noqa: F811
    held = schedule(t.remember, "x", key=KEY, delay=30, max_wait=300)
    due0 = due_in_redis(store, held.id)
    far = on_commit(alias, delay=3600, max_wait=300)
    # Still beyond the horizon: a row due at the cap, the Redis job cancelled.
    assert pending_ids(store) == [] and store.client.hget(store.key(Q, "jobs"), held.id) is None
    (row,) = rows(alias)
    assert row.id == far.id and epoch(row.due_at) == pytest.approx(due0 + 300, abs=0.002)
    assert epoch(row.first_due_at) == pytest.approx(due0, abs=0.002)
    assert far.due_at.timestamp() == pytest.approx(due0 + 300, abs=0.002)


def test_a_far_replace_capped_within_the_horizon_goes_to_redis(store, alias, horizon):  # noqa: F811
    held = schedule(t.remember, "x", key=KEY, delay=30, max_wait=20)
    due0 = due_in_redis(store, held.id)
    moved = on_commit(alias, delay=3600, max_wait=20)
    assert rows(alias) == [] and pending_ids(store) == [moved.id]
    assert due_in_redis(store, moved.id) == pytest.approx(due0 + 20, abs=0.002)
    assert first_mark(store) == (moved.id, pytest.approx(due0, abs=0.002))
    assert get_job(held.id) is None  # adopted: one job under the key


def test_a_row_written_by_0_7_0_relays_unchanged(store, alias):  # noqa: F811
    """0.7.0 names neither of migration 0007's columns: its INSERT leaves them NULL, and the
    relay stores the job as 0.7.0's relay did (no cap sent, no first due kept)."""
    record = encode_record("tests.testapp.tasks.remember", ["old"], {}, KEY, 0, "i")
    conn = connections[alias]
    table = conn.ops.quote_name(OutboxJob._meta.db_table)
    columns = "id, queue, due_at, relay_at, key, key_hash, on_conflict, relative, record"
    now = column_time(redis_now(store))
    old = ["01J00000000000000000000OLD", Q, now, now, KEY, outbox.key_hash(KEY), "replace"]
    with conn.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}, created_at, link) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [*old, False, record, now, ""],
        )
    (row,) = rows(alias)
    assert row.max_wait is None and row.first_due_at is None
    assert relaying.relay_pass(store, alias) == 1
    assert pending_ids(store) == ["01J00000000000000000000OLD"]
    assert store.client.hget(store.key(Q, "keys"), b"\0d" + KEY.encode()) is None


def test_schedule_many_beyond_the_horizon_caps_each_call_as_schedule_does(
    store,
    alias,  # noqa: F811
    horizon,  # noqa: F811
):
    from django_delayq import schedule_many

    first = on_commit(alias, delay=600, max_wait=100)
    (row,) = rows(alias)
    due0 = epoch(row.first_due_at)
    jobs = schedule_many(t.remember, [("y",), ("z",)], key=KEY, delay=3600, max_wait=100)
    assert [j.id for j in jobs] == [first.id] * 2
    (row,) = rows(alias)
    assert epoch(row.due_at) == pytest.approx(due0 + 100, abs=0.002)
