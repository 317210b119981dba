"""``@task(timeout=...)``: a worker in process, on fakeredis and on the real server. An attempt
past its timeout fails with a TimeoutError and is retried like any failure, a new runner
thread takes the hung one's place, and what the hung thread returns later is discarded."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid

import pytest

from django_delayq import get_job, signals, task
from django_delayq.scheduling.registry import Task, unregister
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.supervised import Supervised
from tests.test_worker import Recorder, run_burst
from tests.testapp import tasks as t


def wait_for(condition, seconds: float = 20.0) -> None:
    """Wait for ``condition``; its timeout only guards against a hang (what the tests wait for takes
    milliseconds to a second), so it is many times that, for a loaded machine."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


@pytest.fixture
def gate_name():
    """A gate for the hanging tasks, opened at the end so no thread is left waiting."""
    name = f"timeout-{uuid.uuid4().hex}"
    yield name
    t.gate(name).set()


def test_an_attempt_past_its_timeout_fails_and_a_new_runner_retries_it(store, gate_name, caplog):
    """concurrency 1: the retry can only run on the thread that replaced the hung one. When
    the hung thread returns at last, its result is discarded: no signal, nothing sent."""
    with Recorder(signals.job_failed, signals.job_succeeded) as rec:
        job = t.hangs_first.schedule(gate_name)
        worker = run_burst(concurrency=1)
        assert t.CALLS == [("hangs_first", 1), ("hangs_first", 2)]
        (failed,) = rec.of(signals.job_failed)
        exc = failed["exception"]
        assert type(exc) is TimeoutError and failed["will_retry"] is True
        assert "tests.testapp.tasks.hangs_first" in str(exc) and "0.2 s" in str(exc)
        assert "Stack of the runner thread at the timeout" in failed["traceback"]
        assert "gate(name).wait(30)" in failed["traceback"]  # where it hung
        (ok,) = rec.of(signals.job_succeeded)
        assert ok["job"].attempts == 2 and ok["result"] == 2
        assert get_job(job.id) is None
        assert worker.parts.runners.replaced == 1 and worker.parts.runners.hung == 1
        assert (worker.processed, worker.failed) == (1, 1)
        with caplog.at_level(logging.WARNING, "django_delayq.worker"):
            t.gate(gate_name).set()
            wait_for(lambda: worker.parts.runners.hung == 0)
        assert len(rec.of(signals.job_succeeded)) == 1  # the late return sent nothing
        assert (worker.processed, worker.failed) == (1, 1)
        assert "its result is discarded" in caplog.text


def test_timeouts_are_retried_then_dead_lettered(store, gate_name, caplog):
    """Every attempt hangs: max_retries=1, so two TimeoutErrors and the dead-letter set. An
    unsupervised worker with as many hung threads as runners says to run --processes."""
    with Recorder(signals.job_failed, signals.job_dead) as rec:
        job = t.always_hangs.schedule(gate_name)
        with caplog.at_level(logging.ERROR, "django_delayq.worker"):
            worker = run_burst(concurrency=1)
    assert [f["will_retry"] for f in rec.of(signals.job_failed)] == [True, False]
    (dead,) = rec.of(signals.job_dead)
    assert dead["job"].id == job.id and "builtins.TimeoutError" in dead["error"]
    stored = get_job(job.id)
    assert stored.status == "dead" and stored.attempts == 2
    assert [e["type"] for e in stored.errors] == ["builtins.TimeoutError"] * 2
    assert "ran past its timeout of 0.2 s" in stored.errors[-1]["message"]
    assert worker.parts.runners.replaced == 2
    assert "run delayq_worker with --processes" in caplog.text


def test_a_task_within_its_timeout_is_unaffected(store):
    with Recorder(signals.job_failed, signals.job_succeeded) as rec:
        jobs = [t.within_timeout.schedule(i) for i in range(5)]
        worker = run_burst(concurrency=2)
    assert sorted(x for _, x in t.CALLS) == list(range(5))
    assert rec.of(signals.job_failed) == [] and len(rec.of(signals.job_succeeded)) == 5
    assert all(get_job(j.id) is None for j in jobs)
    assert worker.parts.runners.replaced == 0 and worker.parts.runners.hung == 0


def test_concurrency_is_kept_while_threads_hang(store, gate_name):
    """Two runners, two jobs that hang past their timeout: two new runners take their
    places and run the retries and the other jobs, while both hung threads still wait."""
    with Recorder(signals.job_failed) as rec:
        for i in range(2):
            t.hangs_first.schedule(f"{gate_name}-{i}")
        quick = [t.within_timeout.schedule(i) for i in range(10)]
        worker = run_burst(concurrency=2)
    try:
        assert worker.parts.runners.replaced == 2 and worker.parts.runners.hung == 2
        assert len(rec.of(signals.job_failed)) == 2
        assert sorted(c for c in t.CALLS if c[0] == "hangs_first") == [
            ("hangs_first", 1),
            ("hangs_first", 1),
            ("hangs_first", 2),
            ("hangs_first", 2),
        ]
        assert all(get_job(j.id) is None for j in quick)
        hung = [th for th in threading.enumerate() if th.name.startswith("delayq-runner")]
        assert len(hung) >= 2  # the abandoned ones are still in the task
    finally:
        for i in range(2):
            t.gate(f"{gate_name}-{i}").set()
    wait_for(lambda: worker.parts.runners.hung == 0)


