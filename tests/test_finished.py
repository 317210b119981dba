"""Finished jobs kept a while (FINISHED_MAX_AGE / FINISHED_MAX_COUNT): the scripts that end a
job (ack, claim's acks, cancel) keep it with its record, errors and last attempt, and trim
the oldest; get_job(finished=True) and Job.attempt_history read them back. On fakeredis and
the real server (``store`` fixture); the worker in process (burst mode)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_delayq import cancel, get_job
from django_delayq.jobs.finished import parse_kept
from django_delayq.storage.finished import keep_setting
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.test_store import T0, Q, claim, put, start
from tests.testapp import tasks as t

KEEP = (3_600_000, 10_000)


def kept_ids(store) -> list[str]:
    return [job_id for job_id, _ in store.finished.page(Q, 0, 1000)]


SUMMARY = "1 1800000000000 2.500 1799999999990 w1"  # attempt, started, ran (ms), due, worker


def ack(store, job_id: str, now: float, keep=KEEP, summary: str = SUMMARY):
    token = f"w#{job_id}"
    reply = claim(store, limit=1, now=now, token=token)
    assert job_id in [c.id for c in reply.jobs]
    start(store, job_id, now=now)
    return store.ack(Q, [(job_id, token, "", summary)], now=now, keep=keep)


def test_an_acknowledged_job_is_kept_with_its_record_and_attempt(store):
    job_id = put(store)
    assert ack(store, job_id, T0) == [1]
    assert store.fetch(Q, job_id) is None  # gone from the live sets, as before
    assert get_job(job_id) is None
    job = get_job(job_id, finished=True)
    assert job.status == "succeeded" and job.task == "tests.testapp.tasks.add"
    assert job.args == [1, 2] and job.finished_at.timestamp() == T0
    assert job.last_attempt == {
        "attempt": 1,
        "started": 1_800_000_000.0,
        "duration": 0.0025,
        "due": 1_799_999_999.99,
        "worker": "w1",
    }
    assert job.due_at.timestamp() == 1_799_999_999.99
    [attempt] = job.attempt_history
    assert attempt.error is None and attempt.worker == "w1" and attempt.duration == 0.0025
    assert kept_ids(store) == [job_id] and store.finished.count(Q) == 1
    assert job.will_retry is False  # nothing more to come (attempts 1 <= max_retries 1)


def test_nothing_is_kept_when_either_setting_is_zero(store, redis_client):
    for keep in ((0, 10), (10, 0)):
        job_id = put(store)
        ack(store, job_id, T0, keep=keep)
        assert get_job(job_id, finished=True) is None
    assert not redis_client.exists(store.key(Q, "finished"), store.key(Q, "kept"))
    with more_settings(store, FINISHED_MAX_AGE=0):
        assert keep_setting() == (0, 0)
        job_id = put(store)
        assert cancel(job_id)
        assert get_job(job_id, finished=True) is None


def test_the_count_bound_drops_the_oldest(store):
    ids = [put(store) for _ in range(5)]
    for i, job_id in enumerate(ids):
        ack(store, job_id, T0 + i, keep=(3_600_000, 3))
    assert kept_ids(store) == ids[:1:-1]  # the 3 newest, newest first
    assert store.finished.kept(Q, ids[:2]) == [None, None]


def test_the_age_bound_drops_what_is_older_and_the_keys_expire(store, redis_client):
    first, second = put(store), put(store)
    ack(store, first, T0, keep=(60_000, 100))
    ack(store, second, T0 + 61, keep=(60_000, 100))
    assert kept_ids(store) == [second]
    for kind in ("finished", "kept"):
        assert 0 < redis_client.pttl(store.key(Q, kind)) <= 60_000


def test_a_cancelled_job_is_kept_as_cancelled_with_its_errors(store):
    job_id = put(store, max_retries=3)
    claim(store)
    start(store, job_id)
    error = {"type": "builtins.ValueError", "message": "boom", "attempt": 1, "at": T0}
    store.fail(
        Q,
        job_id,
        "w#1",
        error,
        delay=3600,
        default_max_retries=3,
        now=T0,
        dead_max_age=3600.0,
        dead_max_count=100,
        max_errors=10,
    )
    due = float(store.client.zscore(store.key(Q, "pending"), job_id)) / 1000
    assert cancel(job_id)
    job = get_job(job_id, finished=True)
    assert job.status == "cancelled" and job.last_attempt is None and job.will_retry is False
    assert job.due_at.timestamp() == due  # the retry's due time it had
    assert job.errors[0]["message"] == "boom" and job.attempts == 1
    [attempt] = job.attempt_history
    assert attempt.error["message"] == "boom"


def test_a_damaged_entry_reads_as_garbage_not_an_exception(store, redis_client):
    job_id = put(store)
    ack(store, job_id, T0)
    raw = redis_client.hget(store.key(Q, "kept"), job_id)
    assert parse_kept(raw) is not None
    for garbage in (b"succeeded 1\n999\nabc", b"nonsense", b"succeeded x\n0\n0\n"):
        assert parse_kept(garbage) is None
        redis_client.hset(store.key(Q, "kept"), job_id, garbage)
        job = get_job(job_id, finished=True)  # shown as what it is: nothing to run
        assert job.task == "" and job.status == "orphaned" and job.last_attempt is None


def test_a_job_that_failed_once_then_succeeded_shows_both_attempts(store):
    """The issue's case, through a real worker: the retry's error carries its worker,
    duration and wait; the success its own attempt."""
    job = t.fails_first_attempt.schedule("x")
    worker = Worker(["default"], burst=True)
    assert worker.run() == 0
    assert t.CALLS == [(("x",), {})]
    kept = get_job(job.id, finished=True)
    assert kept.status == "succeeded" and kept.attempts == 2
    first, second = kept.attempt_history
    assert first.number == 1 and first.error["type"] == "builtins.ValueError"
    assert first.retry_in == 0 and first.duration is not None and first.duration >= 0
    assert first.worker == second.worker == worker.name
    assert second.number == 2 and second.error is None
    # finished_at is Redis's TIME at the ack in whole milliseconds, and so is the kept last
    # attempt's start; a failed attempt's start is its error's, the worker's clock in
    # microseconds. No-op attempts can start and end within one millisecond: compared
    # within it (CI saw a start 14 us after the floored end, and one 38 us after the next).
    ms = timedelta(milliseconds=1)
    assert first.started_at - ms < second.started_at
    assert second.started_at - ms < kept.finished_at
    assert second.duration >= 0
    # due when the retry was stored (at once: retry_backoff=0), before it started; due_at
    # is Redis's, in whole milliseconds too (the first attempt may fail within one)
    assert first.started_at - ms < kept.due_at <= second.started_at + ms


@pytest.mark.parametrize("keep", [True, False])
def test_the_worker_keeps_finished_jobs_as_the_settings_say(store, keep):
    job = t.add.schedule(1, 2)
    with more_settings(store, **({} if keep else {"FINISHED_MAX_COUNT": 0})):
        assert Worker(["default"], burst=True).run() == 0
    found = get_job(job.id, finished=True)
    assert (found is not None and found.status == "succeeded") is keep


def test_a_queue_s_own_options_win_over_the_settings(store, redis_client):
    """DELAYQ["QUEUES"]: "emails" keeps none of its finished jobs, "default" keeps 2 for a
    day (the worker, cancel() and the store's acks all read the queue's own)."""
    queues = {
        "default": {"finished_max_age": 86_400, "finished_max_count": 2},
        "emails": {"finished_max_count": 0},
    }
    with more_settings(store, QUEUES=queues):
        assert keep_setting("default") == (86_400_000, 2)
        assert keep_setting("emails") == (0, 0) and keep_setting("unlisted") == (3_600_000, 10_000)
        jobs = [t.add.schedule(i, i) for i in range(3)]
        mail = t.send_mail.schedule("a@example.com")
        assert Worker(["default", "emails"], burst=True).run() == 0
        later = t.send_mail.schedule("b@example.com", delay=600)
        assert cancel(later.id)
        kept = [get_job(job.id, finished=True) for job in jobs]
        assert [job.status if job else None for job in kept].count("succeeded") == 2
        assert get_job(mail.id, finished=True) is None and get_job(later.id, finished=True) is None
        assert not redis_client.exists(store.key("emails", "kept"))
        assert 86_000_000 < redis_client.pttl(store.key(Q, "kept")) <= 86_400_000


def test_a_record_above_64_kib_is_kept_without_its_arguments(store, redis_client):
    big = "x" * 70_000
    job = t.remember.schedule(big, key="order:1")
    assert cancel(job.id)
    kept = get_job(job.id, finished=True)
    assert kept.status == "cancelled" and kept.task == t.remember.name
    assert kept.args == [] and kept.kwargs == {} and kept.key == "order:1"
    assert kept.args_not_kept > 70_000
    assert len(redis_client.hget(store.key(Q, "kept"), job.id)) < 200
    small = t.remember.schedule("x" * 60_000, y=1)  # under the bound: kept whole
    assert cancel(small.id)
    kept = get_job(small.id, finished=True)
    assert kept.args == ["x" * 60_000] and kept.kwargs == {"y": 1} and kept.args_not_kept is None
