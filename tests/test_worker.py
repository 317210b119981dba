"""The worker, in process (burst mode), on fakeredis and on the real server."""

from __future__ import annotations

import threading
import time
from unittest import mock

import pytest

from django_delayq import get_job, schedule_many, signals, task
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.execution import backoff_delay
from django_delayq.worker.prefetch import PREFETCH_MAX, PREFETCH_WAIT
from tests.conftest import names_unchecked
from tests.testapp import tasks as t


def run_burst(**kwargs) -> Worker:
    worker = Worker(kwargs.pop("queues", ["default"]), burst=True, **kwargs)
    assert worker.run() == 0
    return worker


class Recorder:
    def __init__(self, *sigs):
        self.events = []
        self.sigs = sigs

    def __enter__(self):
        self.receivers = []
        for sig in self.sigs:

            def receiver(sender, _sig=sig, **kwargs):
                self.events.append((_sig, sender, kwargs))

            sig.connect(receiver, weak=False)
            self.receivers.append((sig, receiver))
        return self

    def __exit__(self, *exc):
        for sig, receiver in self.receivers:
            sig.disconnect(receiver)

    def of(self, sig):
        return [kw for s, _, kw in self.events if s is sig]


def test_burst_runs_due_jobs_and_leaves_future_ones(store):
    now = t.remember.schedule(1, x="y")
    later = t.remember.schedule(2, delay=3600)
    worker = run_burst()
    assert t.CALLS == [((1,), {"x": "y"})]
    assert get_job(now.id) is None and get_job(later.id).status == "pending"
    assert worker.processed == 1


def test_a_stopped_worker_leaves_no_claims_entry_behind(store):
    """Each worker remembers its last claim per queue (so a re-sent claim returns the same
    jobs); a worker that stops drops its entries, or the hash would grow by one field per
    worker run forever."""
    t.remember.schedule(1)
    worker = run_burst()
    assert t.CALLS == [((1,), {})]
    claims = store.client.hkeys(store.key("default", "claims"))
    assert claims == [], claims
    assert worker.processed == 1


def test_async_task(store):
    t.async_double.schedule(21)
    run_burst()
    assert t.CALLS == [("async_double", 21)]


def test_failing_job_dead_letters_after_max_retries_plus_one_attempts(store):
    with Recorder(signals.job_failed, signals.job_dead, signals.job_started) as rec:
        job = t.always_fails.schedule("nope")
        run_burst()
    failed = rec.of(signals.job_failed)
    assert [f["job"].attempts for f in failed] == [1, 2, 3]  # max_retries=2
    assert [f["will_retry"] for f in failed] == [True, True, False]
    assert all(isinstance(f["exception"], ValueError) for f in failed)
    assert "raise ValueError(message)" in failed[0]["traceback"]
    assert len(rec.of(signals.job_started)) == 3
    (dead,) = rec.of(signals.job_dead)
    assert dead["job"].id == job.id and "ValueError: nope" in dead["error"]
    stored = get_job(job.id)
    assert stored.status == "dead" and stored.attempts == 3
    assert stored.last_error == "builtins.ValueError: nope"
    assert len(stored.errors) == 3 and "Traceback" in stored.errors[-1]["traceback"]


def test_success_signals(store):
    with Recorder(signals.job_started, signals.job_succeeded) as rec:
        t.add.schedule(2, 3)
        run_burst()
    (ok,) = rec.of(signals.job_succeeded)
    assert ok["result"] == 5 and ok["duration"] >= 0 and ok["job"].attempts == 1
    assert rec.events[0][1] is t.add  # sender is the Task


def test_a_raising_receiver_does_not_break_the_worker(store):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.job_started.connect(broken)
    signals.job_succeeded.connect(broken)
    try:
        job = t.remember.schedule(1)
        run_burst()
    finally:
        signals.job_started.disconnect(broken)
        signals.job_succeeded.disconnect(broken)
    assert t.CALLS == [((1,), {})] and get_job(job.id) is None


def test_corrupt_record_is_dead_lettered_and_the_worker_goes_on(store):
    bad = t.remember.schedule("bad")
    good = t.remember.schedule("good")
    store.client.hset(store.key("default", "jobs"), bad.id, b"\xff not json")
    with Recorder(signals.job_dead) as rec:
        run_burst()
    assert t.CALLS == [(("good",), {})] and get_job(good.id) is None
    dead = get_job(bad.id)
    assert dead.status == "dead" and "CorruptJob" in dead.last_error
    assert rec.of(signals.job_dead)[0]["job"].id == bad.id


