"""Issue 10, items 1 and 5-7: a forced stop with finished jobs not yet acknowledged, a
recovery backlog next to a live worker's long job, SIGKILL while jobs are prefetched, and
max_retries for a job scheduled by name from a process that does not know its task.
Real redis-server and worker processes; behaviour is observed from outside (runs recorded
by the tasks, the queue's sets, get_job(), exit codes and logs)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from django_delayq import get_job, schedule, schedule_many, task
from django_delayq.scheduling import registry
from django_delayq.scheduling.registry import Task
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, carries_acks, delay
from tests.reliability.harness import held_by, installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import DIED, die, explode, held, mark, slow

pytestmark = pytest.mark.reliability

EMPTY = {"pending": 0, "running": 0, "dead": 0, "records": 0}


def settled(store: Store, queue: str = "default") -> bool:
    """Nothing pending or running in ``queue``."""
    state = sizes(store, queue)
    return state["pending"] == 0 and state["running"] == 0


def test_forced_stop_acknowledges_finished_jobs_and_exits_1(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 1. A worker gets SIGTERM, then a second SIGTERM while jobs have finished but
    their acknowledgement is not sent yet (the reply of its acknowledging round trip is
    held by the proxy, so the jobs finishing meanwhile wait for the next one). Wanted:
    every finished job acknowledged before exit, exit code 1 (the docs). Today the finished
    jobs stay in progress and run again after their lease; the exit code is 0."""
    visibility = 2
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    forced: list[float] = []  # when the worker logged the second SIGTERM

    def forced_a_while_ago() -> bool:  # time for its handler thread to call request_stop
        return bool(forced) and time.monotonic() > forced[0] + 0.5

    with FaultProxy(data.port) as proxy, installed(store):
        slow_ack = proxy.add_rule(carries_acks, delay(60, until=forced_a_while_ago))
        # "first" finishes at once, its ack goes out and its reply is held; the three
        # others finish while it is held.
        calls = [{"args": [tag, "first", 0.05]}] + [{"args": [tag, str(i), 2.0]} for i in range(3)]
        schedule_many(slow, calls)
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility)
        victim = workers.start(env, "--concurrency", "4", name="victim")
        wait_until(
            lambda: len(runs(runs_client, tag)) == 4 and proxy.holding == 1,
            30,
            "the 4 jobs to finish while the first acknowledgement's reply is held",
        )
        # Redis ran the held round trip (it acknowledged "first"): the others are finished
        # and not acknowledged.
        unacked = sizes(store)["records"]
        victim.signal(signal.SIGTERM)
        wait_until(lambda: "finishing running jobs" in victim.output(), 20, "the first SIGTERM")
        # The second SIGTERM, sent again if its handler ran before the first one's
        # request_stop (the log then says "finishing" twice, not "stopping now").
        wait_until(
            lambda: "stopping now" in victim.output() or victim.signal(signal.SIGTERM),
            20,
            "the second SIGTERM",
            step=1.0,
        )
        forced.append(time.monotonic())
        code = victim.wait(30)
        left = sizes(store)
        if not settled(store):  # what becomes of them: a second worker recovers them
            rescuer = workers.start(worker_env(data.url, runs_server.url, prefix), name="rescuer")
            wait_until(lambda: settled(store), 30, "the jobs left in progress to settle")
            rescuer.signal(signal.SIGTERM)
            rescuer.wait(30)
    done = Counter(runs(runs_client, tag))
    again = {value: n for value, n in done.items() if n > 1}
    report(
        scenario="14. forced stop (second SIGTERM)",
        jobs=len(calls),
        lost=len(calls) - len(done),
        duplicates=sum(n - 1 for n in done.values()),
        finished_unacked_at_stop=unacked,
        exit_code=code,
    )
    assert slow_ack.applied == 1 and unacked >= 1, (slow_ack.applied, unacked)  # it happened
    assert left == EMPTY and not again, (
        f"forced stop with {unacked} finished jobs not acknowledged: at exit {left}; "
        f"jobs run again: {again}; exit code {code}"
    )
    assert code == 1, f"exit code {code} after a forced stop (the docs: 1)\n{victim.output()}"
    assert sizes(store) == EMPTY


