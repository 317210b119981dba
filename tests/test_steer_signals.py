"""The signals of issue 36's steering: ``job_expired`` (a worker ended a job "expired", never
run) and ``job_rescheduled`` (reschedule(), areschedule() or the admin's Postpone moved a
job). Sent with ``send_robust``: a receiver that raises is logged and changes nothing. Over
fakeredis and the real server; workers in burst mode with their clock injected."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import pytest
from django.db import transaction

from django_delayq import areschedule, get_job, reschedule, signals
from django_delayq.jobs.ids import new_job_id
from tests.test_async_api import astore as astore
from tests.test_async_api import run
from tests.test_expiry import burst, fails_then_waits
from tests.test_outbox import alias, horizon, pending_ids, rows  # noqa: F401
from tests.testapp import tasks as t

Q = "default"


@pytest.fixture(autouse=True)
def _clear():
    t.CALLS.clear()
    yield
    t.CALLS.clear()


@contextmanager
def heard(signal, raises: bool = False):
    """The (sender, job) pairs ``signal`` sent while inside (its receiver raising if asked)."""
    seen: list[tuple] = []

    def receiver(sender, job, **kwargs):
        seen.append((sender, job))
        if raises:
            raise RuntimeError("a broken receiver")

    signal.connect(receiver)
    try:
        yield seen
    finally:
        signal.disconnect(receiver)


# job_expired ---------------------------------------------------------------------------


def test_job_expired_is_sent_once_per_expired_job_with_the_finished_job(store):
    late = t.remember.schedule("late", expires=60, key="late:1")
    t.remember.schedule("in time", expires=3600)
    with heard(signals.job_expired) as seen:
        burst(offset=120)
        burst(offset=120)  # nothing left: nothing sent again
    ((sender, job),) = seen
    assert sender is t.remember  # the registered Task, as for the other signals
    assert (job.id, job.status, job.attempts, job.args, job.key) == (
        late.id,
        "expired",
        0,
        ["late"],
        "late:1",
    )
    assert job.expires_at == late.expires_at and job.due_at == late.due_at
    assert job.finished_at is not None and job.finished_at > job.expires_at
    assert t.CALLS == [(("in time",), {})]


def test_job_expired_of_a_retry_counts_the_attempts_made(store):
    job = fails_then_waits.schedule("r", expires=90)
    burst()  # attempt 1 fails, its retry is due after the expiry
    with heard(signals.job_expired) as seen:
        burst(offset=200)
    ((_, expired),) = seen
    assert (expired.id, expired.attempts, expired.status) == (job.id, 1, "expired")


def test_a_receiver_that_raises_loses_no_expiry_and_breaks_no_worker(store, caplog):
    late = t.remember.schedule("late", expires=60)
    other = t.remember.schedule("other")
    with (
        caplog.at_level(logging.ERROR, "django_delayq.signals"),
        heard(signals.job_expired, raises=True) as seen,
    ):
        burst(offset=120)  # exits 0 (burst asserts it)
    assert [job.id for _, job in seen] == [late.id]
    assert get_job(late.id, finished=True).status == "expired"
    assert get_job(other.id, finished=True).status == "succeeded"
    assert t.CALLS == [(("other",), {})]  # the expired one never ran
    assert store.totals(Q)["expired"] == 1
    assert any("a broken receiver" in r.getMessage() for r in caplog.records)


def test_a_reply_lost_then_resent_still_announces_the_job(store, monkeypatch):
    """The transport re-sent expire.lua after a lost reply: the second answer is 'gone'
    (this very call ended it); the job is announced all the same, once."""
    from django_delayq.worker import expiry

    job = t.remember.schedule("lost", expires=60)
    real_op = expiry.expire_op

    def twice(store, queue, entries, **kw):
        op = real_op(store, queue, entries, **kw)
        store.call(op)  # ran once, its reply lost
        return op

    monkeypatch.setattr(expiry, "expire_op", twice)
    with heard(signals.job_expired) as seen:
        burst(offset=120)
    assert [j.id for _, j in seen] == [job.id] and t.CALLS == []
    assert store.totals(Q)["expired"] == 1


# job_rescheduled -----------------------------------------------------------------------


@pytest.mark.django_db
def test_job_rescheduled_is_sent_with_the_moved_job(store):
    job = t.add.schedule(1, 2, delay=60, key="k")
    with heard(signals.job_rescheduled) as seen:
        moved = reschedule(key="k", delay=600)
        assert reschedule(new_job_id(), delay=5) is None  # not pending: nothing sent
    ((sender, announced),) = seen
    assert sender is t.add and announced == moved
    assert announced.outcome == "rescheduled" and announced.id == job.id


@pytest.mark.django_db
def test_a_receiver_that_raises_keeps_the_move(store, caplog):
    job = t.add.schedule(1, 2, delay=60)
    with (
        caplog.at_level(logging.ERROR, "django_delayq.signals"),
        heard(signals.job_rescheduled, raises=True) as seen,
    ):
        moved = reschedule(job.id, delay=3600)
    assert moved is not None and len(seen) == 1
    assert get_job(job.id).due_at == moved.due_at
    assert any("a broken receiver" in r.getMessage() for r in caplog.records)


def test_areschedule_sends_it(astore):
    job = t.add.schedule(1, 2, delay=60)
    with heard(signals.job_rescheduled) as seen:
        moved = run(areschedule, job.id, delay=600)
        assert run(areschedule, new_job_id(), delay=6) is None
    assert [j for _, j in seen] == [moved]


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_a_row_moved_is_announced_when_the_move_commits_never_when_rolled_back(
    store,
    alias,  # noqa: F811
):
    with heard(signals.job_rescheduled) as seen:
        with transaction.atomic(using=alias):
            job = t.remember.schedule(1, on_commit=alias, key="k", delay=0)
            with pytest.raises(RuntimeError), transaction.atomic(using=alias):
                assert reschedule(key="k", delay=3600) is not None
                raise RuntimeError("roll back the savepoint")
            assert seen == []
            moved = reschedule(job.id, delay=1800)
            assert seen == []  # not before the commit
        assert [j.id for _, j in seen] == [job.id]
    assert seen[0][1].due_at == moved.due_at and seen[0][1].waits_in == "database"
    assert pending_ids(store) == [job.id]


@pytest.mark.django_db
def test_the_admin_postpone_sends_it_for_each_job_moved(store, admin_client):
    from tests.test_admin import _post, make_running, msgs
    from tests.test_admin_postpone import confirm_with

    job = t.add.schedule(1, 2, delay=60)
    running = make_running(store, Q)
    page = _post(admin_client, action="postpone", ids=[job.id, running])
    with heard(signals.job_rescheduled) as seen:
        response = confirm_with(admin_client, page, "2", "hours")
    assert msgs(response) == ["1 job postponed, 1 is being run by a worker."]
    assert [j.id for _, j in seen] == [job.id]
    assert seen[0][1].due_at == get_job(job.id).due_at


# job_scheduled for a schedule() that stored nothing ("throttled", "kept") ----------------
# Sent as for "kept" since 0.1: the signal says what schedule() answered, job.outcome what
# happened (BullMQ's "deduplicated" event, with the job that holds the key, is the model;
# nothing stored sends no "created"). A receiver that counts stored jobs checks job.outcome.


def _succeeded_with_a_window(key: str) -> str:
    from django_delayq.worker.dispatch import Worker

    first = t.remember.schedule("a", key=key, unique_for=3600)
    assert Worker([Q], burst=True).run() == 0
    return first.id


@pytest.mark.django_db
def test_a_throttled_schedule_sends_job_scheduled_saying_throttled(store):
    from django_delayq import schedule_many

    finished = _succeeded_with_a_window("k")
    with heard(signals.job_scheduled) as seen:
        again = t.remember.schedule("b", key="k", unique_for=3600)
        (many,) = schedule_many(t.remember, [("c",)], key="k")
    assert [(s, j.outcome, j.id, j.status) for s, j in seen] == [
        (t.remember, "throttled", finished, "succeeded"),
        (t.remember, "throttled", finished, "succeeded"),
    ]
    assert seen[0][1] == again and seen[1][1] == many and again.args == ["b"]
    assert store.client.hlen(store.key(Q, "jobs")) == 0  # nothing stored


def test_athrottled_aschedule_sends_it_too(astore):
    from django_delayq import aschedule

    finished = _succeeded_with_a_window("k")
    with heard(signals.job_scheduled) as seen:
        again = run(aschedule, t.remember, "b", key="k")
    assert [(j.outcome, j.id) for _, j in seen] == [("throttled", finished)]
    assert seen[0][1] == again


@pytest.mark.django_db
def test_a_keep_while_the_key_s_job_runs_sends_job_scheduled_saying_kept(store):
    from tests.test_outbox import redis_now
    from tests.test_store import claim, start

    leader = t.remember.schedule("a", key="k", unique_until="end")
    now = redis_now(store) + 1
    assert [j.id for j in claim(store, now=now).jobs] == [leader.id]
    start(store, leader.id, now=now)
    with heard(signals.job_scheduled) as seen:
        kept = t.remember.schedule("b", key="k", unique_until="end", on_conflict="keep")
        follower = t.remember.schedule("c", key="k", unique_until="end")
    assert [(j.outcome, j.id, j.status) for _, j in seen] == [
        ("kept", leader.id, "running"),
        ("created", follower.id, "waiting"),
    ]
    assert seen[0][1] == kept and kept.args == ["a"]  # the running job's, not this call's
