"""Issue 10, items 2-4: a worker's or a producer's round trip that Redis ran but whose reply
was lost, and Redis errors in the worker's acknowledging round trip. The faults are made
by the proxy of faults.py between the client and a real redis-server; everything else is
observed from outside (runs recorded by the tasks, the queue's sets, worker exit codes)."""

from __future__ import annotations

import contextlib
import signal

import pytest
import redis

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from tests.reliability.faults import (
    BUSY,
    NOSCRIPT,
    READONLY,
    WRONGTYPE,
    FaultProxy,
    before,
    carries_acks,
    claims_jobs,
    drop_reply,
    error,
    hold_then_cut,
    observe,
    schedules,
)
from tests.reliability.harness import (
    installed,
    runs,
    sizes,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.tasks import make_redis_busy, mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

EMPTY = {"pending": 0, "running": 0, "dead": 0, "records": 0}


def settled(store: Store) -> bool:
    """Nothing pending or running (the job ran and was acknowledged, or died)."""
    state = sizes(store)
    return state["pending"] == 0 and state["running"] == 0


def test_lost_claim_reply_job_runs_once_and_is_not_dead_lettered(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 2. Redis runs the worker's claim and the reply is lost with the connection:
    the claimed job sits under a lease token nobody holds. Wanted: the claim re-sent with
    the same token returns the job, so a max_retries=0 job runs once and is never
    dead-lettered (today it is recovered after its lease with a LeaseLost attempt)."""
    visibility = 2
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    with FaultProxy(data.port) as proxy, installed(store):
        job = schedule(mark, tag, "once", max_retries=0)
        lost = proxy.add_rule(claims_jobs, drop_reply())
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility)
        worker = workers.start(env, name="claimer")
        wait_until(lambda: lost.applied, 30, "the worker's first claim")
        # The dropped reply carried the job: the claim that Redis ran leased it (its worker's
        # entry in the claims index names it; only this one claim ever leases a job here).
        claims = store.client.hgetall(store.key("default", "claims"))
        assert any(job.id.encode() in value for value in claims.values()), claims
        wait_until(lambda: settled(store), 30, "the job to run or be dead-lettered")
        final = get_job(job.id)
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
    done = runs(runs_client, tag)
    report(
        scenario="11. lost reply: claim",
        jobs=1,
        lost=int(not done),
        duplicates=max(len(done) - 1, 0),
        dead=sizes(store)["dead"],
    )
    assert done == ["once"], (
        f"the job ran {len(done)} times; it is now {final and final.status} after "
        f"{final and final.attempts} attempt(s), errors: "
        f"{[e.get('message') for e in (final.errors if final else [])]}"
    )
    assert sizes(store) == EMPTY
    assert code == 0, worker.output()


@pytest.mark.parametrize("key", [None, "unique"])
def test_lost_schedule_reply_job_runs_once(
    key, servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 3. Redis stores the job, a worker runs and acknowledges it, and only then is
    schedule()'s reply lost: schedule() sends it again. Wanted: schedule() returns the job
    and it runs once (today the re-send stores it again and it runs twice)."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    worker = workers.start(worker_env(data.url, runs_server.url, prefix), name="runner")
    wait_until(lambda: waiting_workers(data) >= 1, 30, "the worker to wait for jobs")

    def ran_and_acked() -> bool:
        return bool(runs(runs_client, tag)) and sizes(store)["records"] == 0

    with FaultProxy(data.port) as proxy:
        lost = proxy.add_rule(schedules, hold_then_cut(30, until=ran_and_acked))
        producer = Store(redis.Redis.from_url(proxy.url, socket_timeout=60), prefix)
        with installed(producer):
            job = schedule(mark, tag, "once", key=key and f"{tag}:{key}")
        # The reply was held until the job had run and been acknowledged, then lost.
        assert (lost.applied, lost.met) == (1, 1), (lost.applied, lost.met)
    wait_until(lambda: settled(store), 30, "the queue to drain")
    worker.signal(signal.SIGTERM)
    code = worker.wait(30)
    done = runs(runs_client, tag)
    report(
        scenario="10. lost reply: schedule" + (" (unique key)" if key else ""),
        jobs=1,
        lost=int(not done),
        duplicates=max(len(done) - 1, 0),
    )
    assert job.outcome == "created"
    assert done == ["once"], f"the job ran {len(done)} times: the re-sent schedule stored it again"
    assert sizes(store) == EMPTY
    assert code == 0, worker.output()


@pytest.mark.parametrize("drops", [1, 3])
def test_lost_ack_reply_jobs_run_once_and_settle(
    drops, servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Redis runs the round trip that acknowledges finished jobs (and, in the same
    claim.lua call, claims the next ones), and its reply is lost with the connection,
    ``drops`` times in a row. Wanted: the worker sends the same acks and the same claim
    token again; the acks are no-ops the second time, the claim returns the jobs it had
    already leased, and every max_retries=0 job runs once and is acknowledged."""
    jobs = 40
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    with FaultProxy(data.port) as proxy, installed(store):
        ids = [schedule(mark, tag, str(i), max_retries=0).id for i in range(jobs)]
        lost = proxy.add_rule(carries_acks, drop_reply(), times=drops)
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2)
        worker = workers.start(env, name="acker")
        wait_until(lambda: lost.applied == drops, 30, f"{drops} lost acknowledging replies")
        wait_until(lambda: settled(store), 30, "the queue to drain")
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
    done = [int(value) for value in runs(runs_client, tag)]
    report(
        scenario=f"12. lost reply: ack ({drops} in a row)",
        jobs=jobs,
        lost=len(set(range(jobs)) - set(done)),
        duplicates=len(done) - len(set(done)),
        dead=sizes(store)["dead"],
    )
    assert sorted(done) == list(range(jobs)), f"runs: {sorted(done)}"
    assert sizes(store) == EMPTY
    assert code == 0, worker.output()
    assert_kept_once(store, ids, "acker")


def assert_kept_once(store: Store, ids: list[str], worker: str) -> None:
    """Each job is kept as finished once (the ack re-sent after a lost reply or an error
    changed nothing), as succeeded at its first attempt by ``worker``."""
    assert store.finished.count("default") == len(ids)
    with installed(store):
        for job_id in ids:
            kept = get_job(job_id, finished=True)
            assert kept is not None and kept.status == "succeeded", (job_id, kept)
            assert kept.last_attempt["attempt"] == 1, kept.last_attempt
            assert kept.last_attempt["worker"].startswith(worker), kept.last_attempt


# Injected error replies, and how many sends of the round trip get one: NOSCRIPT on every
# send, as a SCRIPT FLUSH loop would (today's store reloads and re-sends twice).
INJECTED = {"BUSY": (BUSY, 1), "NOSCRIPT": (NOSCRIPT, 3), "READONLY": (READONLY, 1)}
INJECTED["WRONGTYPE"] = (WRONGTYPE, 1)


@pytest.mark.parametrize("source", [*INJECTED, "real BUSY", "real NOSCRIPT"])
def test_redis_error_in_the_ack_round_trip_keeps_the_result(
    source, servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Item 4. The round trip that acknowledges a finished job gets a Redis error that is
    not a broken connection: injected by the proxy (BUSY, NOSCRIPT on every send,
    READONLY as after a failover, WRONGTYPE), or real: another client's long read-only
    Lua script (BUSY until SCRIPT KILL), or SCRIPT FLUSH just before each send (NOSCRIPT).
    Wanted: the worker keeps the result and sends it again; the job runs once and ends
    acknowledged (today the result is dropped: the job stays in-progress, is heartbeated
    while the worker lives, and is recovered and run again after it stops)."""
    visibility = 2
    data = servers.redis("data")
    direct = data.client()
    store = Store(direct, prefix)
    with FaultProxy(data.port) as proxy, installed(store):
        if source == "real BUSY":
            # Redis 7's name; lua-time-limit is its alias.
            direct.config_set("busy-reply-threshold", 50)
            fault = proxy.add_rule(carries_acks, observe(), times=None)
            job = make_redis_busy.schedule(tag, "once", data.url, 60)
        elif source == "real NOSCRIPT":
            fault = proxy.add_rule(carries_acks, before(direct.script_flush), times=3)
            job = mark.schedule(tag, "once")
        else:
            reply, times = INJECTED[source]
            fault = proxy.add_rule(carries_acks, error(reply), times=times)
            job = mark.schedule(tag, "once")
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility)
        worker = workers.start(env, name="acker")
        wait_until(lambda: runs(runs_client, tag), 30, "the job to run")
        wanted = b"-" + source.split()[-1].encode()
        wait_until(
            lambda: any(r.startswith(wanted) for r in fault.replies),
            30,
            f"a {source} reply to the acknowledging round trip",
        )
        if source == "real BUSY":
            kill_script(direct)
        # The worker retries with backoff: it acknowledges within a few seconds, or never
        # (at most 3 failed sends: pauses of 0.1 s doubling, under 0.7 s in all; 8 s is
        # room for a loaded machine, and only the "never" case waits it out).
        acked = poll(lambda: sizes(store)["records"] == 0, 8)
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
        left = sizes(store)
        if not acked:  # what becomes of the unacknowledged job: a second worker finds it
            rescuer = workers.start(worker_env(data.url, runs_server.url, prefix), name="rescuer")
            wait_until(lambda: settled(store), 30, "the job to be recovered and settled")
            rescuer.signal(signal.SIGTERM)
            rescuer.wait(30)
        final = get_job(job.id)
    done = runs(runs_client, tag)
    report(
        scenario=f"13. Redis error in the ack round trip: {source}",
        jobs=1,
        lost=int(not done),
        duplicates=max(len(done) - 1, 0),
        acked_by_its_worker=acked,
        dead=sizes(store)["dead"],
    )
    assert acked and done == ["once"], (
        f"{source} in the ack round trip: the result was not acknowledged by its worker "
        f"(at its exit: {left}); then the job ran {len(done)} time(s) in all and is "
        f"{final.status if final else 'gone'}"
    )
    assert sizes(store) == EMPTY
    assert code == 0, worker.output()
    assert_kept_once(store, [job.id], "acker")


def poll(predicate, timeout: float) -> bool:
    """Whether ``predicate()`` becomes true within ``timeout`` seconds."""
    with contextlib.suppress(AssertionError):
        return bool(wait_until(predicate, timeout, "a condition"))
    return False


def kill_script(client: redis.Redis) -> None:
    """SCRIPT KILL the busy script, and wait until Redis answers again (the script stops
    at its next check after SCRIPT KILL replied)."""

    def answering(kill: bool) -> bool:
        try:
            return bool(client.script_kill() if kill else client.ping())
        except redis.ResponseError as exc:
            if kill and "NOTBUSY" in str(exc):
                return True
            if str(exc).startswith("BUSY"):
                return False
            raise

    wait_until(lambda: answering(kill=True), 30, "SCRIPT KILL to succeed")
    wait_until(lambda: answering(kill=False), 30, "Redis to answer after SCRIPT KILL")