def test_a_supervised_child_with_every_runner_hung_asks_to_be_recycled(store):
    worker = Worker(["default"], concurrency=2, burst=True)
    read, write = os.pipe()
    try:
        child = Supervised(worker, supervisor=1, orders=read)
        worker.parts.runners.on_hung(2)
        assert worker.stopping and child.recycled is not None
        assert "2 runner threads left in tasks past their timeout" in child.recycled
        assert child.exit_code(0) == 75
    finally:
        os.close(read)
        os.close(write)


def test_a_recycling_child_delivers_the_timeout_and_leaves_the_retry_to_the_next(store, gate_name):
    """concurrency 1, supervised: the one runner hangs, so the child asks to be recycled
    before the TimeoutError can be delivered. Its retry is due at once, yet this process
    never claims it (the retry belongs in the new process), and it stops only after the
    failure is delivered: the job is pending with one TimeoutError, not left to a lease
    that expires (which would count a LeaseLost attempt)."""
    job = t.hangs_first.schedule(gate_name)
    worker = Worker(["default"], concurrency=1, burst=True)
    read, write = os.pipe()
    try:
        child = Supervised(worker, supervisor=1, orders=read)
        asks = worker.parts.runners.on_hung

        def slow_to_ask(threads: int) -> None:
            # Widen the window: wait up to 1 s for the retry to start here before asking.
            deadline = time.monotonic() + 1.0
            while len(t.CALLS) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            asks(threads)

        worker.parts.runners.on_hung = slow_to_ask
        fails = worker.parts.runners.executor.timed_out

        def slow_to_fail(attempt):
            time.sleep(0.5)  # the stop, asked already, must wait for this failure
            return fails(attempt)

        worker.parts.runners.executor.timed_out = slow_to_fail
        assert child.exit_code(worker.run()) == 75
        assert t.CALLS == [("hangs_first", 1)]
        left = get_job(job.id)
        assert left.status == "pending" and left.attempts == 1, left
        assert [e["type"] for e in left.errors] == ["builtins.TimeoutError"]
    finally:
        t.gate(gate_name).set()
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("bad", [True, False, 0, -1, math.nan, math.inf, -math.inf, "5", [1]])
def test_timeout_must_be_a_positive_finite_number(bad):
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0") as e:
        Task(lambda: None, name="tests.timeout_bad", timeout=bad)
    assert repr(bad) in str(e.value)


def test_timeout_is_kept_as_seconds():
    assert Task(lambda: None, name="tests.t1", timeout=2).timeout == 2.0
    assert Task(lambda: None, name="tests.t2", timeout=0.5).timeout == 0.5
    assert Task(lambda: None, name="tests.t3").timeout is None
    try:
        assert task(name="tests.t4", timeout=3)(lambda: None).timeout == 3.0
    finally:
        unregister("tests.t4")


def test_an_async_task_is_cancelled_at_its_timeout(store):
    """No thread is abandoned: the task is cancelled on its event loop, and the runner
    reports the TimeoutError itself."""
    with Recorder(signals.job_failed, signals.job_dead) as rec:
        job = t.async_hangs.schedule("x")
        started = time.monotonic()
        worker = run_burst(concurrency=1)
    assert time.monotonic() - started < 20  # not the task's 30 s sleep, twice
    assert t.CALLS == [("async_hangs", "x")] * 2
    failed = rec.of(signals.job_failed)
    assert [f["will_retry"] for f in failed] == [True, False]
    assert all(type(f["exception"]) is TimeoutError for f in failed)
    message = str(failed[0]["exception"])
    assert "tests.testapp.tasks.async_hangs ran past its timeout of 0.2 s" in message
    assert "cancelled" in message
    assert get_job(job.id).status == "dead"
    assert worker.parts.runners.replaced == 0 and worker.parts.runners.hung == 0


def test_an_async_task_that_blocks_its_loop_is_abandoned_like_a_sync_one(store, gate_name):
    with Recorder(signals.job_failed) as rec:
        job = t.async_blocks.schedule(gate_name)
        worker = run_burst(concurrency=1)
    (failed,) = rec.of(signals.job_failed)
    assert type(failed["exception"]) is TimeoutError and not failed["will_retry"]
    assert "its thread was left to finish" in str(failed["exception"])
    assert get_job(job.id).status == "dead"
    assert worker.parts.runners.replaced == 1
    t.gate(gate_name).set()
    wait_for(lambda: worker.parts.runners.hung == 0)


def test_the_store_refuses_the_timed_out_attempts_lease_token(store, gate_name):
    """Once its timeout is recorded, the abandoned attempt's token holds nothing: an ack
    sent with it (which the worker never sends: the late result is discarded) changes
    nothing in Redis."""
    worker = Worker(["default"], concurrency=1, burst=True)
    timed_out = []
    fail_it = worker.parts.executor.timed_out

    def spy(attempt):
        timed_out.append(attempt)
        return fail_it(attempt)

    worker.parts.executor.timed_out = spy
    job = t.always_hangs.schedule(gate_name)
    assert worker.run() == 0
    first, second = timed_out
    assert first.token != second.token and get_job(job.id).status == "dead"
    acked = store.ack("default", [(a.id, a.token, a.info) for a in timed_out])
    assert acked == [-1, -1]  # ack.lua: no longer running under that token, nothing changed
    assert get_job(job.id).status == "dead" and get_job(job.id).attempts == 2
    assert store.client.zscore(store.key("default", "dead"), job.id) is not None


def test_the_watchdog_thread_ends_with_its_worker(store):
    t.within_timeout.schedule(1)
    run_burst()
    wait_for(lambda: not any(th.name == "delayq-watchdog" for th in threading.enumerate()))