def test_unknown_task_is_retried_then_dead_lettered(store):
    from django_delayq import schedule

    with names_unchecked(store):  # as a producer of another code base would schedule it
        job = schedule("tests.testapp.tasks.not_there", max_retries=1)
    run_burst()
    dead = get_job(job.id)
    assert dead.status == "dead" and dead.attempts == 2
    assert "is not registered in this process" in dead.last_error


def test_close_old_connections_around_every_job(store):
    with mock.patch("django_delayq.worker.execution.close_old_connections") as close:
        t.remember.schedule(1)
        t.remember.schedule(2)
        run_burst()
    assert close.call_count == 4


def test_injected_clock_runs_future_jobs_without_sleeping(store):
    job = t.remember.schedule(1, delay=3600)
    clock = lambda: time.time() + 3601  # noqa: E731
    run_burst(clock=clock)
    assert get_job(job.id) is None and t.CALLS == [((1,), {})]


def test_recover_lost_lease(store):
    from django_delayq.exceptions import LeaseLost

    job = t.remember.schedule(1)
    last = t.remember.schedule(2, max_retries=0)
    never_started = t.remember.schedule(3, max_retries=0)
    claim = store.claim("default", 3, lease=0.5, token="ghost~1#1", instance="ghost~1")
    lease_until = claim.now + 0.5
    for started in (job, last):  # their runner had started them when the worker died
        store.call(store.mark_op("default", started.id, lease_until))
    worker = Worker(["default"], burst=True, clock=lambda: time.time() + 1)
    with Recorder(signals.job_failed, signals.job_dead) as rec:
        assert worker.parts.recovery.run_pass() == 3
    recovered = get_job(job.id)
    assert recovered.status == "pending" and "ghost" in recovered.last_error
    refunded = get_job(never_started.id)  # not charged: max_retries=0 and still pending
    assert refunded.status == "pending" and refunded.attempts == 0 and not refunded.errors
    # The lost attempts failed: job_failed for each, job_dead for the one out of retries.
    failed = {kw["job"].id: kw for sig, _, kw in rec.events if sig is signals.job_failed}
    assert failed[job.id]["will_retry"] is True and failed[last.id]["will_retry"] is False
    assert isinstance(failed[job.id]["exception"], LeaseLost)
    assert "ghost" in str(failed[job.id]["exception"])
    assert [kw["job"].id for sig, _, kw in rec.events if sig is signals.job_dead] == [last.id]
    assert never_started.id not in failed
    worker.run()
    assert sorted(t.CALLS) == [((1,), {}), ((3,), {})]


def test_heartbeat_extends_running_leases(store):
    started, release = threading.Event(), threading.Event()

    @task(name="tests.blocking")
    def blocking():
        started.set()
        release.wait(10)

    blocking.schedule()
    worker = Worker(["default"], burst=True)
    runner = threading.Thread(target=worker.run)
    runner.start()
    assert started.wait(10)
    key = store.key("default", "running")
    ((job_id, before),) = store.client.zrange(key, 0, -1, withscores=True)
    time.sleep(0.05)
    worker.parts.heartbeat.beat()
    after = store.client.zscore(key, job_id)
    release.set()
    runner.join(10)
    assert after > before


def test_many_threads_run_each_job_once(store):
    for i in range(60):
        t.remember.schedule(i)
    run_burst(concurrency=8)
    assert sorted(args[0] for args, _ in t.CALLS) == list(range(60))


def test_queues_and_rotation(store):
    t.send_mail.schedule("a@b.c")
    t.remember.schedule(1)
    run_burst(queues=["default", "emails"])
    assert ("send_mail", "a@b.c") in t.CALLS and ((1,), {}) in t.CALLS


def test_graceful_stop_lets_running_jobs_finish(store):
    started = threading.Event()

    @task(name="tests.slow")
    def slow():
        started.set()
        time.sleep(0.3)
        t.CALLS.append("slow done")

    job = slow.schedule()
    worker = Worker(["default"])
    codes = []
    runner = threading.Thread(target=lambda: codes.append(worker.run()))
    runner.start()
    assert started.wait(10)
    worker.request_stop()
    runner.join(10)
    assert codes == [0] and t.CALLS == ["slow done"] and get_job(job.id) is None


