"""Queue control (issue 20): pause and resume, and priorities through the public API, the
worker, the management commands, health and metrics."""

from __future__ import annotations

import json
import threading
import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command

import django_delayq
from django_delayq import get_job, schedule, schedule_many, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.monitoring import health
from django_delayq.worker.dispatch import Worker
from tests.test_store import T0, start
from tests.testapp import tasks as t

Q = "default"


def claim(store, limit=10, now=T0, token="w#1"):
    return store.claim(Q, limit, lease=30, token=token, instance="w", now=now)


def put(store, priority=0, delay=0.0):
    record = encode_record("tests.testapp.tasks.add", [1, 2], {}, None, 1, "", priority)
    return store.schedule(Q, new_job_id(), record, delay=delay, now=T0).id


# -- pause in the store ------------------------------------------------------------------


def test_a_paused_queue_leases_nothing_but_acks(store):
    running = put(store)
    claim(store)
    start(store, running)
    waiting = [put(store), put(store, priority=5)]
    assert store.control.pause(Q, now=T0) is True
    assert store.control.pause(Q, now=T0 + 1) is False  # already: the first time is kept
    assert store.control.paused_since(Q) == T0
    reply = store.claim(
        Q, 10, lease=30, token="w#2", instance="w", now=T0, acks=[(running, "w#1", "")]
    )
    assert reply.jobs == [] and reply.next_due is None and reply.acked == [1]
    assert store.counts(Q, now=T0)["paused"] is True
    assert sorted(store.page_ids(Q, "pending", 0, 10)) == sorted(waiting)
    assert store.control.resume(Q) is True
    assert store.control.resume(Q) is False
    assert not store.client.exists(store.key(Q, "control"))  # no control state: fast path
    assert store.client.llen(store.key(Q, "wake")) >= 1  # sleeping workers are woken
    got = claim(store, token="w#3")
    assert [j.id for j in got.jobs] == [waiting[1], waiting[0]]


def test_pause_survives_a_new_store(store):
    from django_delayq.storage.store import Store

    store.control.pause(Q, now=T0)
    again = Store(store.client, prefix=store.prefix)
    assert again.control.paused_since(Q) == T0
    assert claim(again).jobs == []


# -- the public API ----------------------------------------------------------------------


def test_public_pause_resume(store):
    assert not django_delayq.is_paused("emails")
    assert django_delayq.pause("emails") is True
    assert django_delayq.is_paused("emails")
    assert django_delayq.resume("emails") is True
    assert not django_delayq.is_paused("emails")
    with pytest.raises(ValueError, match="invalid queue name"):
        django_delayq.pause("no spaces")


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        (True, TypeError, "got True"),
        (1.5, TypeError, "got 1.5"),
        ("3", TypeError, "got '3'"),
        (101, ValueError, "got 101"),
        (-101, ValueError, "got -101"),
    ],
)
def test_priority_must_be_an_int_in_djangos_range(store, value, error, text):
    with pytest.raises(error, match=text):
        schedule(t.add, 1, 2, priority=value)
    with pytest.raises(error, match=text):

        @task(name=f"tests.bad_priority_{id(value)}", priority=value)
        def bad():
            pass


def test_priority_from_schedule_and_task(store):
    @task(name="tests.urgent", priority=20)
    def urgent():
        t.CALLS.append("urgent")

    job = urgent.schedule()
    assert job.priority == 20 and get_job(job.id).priority == 20
    low = urgent.schedule(priority=-5)
    assert get_job(low.id).priority == -5
    plain = schedule(t.add, 1, 2)
    assert plain.priority == 0 and get_job(plain.id).priority == 0
    many = schedule_many(t.add, [{"args": [1, 2], "priority": 3}, [1, 2]])
    assert [get_job(j.id).priority for j in many] == [3, 0]


def test_worker_runs_higher_priority_first(store):
    for i in range(5):
        t.remember.schedule(f"email{i}", priority=-10)
    for i in range(3):
        t.remember.schedule(f"cancel{i}", priority=10)
    t.remember.schedule("plain")
    Worker([Q], burst=True, concurrency=1).run()
    order = [args[0] for args, _ in t.CALLS]
    assert order == ["cancel0", "cancel1", "cancel2", "plain"] + [f"email{i}" for i in range(5)]


# -- health, delayq_status, delayq_queue, metrics -----------------------------------------


def test_a_paused_queue_is_healthy_and_shown_paused(store):
    t.add.schedule(1, 2)  # due, and no worker serves the queue: unhealthy unless paused
    report = health.report(store, [Q], max_lag=0.0)
    assert not report.healthy
    django_delayq.pause(Q)
    time.sleep(0.01)
    report = health.report(store, [Q], max_lag=0.0)
    assert report.healthy and report.queues[0].paused
    out = StringIO()
    call_command("delayq_status", "--queues", Q, "--max-lag", "0", "--json", stdout=out)
    assert json.loads(out.getvalue())["queues"][0]["paused"] is True
    out = StringIO()
    call_command("delayq_status", "--queues", Q, stdout=out)
    assert "paused" in out.getvalue()


