"""``async def`` tasks on the worker's event loop (``async_concurrency``, worker/aio.py), in
process, on fakeredis and on the real server."""

from __future__ import annotations

import threading
import time
import uuid
from unittest import mock

import pytest
from django.core.management import CommandError, call_command

from django_delayq import get_job, schedule_many, signals
from django_delayq.conf import delayq_settings
from django_delayq.worker import aio
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.execution import Attempt
from django_delayq.worker.holdings import Holdings, Load
from django_delayq.worker.prefetch import SHARE_BOUND, Prefetch
from tests.test_worker import Recorder
from tests.testapp import tasks as t


def run_burst(**kwargs) -> Worker:
    worker = Worker(kwargs.pop("queues", ["default"]), burst=True, **kwargs)
    assert worker.run() == 0
    return worker


def wait_for(condition, seconds: float = 30.0) -> None:
    """Wait for ``condition``; its timeout only guards against a hang (what the tests wait for takes
    milliseconds to a second), so it is many times that, for a loaded machine."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def started_worker(**kwargs) -> tuple[Worker, threading.Thread, list[int]]:
    worker = Worker(["default"], **kwargs)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    thread.start()
    return worker, thread, codes


@pytest.fixture
def name():
    name = f"aio-{uuid.uuid4().hex}"
    yield name
    t.gate(name).set()


def left_in(store, queue="default") -> tuple[int, int]:
    """(pending, running) jobs of the queue."""
    return (
        store.client.zcard(store.key(queue, "pending")),
        store.client.zcard(store.key(queue, "running")),
    )


# -- many attempts in flight on one thread ------------------------------------------------


def test_hundreds_of_async_attempts_are_in_flight_at_once(store, name):
    """300 attempts wait for each other: only an event loop holding all of them at once lets
    them see 300 in flight; 2 runner threads could hold 2 (one per thread before)."""
    schedule_many(t.async_together, [(name, 300)] * 300)
    with Recorder(signals.job_succeeded) as rec:
        worker = run_burst(concurrency=2, async_concurrency=300)
    assert t.IN_FLIGHT[name][1] == 300
    assert worker.parts.loop.in_flight_max == 300
    assert len(rec.of(signals.job_succeeded)) == 300 and worker.processed == 300
    assert {r["result"] for r in rec.of(signals.job_succeeded)} == {300}
    assert left_in(store) == (0, 0)


def test_without_a_loop_async_tasks_still_run_on_the_runner_threads(store, name):
    schedule_many(t.async_together, [(name, 3, 0.5)] * 3)
    worker = run_burst(concurrency=2)
    assert t.IN_FLIGHT[name][1] <= 2 and worker.processed == 3
    assert worker.parts.loop.in_flight_max == 0


def test_sync_and_async_jobs_in_one_queue_all_run_once(store, name):
    calls = [(name, 40)] * 40
    schedule_many(t.async_together, calls)
    schedule_many(t.remember, [(i,) for i in range(30)])
    worker = run_burst(concurrency=2, async_concurrency=50)
    assert sorted(args[0] for args, _ in t.CALLS if isinstance(args, tuple)) == list(range(30))
    assert t.CALLS.count(("async_together", name)) == 40
    assert t.IN_FLIGHT[name][1] == 40 and worker.processed == 70
    assert left_in(store) == (0, 0)


def test_async_jobs_queued_behind_a_busy_thread_are_not_starved(store, name):
    """The only runner thread is held by a sync job; the 20 async jobs due after it still
    get claimed (the claim's share for the loop) and run together meanwhile."""
    t.wait_for_gate.schedule(name)
    schedule_many(t.async_together, [(name, 20)] * 20)
    worker, thread, codes = started_worker(concurrency=1, async_concurrency=20)
    wait_for(lambda: t.CALLS.count(("async_together", name)) == 20)
    assert t.IN_FLIGHT[name][1] == 20
    assert worker.parts.holdings.busy() == 1  # the sync job still holds the thread
    t.gate(name).set()
    wait_for(lambda: left_in(store) == (0, 0))
    worker.request_stop()
    thread.join(30)
    assert codes == [0] and worker.processed == 21


def test_a_stalled_pool_hands_back_only_its_own_waiting_jobs():
    holdings = Holdings(1, 2, classify=lambda a: a.id.startswith("a"))
    attempts = [Attempt("q", i, "tok", b"", 0) for i in ("s1", "s2", "a1", "a2", "a3")]
    assert holdings.add(attempts) == 3
    stopped = threading.Event()
    assert holdings.next_attempt(stopped).id == "s1"
    assert [a.id for a in holdings.next_async()] == ["a1", "a2"]
    later = time.monotonic() + 1
    assert holdings.stalled(later) == (True, True)  # s2 and a3 wait behind busy pools
    assert [a.id for a in holdings.take_waiting(threads=False, loop=True)] == ["a3"]
    assert holdings.stalled(later) == (True, False)
    assert {a.id for a in holdings.holding()} == {"s1", "s2", "a1", "a2"}


# -- the same behaviour as a sync task -----------------------------------------------------


def test_failing_async_task_retries_dead_letters_and_sends_the_signals(store):
    seen_threads = []

    def where(sender, **kwargs):
        seen_threads.append(threading.current_thread().name)

    signals.job_started.connect(where, weak=False)
    try:
        with Recorder(signals.job_failed, signals.job_dead, signals.job_started) as rec:
            job = t.async_always_fails.schedule("x")
            run_burst(async_concurrency=10)
    finally:
        signals.job_started.disconnect(where)
    assert [("async_always_fails", n) for n in (1, 2, 3)] == t.CALLS  # current_job() works
    failed = rec.of(signals.job_failed)
    assert [f["will_retry"] for f in failed] == [True, True, False]
    assert all(type(f["exception"]) is ValueError for f in failed)
    assert "async nope x" in failed[0]["traceback"]
    assert len(rec.of(signals.job_started)) == 3
    (dead,) = rec.of(signals.job_dead)
    assert dead["job"].id == job.id and "ValueError: async nope x" in dead["error"]
    stored = get_job(job.id)
    assert stored.status == "dead" and stored.attempts == 3 and len(stored.errors) == 3
    # Receivers (which may use the ORM) are called in a thread, never on the loop.
    assert len(seen_threads) == 3 and "delayq-loop" not in seen_threads


def test_an_async_task_on_the_loop_is_cancelled_at_its_timeout(store):
    with Recorder(signals.job_failed) as rec:
        job = t.async_hangs.schedule("x")
        worker = run_burst(async_concurrency=5)
    assert t.CALLS == [("async_hangs", "x")] * 2
    failed = rec.of(signals.job_failed)
    assert [f["will_retry"] for f in failed] == [True, False]
    assert all(type(f["exception"]) is TimeoutError for f in failed)
    assert "ran past its timeout of 0.2 s; it was cancelled" in str(failed[0]["exception"])
    assert get_job(job.id).status == "dead"
    assert worker.parts.loop.in_flight_max == 1
    assert worker.parts.runners.replaced == 0 and worker.parts.runners.hung == 0


def test_a_finished_attempt_is_not_counted_in_flight_when_its_slot_is_filled(store):
    """The slot an attempt frees is filled in the next turn of the loop, before the asyncio
    done callbacks of its task run: the attempt must already be out of the in-flight set
    then (it once was not, so in_flight_max counted a finished attempt as running)."""
    seen_done = []
    fill = aio.Loop._fill

    def spy(loop):
        seen_done.extend(task for task in loop._tasks if task.done())
        fill(loop)

    with mock.patch.object(aio.Loop, "_fill", spy):
        schedule_many(t.async_double, [(n,) for n in range(20)])
        worker = run_burst(async_concurrency=1)
    assert worker.processed == 20
    assert seen_done == []
    assert worker.parts.loop.in_flight_max == 1


def test_an_async_task_that_blocks_the_loop_is_failed_by_the_watchdog(store, name):
    with Recorder(signals.job_failed) as rec:
        job = t.async_blocks.schedule(name)
        worker = run_burst(async_concurrency=5)
    (failed,) = rec.of(signals.job_failed)
    assert type(failed["exception"]) is TimeoutError and not failed["will_retry"]
    assert "blocked the worker's event loop" in str(failed["exception"])
    assert get_job(job.id).status == "dead"
    assert worker.parts.runners.replaced == 0  # no runner thread stands in for the loop
    t.gate(name).set()
    wait_for(lambda: worker.parts.runners.hung == 0)


def test_close_old_connections_runs_in_the_thread_of_the_attempts_sync_calls(store):
    """As Django does per async request: an attempt's thread-sensitive sync_to_async calls
    (the async ORM's) run in a thread of that attempt, and close_old_connections() runs
    there when it ends; an attempt that made no such call has nothing to close."""
    closed_in = []
    with mock.patch.object(
        aio, "close_old_connections", lambda: closed_in.append(threading.current_thread().name)
    ):
        t.async_sync_call.schedule(1)
        t.async_sync_call.schedule(2)
        t.async_double.schedule(3)
        worker = run_burst(async_concurrency=10)
    assert worker.processed == 3
    threads = {c[2] for c in t.CALLS if c[0] == "async_sync_call"}
    assert len(threads) == 2 and "delayq-loop" not in threads  # one thread per attempt
    assert sorted(closed_in) == sorted(threads)


# -- stops ---------------------------------------------------------------------------------


def test_graceful_stop_lets_async_attempts_in_flight_finish_and_delivers_them(store, name):
    jobs = schedule_many(t.async_waits_for_gate, [(name,)] * 40)
    with Recorder(signals.job_succeeded) as rec:
        worker, thread, codes = started_worker(async_concurrency=50)
        wait_for(lambda: t.CALLS.count(("async_waits_for_gate", name)) == 40)
        worker.request_stop()
        time.sleep(0.2)
        assert thread.is_alive()  # waiting for the attempts in flight
        t.gate(name).set()
        thread.join(30)
    assert codes == [0]
    assert len(rec.of(signals.job_succeeded)) == 40
    assert t.CALLS.count(("async_waits_for_gate", name)) == 40  # none ran twice
    assert all(get_job(j.id) is None for j in jobs) and left_in(store) == (0, 0)


def test_forced_stop_hands_async_attempts_back_and_they_run_again(store, name):
    jobs = schedule_many(t.async_waits_for_gate, [(name,)] * 40)
    with Recorder(signals.job_succeeded, signals.job_released) as rec:
        worker, thread, codes = started_worker(async_concurrency=50)
        wait_for(lambda: t.CALLS.count(("async_waits_for_gate", name)) == 40)
        worker.request_stop(force=True)
        thread.join(30)
        assert codes == [1] and not rec.of(signals.job_succeeded)
        assert len(rec.of(signals.job_released)) == 40
        assert left_in(store) == (40, 0)
        assert {get_job(j.id).attempts for j in jobs} == {0}  # handed back: not counted
        t.gate(name).set()
        run_burst(async_concurrency=50)
    assert len(rec.of(signals.job_succeeded)) == 40
    assert {r["job"].id for r in rec.of(signals.job_succeeded)} == {j.id for j in jobs}
    assert left_in(store) == (0, 0)


# -- leases --------------------------------------------------------------------------------


def test_the_leases_of_long_async_attempts_are_extended(store, name):
    """A lease of 0.6 s, attempts of about 2 s: the heartbeat extends them, so the recovery
    (every 0.3 s) never takes them back and each runs once."""
    jobs = schedule_many(t.async_waits_for_gate, [(name,)] * 20)
    # The settings' 60 s lease, shortened for this worker only (a DELAYQ override would
    # replace the test's store).
    # A real-time margin: the heartbeat comes every lease / 3 (0.2 s), so its thread may be
    # held up 0.4 s before a lease runs out (held beside two busy loops); the 2 s sleep
    # below is a lower bound (the attempts outlive three leases).
    with mock.patch.object(delayq_settings, "VISIBILITY_TIMEOUT", 0.6):
        worker, thread, codes = started_worker(async_concurrency=30)
    assert worker.lease == 0.6 and worker.parts.heartbeat.lease == 0.6
    running = store.key("default", "running")
    wait_for(lambda: store.client.zcard(running) == 20)
    first = dict(store.client.zrange(running, 0, -1, withscores=True))
    time.sleep(2.0)
    later = dict(store.client.zrange(running, 0, -1, withscores=True))
    assert set(later) == set(first) and all(later[k] > first[k] for k in first)
    assert not any(a.lease_lost for a in worker.holding())
    t.gate(name).set()
    wait_for(lambda: left_in(store) == (0, 0))
    worker.request_stop()
    thread.join(30)
    assert codes == [0] and worker.parts.heartbeat.beats >= 3
    assert t.CALLS.count(("async_waits_for_gate", name)) == 20  # none recovered and rerun
    assert all(get_job(j.id) is None for j in jobs)


# -- the claim's limit for two pools (prefetch.py) -----------------------------------------


def _prefetch(concurrency: int, loop: int, share: float) -> Prefetch:
    prefetch = Prefetch(Holdings(concurrency, loop, classify=lambda a: True), lambda: 0.5)
    prefetch.share = share
    return prefetch


def test_the_claim_fills_each_pool_by_the_share_of_loop_jobs():
    idle = Load(busy=0, waiting=False, results=False, failures=False)
    # All sync lately: about the free runner threads, not the loop's 200 slots.
    assert _prefetch(8, 200, SHARE_BOUND).claim_limit(0, idle) == 8
    # All async lately: the loop's free slots, not 200 plus the threads.
    assert _prefetch(8, 200, 1 - SHARE_BOUND).claim_limit(0, idle) == 200
    half = _prefetch(8, 200, 0.5)
    assert half.claim_limit(0, idle) == 100  # 16 by the threads, at least 100 for the loop
    # Threads full, nothing waiting for them: the loop's share still claims (no starvation).
    busy = Load(busy=8, waiting=False, results=False, failures=False, async_busy=0)
    assert _prefetch(8, 200, 0.5).claim_limit(0, busy) == 100
    # ... but not while sync jobs already wait for a thread (they would only pile up).
    piled = Load(8, True, False, False, async_busy=0, waiting_threads=True)
    assert _prefetch(8, 200, 0.5).claim_limit(0, piled) == 16 - 16  # min(0/0.5, 400) = 0
    # The loop full, nothing waiting for it: the threads still claim.
    full = Load(busy=0, waiting=False, results=False, failures=False, async_busy=200)
    assert _prefetch(8, 200, 1 - SHARE_BOUND).claim_limit(0, full) == 1


def test_the_share_follows_what_claims_bring_and_stays_bounded():
    prefetch = _prefetch(1, 10, 0.5)
    prefetch.claimed(10, 10)
    assert prefetch.share == 0.75
    for _ in range(20):
        prefetch.claimed(4, 0)
    assert prefetch.share == SHARE_BOUND


def test_a_worker_without_async_tasks_claims_as_before():
    prefetch = Prefetch(Holdings(4, 100, classify=lambda a: True), lambda: 0.0)
    idle = Load(busy=0, waiting=False, results=False, failures=False)
    assert prefetch.claim_limit(2, idle) == 6 and prefetch.share == 0.0


def test_the_first_claim_guesses_the_share_from_the_registered_tasks():
    """1 task in 16 runs on the loop: the first claim of a worker with 1 thread and 200
    loop slots takes 13 jobs (200 / 16), not 100, should they all be sync."""
    prefetch = Prefetch(Holdings(1, 200, classify=lambda a: True), lambda: 1 / 16)
    idle = Load(busy=0, waiting=False, results=False, failures=False)
    assert prefetch.claim_limit(0, idle) == 13 and prefetch.share == 1 / 16


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_async_concurrency_is_checked(fake_store, bad):
    with pytest.raises(ValueError, match=f"async_concurrency must be an int >= 0, got {bad!r}"):
        Worker(["default"], async_concurrency=bad)


def test_the_command_refuses_a_negative_async_concurrency(fake_store):
    with pytest.raises(CommandError, match="--async-concurrency must be 0 or more, got -2"):
        call_command("delayq_worker", "--async-concurrency", "-2", "--burst")


def test_the_command_passes_async_concurrency_to_the_worker(fake_store, monkeypatch):
    from django_delayq.management.commands import delayq_worker as command

    made = {}

    class Fake:
        def __init__(self, queues, **kwargs):
            made.update(kwargs)

    monkeypatch.setattr(command, "Worker", Fake)
    monkeypatch.setattr(command, "_run", lambda worker, child: 0)
    call_command("delayq_worker", "--async-concurrency", "64", "--burst")
    assert made["async_concurrency"] == 64


def test_the_roster_counts_the_loops_slots_in_the_workers_concurrency(store):
    """The Workers tab shows "busy N of M": M counts the threads and the loop's slots."""
    worker = Worker(["default"], concurrency=2, async_concurrency=50, name="aio-roster")
    worker.parts.presence.beat()
    (listed,) = store.roster.live(store.server_time())
    assert listed.name == "aio-roster" and listed.concurrency == 52