def test_stop_works_while_redis_is_unreachable(fake_store):
    import redis as redis_py

    from django_delayq.storage.store import Store

    down = Store(redis_py.Redis(port=1, socket_connect_timeout=0.1), prefix=fake_store.prefix)
    worker = Worker(["default"], store=down, shutdown_timeout=30)
    codes = []
    runner = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    runner.start()
    time.sleep(0.3)  # the dispatcher is now backing off from failed connections
    worker.request_stop()
    runner.join(5)
    assert not runner.is_alive() and codes == [0]


def test_forced_stop_delivers_finished_results_and_hands_back_only_the_others(fake_store):
    from django_delayq.worker.execution import FINISHED, STARTED, Attempt, Outcome

    finished = t.remember.schedule("finished")
    running = t.remember.schedule("running")
    claim = fake_store.claim("default", 2, lease=30, token="w~1#1", instance="w~1")
    worker = Worker(["default"])
    attempts = [Attempt("default", c.id, "w~1#1", c.record, 1) for c in claim.jobs]
    worker.parts.holdings.add(attempts)  # held, as after the claim
    for attempt in attempts:
        attempt.state = FINISHED if attempt.id == finished.id else STARTED
    worker.parts.holdings.return_results(
        [Outcome(attempts[0] if attempts[0].id == finished.id else attempts[1], ok=True)]
    )
    with mock.patch.object(fake_store, "release", wraps=fake_store.release) as release:
        assert worker._stop_now() == 1
    release.assert_called_once()
    assert release.call_args.args[1] == [(running.id, "w~1#1")]
    assert get_job(finished.id) is None  # acknowledged, never run again
    assert get_job(running.id).status == "pending"


def test_forced_stop_hands_unfinished_jobs_back(store):
    started, release = threading.Event(), threading.Event()

    @task(name="tests.stuck")
    def stuck():
        started.set()
        release.wait(10)

    job = stuck.schedule()
    worker = Worker(["default"], shutdown_timeout=30)
    codes = []
    runner = threading.Thread(target=lambda: codes.append(worker.run()))
    runner.start()
    assert started.wait(10)
    worker.request_stop()
    worker.request_stop()  # a second signal: stop now
    runner.join(10)
    release.set()
    assert codes == [1]
    back = get_job(job.id)
    assert back.status == "pending" and back.attempts == 0


def test_idle_worker_wakes_up_for_a_new_job(real_store):
    worker = Worker(["default"])
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        time.sleep(0.2)  # asleep in BLPOP now (MAX_SLEEP is 5 s)
        t.remember.schedule("wake")
        # Woken, not run when its BLPOP ran out (MAX_SLEEP 5 s, cut to 4.5 s below the read
        # timeout): the wake takes milliseconds, and 2 s still tells the two apart.
        deadline = time.monotonic() + 2
        while not t.CALLS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert t.CALLS == [(("wake",), {})]
    finally:
        worker.request_stop()
        runner.join(10)


def test_backoff_delay():
    assert backoff_delay(1, 0, 100) == 0
    assert 10 <= backoff_delay(1, 10, 1000) <= 12.5
    assert 40 <= backoff_delay(3, 10, 1000) <= 50
    assert 100 <= backoff_delay(30, 10, 100) <= 125


def test_worker_option_errors(store):
    with pytest.raises(ValueError, match="concurrency"):
        Worker(["default"], concurrency=0)
    with pytest.raises(ValueError, match="invalid queue name"):
        Worker(["no spaces"])


def test_short_jobs_are_prefetched_and_each_runs_once(store):
    for i in range(80):
        t.remember.schedule(i)
    worker = run_burst()
    assert sorted(args[0] for args, _ in t.CALLS) == list(range(80))
    assert worker.parts.prefetch.size > 0  # claimed more than one job per round trip
    assert store.client.zcard(store.key("default", "running")) == 0