def test_delayq_queue_command(store):
    out = StringIO()
    call_command("delayq_queue", "pause", "default", "emails", stdout=out)
    assert out.getvalue().splitlines() == ["default: paused", "emails: paused"]
    out = StringIO()
    call_command("delayq_queue", "status", "default", stdout=out)
    assert out.getvalue().strip() == "default: paused"
    out = StringIO()
    call_command("delayq_queue", "resume", "default", stdout=out)
    call_command("delayq_queue", "resume", "default", stdout=out)
    assert out.getvalue().splitlines() == ["default: resumed", "default: resumed (was not paused)"]
    assert django_delayq.is_paused("emails")


def test_delayq_queue_refuses_a_queue_nothing_names(store):
    """Issue 26: `delayq_queue pause defualt` printed "defualt: paused" and exited 0 while
    the real queue ran on. A queue nothing names is refused with the "did you mean" of
    delayq_status; --force acts on a queue that is new on purpose."""
    from django.core.management.base import CommandError

    out = StringIO()
    with pytest.raises(CommandError, match=r"unknown queue 'defualt'.*did you mean 'default'"):
        call_command("delayq_queue", "pause", "default", "defualt", stdout=out)
    assert out.getvalue() == "" and not django_delayq.is_paused("default")  # none paused
    with pytest.raises(CommandError, match=r"unknown queue 'zzz'.*\(known: default, emails"):
        call_command("delayq_queue", "status", "zzz")
    call_command("delayq_queue", "pause", "brand-new", "--force", stdout=out)
    assert out.getvalue() == "brand-new: paused\n"
    call_command("delayq_queue", "resume", "brand-new", stdout=out)  # paused: known
    assert not django_delayq.is_paused("brand-new")
    schedule("tests.testapp.tasks.add", 1, 2, queue="side")  # scheduled to: Redis knows it
    call_command("delayq_queue", "pause", "side", stdout=out)
    assert django_delayq.is_paused("side")


def test_metrics_show_paused_and_no_lag_to_scale_on(store):
    """A paused queue's jobs wait on purpose: its delayq_lag_seconds is 0 (autoscalers read
    it, docs/howto/autoscaling.rst), while the report keeps the real lag for the status."""
    from django_delayq.monitoring.metrics import QueueCollector

    record = encode_record(t.add.name, [1, 2], {})
    store.schedule(Q, new_job_id(), record, now=time.time() - 120)  # 2 minutes late
    django_delayq.pause(Q)
    report = health.report(store, [Q])
    assert report.queues[0].lag >= 119
    families = {f.name: f for f in QueueCollector(report).collect()}
    assert families["delayq_queue_paused"].samples[0].value == 1.0
    assert families["delayq_lag_seconds"].samples[0].value == 0.0
    django_delayq.resume(Q)
    families = {f.name: f for f in QueueCollector(health.report(store, [Q])).collect()}
    assert families["delayq_lag_seconds"].samples[0].value >= 119


# -- real workers, real time ---------------------------------------------------------------


def test_paused_queue_with_three_workers_claims_nothing_then_drains(real_store):
    """Three workers serve a paused queue for 10 s (the issue's figure: workers poll and
    are woken many times over in that span): nothing is claimed, a job that was
    running when the pause came finishes and is acknowledged, nothing is lost; after
    resume all jobs run, each once."""

    tag = f"paused-{uuid.uuid4().hex[:8]}"
    paused_runs, slow_runs = f"runs:{tag}", f"runs:{tag}-slow"

    @task(name="tests.slow_before_pause")
    def slow():
        time.sleep(0.5)
        t.record_run(f"{tag}-slow", "done")

    slow_job = slow.schedule()
    workers = [Worker([Q], concurrency=4) for _ in range(3)]
    threads = [threading.Thread(target=w.run) for w in workers]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 10
        while get_job(slow_job.id).status != "running" and time.monotonic() < deadline:
            time.sleep(0.01)
        django_delayq.pause(Q)
        jobs = [t.record.schedule(tag, str(i)) for i in range(60)]
        time.sleep(10)
        runs = t.runs_client()
        assert runs.lrange(paused_runs, 0, -1) == []  # nothing claimed
        assert runs.lrange(slow_runs, 0, -1) == [b"done"]  # finished and acked
        assert get_job(slow_job.id) is None
        assert all(get_job(j.id).status == "pending" for j in jobs)
        assert real_store.counts(Q, real_store.server_time())["running"] == 0
        django_delayq.resume(Q)
        deadline = time.monotonic() + 20
        while runs.llen(paused_runs) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        done = sorted(int(v) for v in runs.lrange(paused_runs, 0, -1))
        assert done == list(range(60))  # each once
    finally:
        t.runs_client().delete(paused_runs, slow_runs)
        for worker in workers:
            worker.request_stop()
        for thread in threads:
            thread.join(15)
