"""Issue 10, items 10 and 12: workers against broken keys and missing Redis.

10. A script that errors half-way must not leave a job in none of pending, running and
   dead: with a key the failure path writes holding the wrong type, the job is still in
   exactly one set, and once the key is fixed a worker takes it to the dead-letter set.
12. ``delayq_worker --burst`` runs jobs whose lease already expired before it exits 0, and
   gives up (non-zero) when Redis cannot be reached, instead of retrying forever.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest

from django_delayq import get_job, task
from django_delayq.storage.store import Store
from tests.reliability.edges import Background, queue_key, sets_holding
from tests.reliability.harness import free_port, installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import mark, slow

pytestmark = pytest.mark.reliability

Q = "default"
# Run by breaks_then_fails on its first attempt (in this process: in-process workers only).
_BEFORE_FAILING: dict[str, Callable[[], None]] = {}


@task(name="tests.reliability.edges.breaks_then_fails", retry_backoff=0)
def breaks_then_fails(tag: str) -> None:
    """Runs the hook registered for ``tag`` (once), then fails."""
    hook = _BEFORE_FAILING.pop(tag, None)
    if hook is not None:
        hook()
    raise RuntimeError(f"{tag} fails on purpose")


@pytest.fixture
def store(servers, prefix):
    """A Store on the test's own redis-server; workers built in this process use it, with
    a 1 s visibility timeout so a lease left behind expires soon."""
    store = Store(servers.redis("data").client(), prefix)
    with installed(store, VISIBILITY_TIMEOUT=1, MAX_SLEEP=0.5):
        yield store


def fail_with_a_broken_key(store: Store, tag: str, kind: str, max_retries: int) -> tuple:
    """Run a failing job while the ``kind`` key of its queue holds a string; return the
    job, the sets holding it afterwards (the broken key holds nothing), and the worker's
    exit code. The dead key is broken before the run; the pending key by the task itself
    (a job cannot be scheduled or claimed without it)."""
    client, key = store.client, queue_key(store.prefix, Q, kind)
    job = breaks_then_fails.schedule(tag, max_retries=max_retries)
    if kind == "pending":
        _BEFORE_FAILING[tag] = lambda: client.set(key, "not a sorted set")
    else:
        client.set(key, "not a sorted set")
    # A short grace period: the failure cannot be recorded while the key is broken, and a
    # stopping worker keeps trying to deliver it until then (then exits 1).
    worker = Background([Q], burst=True, shutdown_timeout=2)
    try:
        worker.wait_failed(1)
        time.sleep(0.5)  # the failure is sent right after the task raised
    finally:
        code = worker.stop()
    return job, sets_holding(client, store.prefix, job.id), code


@pytest.mark.parametrize(
    ("kind", "max_retries"),
    [("dead", 0), ("pending", 1)],
    ids=["dead-letter a job: dead key broken", "retry a job: pending key broken"],
)
def test_failure_path_error_leaves_the_job_in_exactly_one_set(
    store, tag, kind, max_retries, report
):
    """fail.lua removed the job from the running set, then hit WRONGTYPE on ZADD: the job
    was in no set at all and no worker would ever see it again."""
    client, key = store.client, queue_key(store.prefix, Q, kind)
    job, holding, code = fail_with_a_broken_key(store, tag, kind, max_retries)
    report(
        scenario=f"19. failure while the {kind} key has the wrong type",
        jobs=1,
        lost=0 if len(holding) == 1 else 1,
        held_by=holding,
        exit_code=code,
    )
    assert len(holding) == 1, (
        f"with {key} holding a string, the failed job {job.id} is in {holding or 'no set'}; "
        "wanted exactly one of pending, running, dead"
    )
    client.delete(key)  # fixed: a worker runs again and finishes the job's story
    worker = Background([Q])
    try:
        wait_until(
            lambda: sets_holding(client, store.prefix, job.id) == ["dead"],
            30,
            f"job {job.id} to reach the dead-letter set",
        )
    finally:
        worker.stop()
    dead = get_job(job.id)
    assert dead.status == "dead" and dead.errors and dead.last_error, dead


def expire_a_lease(store: Store, tag: str) -> str:
    """A job claimed under a token nobody holds, whose lease has already expired."""
    with installed(store):
        job = mark.schedule(tag, "orphan")
    # No worker can be made to hold a lease and vanish without SIGKILL timing games: the
    # store's claim with a 0.2 s lease does it directly.
    claim = store.claim(Q, 1, lease=0.2, token="edges-ghost#nobody", instance="edges-ghost")
    assert [c.id for c in claim.jobs] == [job.id]
    store.call(store.mark_op(Q, job.id, claim.now + 0.2))  # its runner had started it
    running = queue_key(store.prefix, Q, "running")
    wait_until(
        lambda: store.server_time() * 1000 > (store.client.zscore(running, job.id) or 0),
        10,
        "the lease to expire",
    )
    return job.id


@pytest.mark.parametrize("when", ["before the worker starts", "while it runs another job"])
def test_burst_worker_runs_a_job_whose_lease_expired_before_exiting(
    servers, runs_server, runs_client, workers, prefix, tag, when, report
):
    """``--burst`` exited as soon as nothing was due, without recovering expired leases:
    the job waited for the next run. Before the start, its maintenance thread's first
    recovery races the first claim (the job is left behind about half the time); during
    a run the next recovery is half a visibility timeout (here 30 s) away, so the job is
    always left behind."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=60)
    if when == "before the worker starts":
        job_id = expire_a_lease(store, tag)
        proc = workers.start(env, "--burst", "-v", "2")
        expected = ["orphan"]
    else:
        with installed(store):
            slow.schedule(tag, "long", 4.0)
        proc = workers.start(env, "--burst", "-v", "2")
        wait_until(lambda: runs(runs_client, f"{tag}:started"), 30, "the long job to start")
        job_id = expire_a_lease(store, tag)
        expected = ["long", "orphan"]
    code = proc.wait(60)
    done = sorted(runs(runs_client, tag))
    report(
        scenario=f"21a. --burst, a lease expired {when}",
        jobs=len(expected),
        lost=len(set(expected) - set(done)),
        exit_code=code,
    )
    assert code == 0, proc.output()
    assert done == expected, (
        f"the burst worker exited without running job {job_id}, whose lease had expired "
        f"(state now: {sizes(store)}):\n{proc.output()[-3000:]}"
    )
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}


def test_burst_worker_gives_up_when_redis_cannot_be_reached(runs_server, workers, prefix, report):
    """Pointed at a closed port, ``--burst`` retried forever. It must exit non-zero after
    a bounded time; 120 s is far more than any sensible bound (not asserted as a time)."""
    closed = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    proc = workers.start(worker_env(closed, runs_server.url, prefix), "--burst")
    began = time.monotonic()
    try:
        code: int | None = proc.wait(120)
    except subprocess.TimeoutExpired:
        code = None
    report(
        scenario="21b. --burst with Redis unreachable",
        jobs=0,
        exit_code=code,
        seconds=time.monotonic() - began,
    )
    assert code is not None, (
        "delayq_worker --burst against a closed port was still running after 120 s:\n"
        + proc.output()[-2000:]
    )
    assert code != 0, proc.output()[-2000:]