def test_no_prefetch_for_jobs_slower_than_the_prefetch_wait(store):
    worker = Worker(["default"])
    worker.parts.prefetch.job_time = 0.5
    assert worker.parts.prefetch.wanted() == 0
    worker.parts.prefetch.job_time = 0.0001
    assert worker.parts.prefetch.wanted() == PREFETCH_MAX
    worker.parts.prefetch.job_time = PREFETCH_WAIT / 4  # four such jobs fit in the wait
    assert worker.parts.prefetch.wanted() == 4


def _blocked_worker_with_waiting_jobs(store):
    """A worker whose only runner is stuck on a job, with 3 prefetched jobs waiting."""
    started, release = threading.Event(), threading.Event()

    @task(name="tests.blocker")
    def blocker():
        started.set()
        release.wait(10)

    blocker.schedule()
    waiting = [t.remember.schedule(i) for i in range(3)]
    worker = Worker(["default"])
    worker.parts.prefetch.job_time = (
        0.0001  # as if jobs had been fast: prefetch from the first claim
    )
    runner = threading.Thread(target=worker.run)
    runner.start()
    assert started.wait(10)
    return worker, runner, release, waiting


def test_stop_hands_waiting_prefetched_jobs_back_without_counting_an_attempt(store):
    worker, runner, release, waiting = _blocked_worker_with_waiting_jobs(store)
    worker.request_stop()
    deadline = time.monotonic() + 5
    while get_job(waiting[0].id).status != "pending" and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    runner.join(10)
    assert not runner.is_alive() and t.CALLS == []
    for job in waiting:
        back = get_job(job.id)
        assert back.status == "pending" and back.attempts == 0


def test_jobs_waiting_behind_a_stalled_runner_are_handed_back(store):
    worker, runner, release, waiting = _blocked_worker_with_waiting_jobs(store)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if all(get_job(j.id).status == "pending" for j in waiting):
                break
            time.sleep(0.02)
        assert [get_job(j.id).status for j in waiting] == ["pending"] * 3
        release.set()
        deadline = time.monotonic() + 10
        while len(t.CALLS) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(args[0] for args, _ in t.CALLS) == [0, 1, 2]
    finally:
        release.set()
        worker.request_stop()
        runner.join(10)


def test_workers_sharing_a_name_never_share_a_lease_token(fake_store):
    first, second = Worker(["default"], name="web-1"), Worker(["default"], name="web-1")
    assert first.instance != second.instance
    assert first.instance.startswith("web-1~")


def test_a_runner_marks_its_job_started(store):
    """The lease of a running job gets the started score (>= 0) from the worker's start mark,
    so a job that kills its worker is charged its attempt (and one never started is not).
    The mark is written before the job runs and reaches Redis within a round trip, or when
    the process dies (the kernel sends what the socket holds): this waits for it."""
    started, release = threading.Event(), threading.Event()

    @task(name="tests.waits_to_be_marked")
    def waits_to_be_marked():
        started.set()
        release.wait(10)

    job = waits_to_be_marked.schedule()
    worker = Worker(["default"], burst=True)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert started.wait(10)
        running = store.key("default", "running")
        deadline = time.monotonic() + 10
        while (store.client.zscore(running, job.id) or -1) < 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.client.zscore(running, job.id) >= 0
    finally:
        release.set()
        runner.join(10)


def test_no_loop_spins_while_prefetched_jobs_wait(real_store):
    """A drain of short jobs by a normal worker (its waker thread on): prefetched jobs
    wait behind the runner the whole time, and no thread may loop per finished job. The
    old waker woke on an event every finished job set, then found no idle runner and
    looped again: thousands of turns for a few hundred jobs. Counted, not timed."""
    jobs = 600
    schedule_many(t.remember, [(i,) for i in range(jobs)])
    worker = Worker(["default"], concurrency=1)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while len(t.CALLS) < jobs and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.request_stop()
        runner.join(10)
    assert len(t.CALLS) == jobs
    (waker,) = worker.wakers
    # BLPOPs only while the runner is idle: between batches (about jobs / PREFETCH_MAX
    # of them, more if a slow machine shrinks the prefetch) and at the end; a loop per
    # job would send at least `jobs`.
    assert waker.waits < jobs / 4, waker.waits
    # One turn per batch of prefetched jobs and a few more (idle waits, the stop), never
    # one per job.
    assert worker.loops < jobs / 4, (worker.loops, worker.exchanges)
