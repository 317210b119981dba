"""``delayq_worker --processes N``: a supervisor and its worker processes, as real processes
against a redis-server of their own. A child SIGKILLed (its jobs recovered, the child
replaced), a child that leaks memory or has run --max-jobs (recycled), SIGTERM with jobs
running (nothing lost, exit 0), a second signal (forced, exit 1), the supervisor
SIGKILLed (its children stop by themselves)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter

import pytest

from django_delayq import get_job, schedule_many
from django_delayq.storage.roster import LiveWorker
from django_delayq.storage.store import Store
from django_delayq.worker.prefetch import PREFETCH_MAX
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import held, leak, mark_pid

pytestmark = pytest.mark.reliability

EMPTY = {"pending": 0, "running": 0, "dead": 0, "records": 0}


def children(store: Store, supervisor: int) -> list[LiveWorker]:
    """The live workers on the roster that ``supervisor`` (a pid) started."""
    seconds, micros = store.client.time()
    return [w for w in store.roster.live(seconds + micros / 1e6) if w.supervisor == supervisor]


def pids_of(values: list[str]) -> Counter[int]:
    """Runs recorded as "<value> <pid>": how many each process ran."""
    return Counter(int(v.split()[1]) for v in values)


def test_sigkilled_child_is_replaced_and_its_jobs_recovered(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Two children hold jobs; one is SIGKILLed: the supervisor starts another in its slot,
    the jobs it held run again once their lease expires, every job runs, exit 0."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2)
    sup = workers.start(env, "--processes", "2", "--concurrency", "2", name="sup")
    wait_until(lambda: len(children(store, sup.pid)) == 2, 60, "two children on the roster")
    with installed(store):
        jobs = schedule_many(held, [(tag, str(i), 60.0) for i in range(4)])
        jobs += schedule_many(mark_pid, [(tag, f"m{i}") for i in range(200)])
    # Each child runs two held jobs (each claims as many as it has free threads), and the
    # roster says which.
    wait_until(lambda: len(runs(runs_client, f"{tag}:started")) == 4, 60, "4 held jobs started")
    wait_until(
        lambda: [len(w.running) for w in children(store, sup.pid)] == [2, 2],
        60,
        "the roster to show each child's two jobs",
    )
    victim = children(store, sup.pid)[0]
    held_ids = {j.id for j in victim.running}
    subprocess.run(["kill", "-KILL", str(victim.pid)], check=True)

    def replaced() -> bool:
        now = children(store, sup.pid)
        return len(now) == 2 and victim.pid not in {w.pid for w in now}

    wait_until(replaced, 60, "a new child in the killed one's slot")
    names = sorted(w.name for w in children(store, sup.pid))
    assert names == ["sup/1", "sup/2"], names
    runs_client.set(f"runs:{tag}:release", 1)  # the held jobs may finish now

    def drained() -> bool:
        done = {v.split()[0] for v in runs(runs_client, tag)}
        state = sizes(store)  # one snapshot (two reads race with a recovery between them)
        return len(done) == 204 and state["pending"] == 0 and state["running"] == 0

    wait_until(drained, 120, "every job to run")
    sup.signal(signal.SIGTERM)
    code = sup.wait(60)
    output = sup.output()
    report(
        scenario="processes: a child SIGKILLed (2 procs x 2 threads)",
        jobs=len(jobs),
        kills=1,
        lost=204 - len({v.split()[0] for v in runs(runs_client, tag)}),
        duplicates=len(runs(runs_client, tag)) - 204,
    )
    assert code == 0, output
    assert "killed by SIGKILL" in output, output
    assert set(runs(runs_client, f"{tag}:started")) >= {str(i) for i in range(4)}
    started = Counter(runs(runs_client, f"{tag}:started"))
    # Only the jobs the victim held started twice.
    assert {v for v, n in started.items() if n > 1} <= {str(i) for i in range(4)}
    assert held_ids <= {j.id for j in jobs[:4]}
    assert sum(started.values()) - 4 == len(held_ids) == 2
    assert sizes(store) == EMPTY, sizes(store)


def test_a_child_that_leaks_memory_is_recycled(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Each job keeps 40 MB for good; --max-memory lets a child run a few of them: the
    child stops itself once its running job is done and the supervisor starts another.
    Every job runs exactly once."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix)
    jobs = 12
    with installed(store):
        schedule_many(leak, [(tag, str(i), 40) for i in range(jobs)])
    sup = workers.start(env, "--processes", "1", "--max-memory", "250", name="leaky")
    wait_until(lambda: len(runs(runs_client, tag)) == jobs, 180, f"all {jobs} jobs to run")
    wait_until(lambda: sizes(store) == EMPTY, 60, "nothing left in Redis")
    sup.signal(signal.SIGTERM)
    code = sup.wait(60)
    output = sup.output()
    done = runs(runs_client, tag)
    per_pid = pids_of(done)
    report(
        scenario="processes: a leaking child recycled (--max-memory 250, 40 MB per job)",
        jobs=jobs,
        kills=0,
        lost=jobs - len({v.split()[0] for v in done}),
        duplicates=len(done) - len({v.split()[0] for v in done}),
        processes=len(per_pid),
    )
    assert code == 0, output
    assert sorted(v.split()[0] for v in done) == sorted(str(i) for i in range(jobs))
    # 12 x 40 MB cannot fit under 250 MB in one process: it was replaced at least once.
    assert len(per_pid) >= 2, (per_pid, output)
    assert "MB resident (--max-memory 250)" in output, output
    assert "recycled itself" in output, output


def test_max_jobs_recycles(servers, runs_server, runs_client, workers, prefix, tag, report):
    """--max-jobs 10 over 35 jobs: each child but the last ran at least 10 of them
    (at most 10 + its threads + the jobs it had claimed ahead), every job runs once."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix)
    jobs, limit = 35, 10
    with installed(store):
        schedule_many(mark_pid, [(tag, str(i)) for i in range(jobs)])
    sup = workers.start(env, "--processes", "1", "--max-jobs", str(limit), name="recycler")
    wait_until(lambda: len(runs(runs_client, tag)) >= jobs, 180, f"all {jobs} jobs to run")
    wait_until(lambda: sizes(store) == EMPTY, 60, "nothing left in Redis")
    sup.signal(signal.SIGTERM)
    code = sup.wait(60)
    output = sup.output()
    done = runs(runs_client, tag)
    report(
        scenario="processes: --max-jobs 10 recycles (35 jobs)",
        jobs=jobs,
        kills=0,
        lost=jobs - len({v.split()[0] for v in done}),
        duplicates=len(done) - len({v.split()[0] for v in done}),
    )
    assert code == 0, output
    assert sorted(v.split()[0] for v in done) == sorted(str(i) for i in range(jobs))
    order = list(dict.fromkeys(int(v.split()[1]) for v in done))  # pids, in run order
    per_pid = pids_of(done)
    assert len(order) >= 2, output
    for pid in order[:-1]:
        assert limit <= per_pid[pid] <= limit + 1 + PREFETCH_MAX, (per_pid, output)
    assert f"{limit} jobs run (--max-jobs {limit})" in output, output
    assert output.count("recycled itself") >= len(order) - 1, output