def test_recovery_backlog_does_not_starve_a_live_workers_heartbeats(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 5. While a live worker runs a long job, 20,000 leases of a dead worker expire
    and the workers (the live one and a peer) recover them. Wanted: the live job keeps its
    lease and runs once (today heartbeats share the thread that recovers, at one round trip
    per recovered job: the long job's lease expires meanwhile, recovery reaches it after
    the backlog, and the peer runs it again). The job runs until the backlog is recovered
    (it waits for the test's signal), so it is still running whenever recovery reaches it.
    """
    visibility, backlog = 2, 20_000
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility)
    with installed(store):
        live = workers.start(env, "-v", "0", name="live")
        job = held.schedule(tag, "long", 90)
        wait_until(lambda: runs(runs_client, f"{tag}:started"), 30, "the long job to start")
        # The leases of a worker that claimed and started 20,000 jobs and died, built with
        # the store's claim() (lease 0.5 s, a token nobody holds) and start marks: no worker
        # process holds that many in a test's time. The live worker (concurrency 1) is busy,
        # so it claims none of them first; max_retries=0 dead-letters them when recovered
        # instead of running them (a lease never started would be handed back to pending).
        schedule_many(mark, [(f"{tag}:backlog", str(i)) for i in range(backlog)], max_retries=0)
        claim = store.claim("default", backlog, lease=0.5, token="lost~0#1", instance="lost~0")
        assert len(claim.jobs) == backlog
        store.run([store.mark_op("default", c.id, claim.now + 0.5) for c in claim.jobs], 10)
        claimed_at = time.monotonic()
        peer = workers.start(env, "-v", "0", name="peer")
        running = store.key("default", "running")
        recovered_at = wait_until(
            lambda: store.client.zcard(running) <= 1 and time.monotonic(), 90, "the backlog"
        )
        # Recovery reaches the long job's lease after the backlog's (it ends later): wait
        # until it did (the job left the running set or was claimed again) or the live
        # worker's heartbeat extended the lease, before letting the job finish.
        lease = store.client.zscore(running, job.id)
        wait_until(
            lambda: lease is None or (store.client.zscore(running, job.id) or 0) != lease,
            30,
            "recovery to reach the long job, or its worker's next heartbeat",
        )
        runs_client.set(f"runs:{tag}:release", 1)  # the long job may finish now
        wait_until(lambda: runs(runs_client, tag), 60, "the long job to finish")
        wait_until(lambda: settled(store), 60, "every run of the long job to finish")
        started = runs(runs_client, f"{tag}:started")
        for proc in (live, peer):
            proc.signal(signal.SIGTERM)
        codes = [proc.wait(30) for proc in (live, peer)]
    state = sizes(store)
    recovery = recovered_at - claimed_at
    report(
        scenario=f"15. recovery backlog ({backlog:,} expired leases)",
        jobs=1,
        duplicates=len(started) - 1,
        recovery_seconds=round(recovery, 1),
        visibility_timeout=visibility,
    )
    assert started == ["long"], (
        f"the live worker's long job started {len(started)} times: its lease expired while "
        f"{backlog:,} expired leases were recovered (in {recovery:.1f} s; visibility "
        f"timeout {visibility} s)"
    )
    assert state["pending"] == state["running"] == 0, state
    assert codes == [0, 0], workers.outputs()


def test_sigkill_with_prefetch_dead_letters_no_job_that_never_ran(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 6. A worker is SIGKILLed while it holds prefetched jobs (claimed, not started).
    Wanted: no job is dead-lettered without having run (today the prefetched max_retries=0
    jobs are recovered with an attempt counted and dead-lettered). Kept: a job that kills
    its worker (os._exit) with max_retries=0 is dead after exactly one run."""
    visibility, count = 1, 3000
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility, MAX_SLEEP=1)
    with installed(store):
        jobs = schedule_many(mark, [(tag, str(i)) for i in range(count)], max_retries=0)
        value_of = {job.id: job.args[1] for job in jobs}
        dying = die.schedule(f"{tag}:die", "die", max_retries=0, queue="exits")
        exiter = workers.start(env, "--queues", "exits", name="exiter")

        def unstarted(worker: str) -> list[str]:
            ran = set(runs(runs_client, tag))
            return [i for i in held_by(store, worker) if value_of[i] not in ran]

        def started_by(worker: str) -> set[str]:
            """Leases of ``worker`` its runners had marked started (running score >= 0)."""
            running = store.key("default", "running")
            return {i for i in held_by(store, worker) if store.client.zscore(running, i) >= 0}

        never_started: list[str] = []
        started_at_kill: set[str] = set()
        kills = 0
        for attempt in range(3):  # the kill must catch prefetched jobs; retried if not
            victim = workers.start(env, "--concurrency", "2", "-v", "0", name=f"victim-{attempt}")
            wait_until(
                lambda v=victim: runs_client.llen(f"runs:{tag}") > 100 and unstarted(v.name),
                60,
                "the victim to hold claimed jobs it has not started",
                step=0.01,
            )
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            kills += 1
            started_at_kill |= started_by(victim.name)
            never_started = unstarted(victim.name)
            if never_started:
                break
        assert exiter.wait(30) == DIED, exiter.output()
        rescuer = workers.start(env, "--queues", "default,exits", "-v", "0", name="rescuer")
        wait_until(lambda: settled(store) and settled(store, "exits"), 60, "both queues to settle")
        died = get_job(dying.id)
        dead_ids = [i.decode() for i in store.client.zrange(store.key("default", "dead"), 0, -1)]
        rescuer.signal(signal.SIGTERM)
        rescuer_code = rescuer.wait(30)
    ran = Counter(runs(runs_client, tag))
    # A job its runner had started when the SIGKILL came is charged its attempt (that is
    # what keeps a job that kills its worker from running forever), even if the kill came
    # before the task recorded its run: at most one per runner thread.
    cut_short = {i for i in started_at_kill if value_of[i] not in ran}  # killed as they began
    dead_unrun = [value_of[i] for i in dead_ids if value_of[i] not in ran and i not in cut_short]
    report(
        scenario="16. SIGKILL with prefetch",
        jobs=count,
        kills=kills,
        lost=count - len(ran),
        duplicates=sum(n - 1 for n in ran.values()),
        prefetched_at_kill=len(never_started),
        started_at_kill=len(started_at_kill),
        cut_short=len(cut_short),
        dead=len(dead_ids),
        dead_never_ran=len(dead_unrun),
    )
    assert never_started, "the kill caught no prefetched job: the scenario did not happen"
    # Kept: a job that ends its worker dies after its attempts (one, with max_retries=0).
    assert runs(runs_client, f"{tag}:die") == ["die"]
    assert died is not None and died.status == "dead" and died.attempts == 1, died
    assert len(cut_short) <= 2 * kills  # --concurrency 2: two runners per victim
    assert cut_short <= set(dead_ids)  # charged, as a job that kills its worker must be
    assert not dead_unrun, (
        f"{len(dead_unrun)} of {len(dead_ids)} dead-lettered jobs never started "
        f"({len(never_started)} claimed and not started at the SIGKILL)"
    )
    assert len(ran) + len(cut_short) == count, f"{count - len(ran)} jobs never ran"
    assert rescuer_code == 0, rescuer.output()


@contextlib.contextmanager
def unregistered(*tasks: Task) -> Iterator[None]:
    """As in a process that does not import the tasks' module (a web process scheduling
    by name); registered again afterwards with the same options."""
    for t in tasks:
        registry.unregister(t.name)
    try:
        yield
    finally:
        for t in tasks:
            options = {"queue": t.queue, "max_retries": t.max_retries}
            task(name=t.name, retry_backoff=t.retry_backoff, **options)(t.func)


def test_max_retries_get_job_reports_is_the_one_applied(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 7, and issue 17 item 12. Two jobs scheduled by task name from a process where
    the tasks are not registered, their tasks' own max_retries (1) differing from
    DELAYQ["MAX_RETRIES"] (3): one raises on every run, one ends its worker on every run
    (os._exit). Wanted: each is dead after exactly the task's max_retries + 1 runs, for
    exceptions and worker deaths alike: the worker that knows the task settles it before
    the first attempt, and get_job() reports it from then on (before, it shows the
    scheduling process's setting: the record says the policy is undecided). 0.2 applied
    the producer's 3, so a max_retries=0 task whose worker died ran twice."""
    setting, visibility = 3, 1
    assert explode.max_retries == die.max_retries == 1 != setting
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(
        data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility, MAX_RETRIES=setting
    )
    # CHECK_NAMES=False: scheduled by name, as a web process of another code base would.
    with installed(store, MAX_RETRIES=setting, CHECK_NAMES=False):
        with unregistered(explode, die):
            raising = schedule(explode.name, tag, "raises", queue="raises")
            dying = schedule(die.name, tag, "dies", queue="dies")
        promised = {
            "raises": get_job(raising.id).max_retries,
            "dies": get_job(dying.id).max_retries,
        }
        workers.start(env, "--queues", "raises", name="raiser")
        dies_workers: list = []

        def dead_or_restarted() -> bool:
            """True once the dying job is dead; else keep one worker on its queue."""
            job = get_job(dying.id)
            if job is not None and job.status == "dead":
                return True
            if not any(proc.alive() for proc in dies_workers):
                assert len(dies_workers) < 12, f"{len(dies_workers)} workers died; job: {job}"
                name = f"dies-{len(dies_workers)}"
                dies_workers.append(workers.start(env, "--queues", "dies", name=name))
            return False

        wait_until(dead_or_restarted, 120, "the dying job to be dead-lettered")
        wait_until(
            lambda: getattr(get_job(raising.id), "status", None) == "dead",
            60,
            "the raising job to be dead-lettered",
        )
        final = {"raises": get_job(raising.id), "dies": get_job(dying.id)}
    ran = {"raises": len(runs(runs_client, f"{tag}:failed")), "dies": len(runs(runs_client, tag))}
    report(
        scenario="17. max_retries of a job scheduled by name: the task's own (exceptions, deaths)",
        jobs=2,
        kills=ran["dies"],
        runs_until_dead=ran,
        max_retries_reported=promised,
    )
    task_retries = {"raises": explode.max_retries, "dies": die.max_retries}
    wanted = {name: retries + 1 for name, retries in task_retries.items()}
    assert ran == wanted, (
        f"the tasks' own max_retries are {task_retries}, so each should be dead after "
        f"{wanted} runs; they died after {ran} runs"
    )
    assert promised == {"raises": setting, "dies": setting}  # undecided: the producer's
    assert {name: job.max_retries for name, job in final.items()} == task_retries