@pytest.mark.parametrize("to", ["supervisor", "every process"])
def test_sigterm_lets_running_jobs_finish(
    servers, runs_server, runs_client, workers, prefix, tag, report, to
):
    """SIGTERM while each child runs jobs: the children stop claiming, their running jobs
    finish (released by the test after the signal), the others stay pending; exit 0.
    A burst run then drains the rest: every job ran exactly once. "every process": the
    children get SIGTERM too, as systemd's KillMode=control-group sends it, and still read
    it with the supervisor's relayed stop as one graceful stop, not two signals."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, SHUTDOWN_TIMEOUT=120)
    sup = workers.start(env, "--processes", "2", "--concurrency", "2", name="graceful")
    wait_until(lambda: len(children(store, sup.pid)) == 2, 60, "two children on the roster")
    jobs = 10
    with installed(store):
        schedule_many(held, [(tag, str(i), 120.0) for i in range(jobs)])
    wait_until(lambda: len(runs(runs_client, f"{tag}:started")) == 4, 60, "4 jobs started")
    pids = [w.pid for w in children(store, sup.pid)]
    sup.signal(signal.SIGTERM)
    if to == "every process":
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
    wait_until(lambda: all(w.stopping for w in children(store, sup.pid)), 60, "children stopping")
    assert sup.alive()
    runs_client.set(f"runs:{tag}:release", 1)
    code = sup.wait(60)
    finished = runs(runs_client, tag)
    state = sizes(store)
    assert code == 0, sup.output()
    assert sorted(finished) == sorted(runs(runs_client, f"{tag}:started"))
    assert len(finished) == 4
    assert state["running"] == 0 and state["pending"] == jobs - 4, state
    drain = workers.start(env, "--processes", "1", "--burst", name="drain")
    assert drain.wait(120) == 0, drain.output()
    done = runs(runs_client, tag)
    report(
        scenario=f"processes: SIGTERM to the {to} with jobs running (2 procs x 2 threads)",
        jobs=jobs,
        kills=0,
        lost=jobs - len(set(done)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == sorted(str(i) for i in range(jobs))
    assert sizes(store) == EMPTY


def test_second_signal_forces(servers, runs_server, runs_client, workers, prefix, tag, report):
    """SIGTERM, then SIGINT while jobs that would run for minutes are running: the children
    stop at once and hand their jobs back (attempt not counted); the supervisor exits 1."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, SHUTDOWN_TIMEOUT=600)
    sup = workers.start(env, "--processes", "2", name="forced")
    wait_until(lambda: len(children(store, sup.pid)) == 2, 60, "two children on the roster")
    with installed(store):
        jobs = schedule_many(held, [(tag, str(i), 600.0) for i in range(2)])
    wait_until(lambda: len(runs(runs_client, f"{tag}:started")) == 2, 60, "2 jobs started")
    sup.signal(signal.SIGTERM)
    wait_until(lambda: all(w.stopping for w in children(store, sup.pid)), 60, "children stopping")
    sup.signal(signal.SIGINT)
    code = sup.wait(60)
    output = sup.output()
    report(
        scenario="processes: a second signal forces (2 jobs handed back)",
        jobs=2,
        kills=0,
        lost=0 if sizes(store)["pending"] == 2 else 2,
        duplicates=0,
    )
    assert code == 1, output
    assert "second signal" in output, output
    assert runs(runs_client, tag) == []
    assert sizes(store)["pending"] == 2 and sizes(store)["running"] == 0, sizes(store)
    with installed(store):
        for job in jobs:  # handed back: the attempt does not count
            assert get_job(job.id).attempts == 0


def test_children_stop_when_their_supervisor_is_killed(
    servers, runs_server, runs_client, workers, prefix, tag
):
    """SIGKILL of the supervisor: each child reads end-of-file on its stdin and stops
    gracefully (no orphan keeps running)."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix)
    sup = workers.start(env, "--processes", "2", name="orphans")
    wait_until(lambda: len(children(store, sup.pid)) == 2, 60, "two children on the roster")
    sup.signal(signal.SIGKILL)
    assert sup.wait(30) == -signal.SIGKILL
    wait_until(lambda: children(store, sup.pid) == [], 60, "the children to leave the roster")
    assert sup.output().count("its supervisor is gone; stopping") == 2, sup.output()
