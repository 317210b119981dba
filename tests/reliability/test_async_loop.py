"""Issue 21: ``async def`` tasks on a worker's event loop (``--async-concurrency``) under the
fault proxy of faults.py. The loop holds many attempts at once, so a lost reply concerns many
of them: the claim that leased a batch, the round trips that acknowledged one. Everything is
observed from outside (runs recorded by the tasks, the queue's sets, the exit code)."""

from __future__ import annotations

import signal

import pytest

from django_delayq import schedule_many
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, carries_acks, claims_jobs, drop_reply
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import amark

pytestmark = pytest.mark.reliability

EMPTY = {"pending": 0, "running": 0, "dead": 0, "records": 0}


def test_async_tasks_on_the_loop_survive_lost_claim_and_ack_replies(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """200 async jobs, a worker with 1 thread and --async-concurrency 50: the reply to its
    first claim is lost (50-odd jobs leased under a token it must send again), then the
    replies of 3 acknowledging round trips (each carrying the acks of many attempts).
    Wanted: every job runs at least once and none is lost; the queue ends empty, nothing
    dead-lettered, and the worker stops with 0."""
    jobs = 200
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    with FaultProxy(data.port) as proxy, installed(store):
        schedule_many(amark, [(tag, str(i)) for i in range(jobs)])
        claim = proxy.add_rule(claims_jobs, drop_reply())
        acks = proxy.add_rule(carries_acks, drop_reply(), times=3)
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2)
        worker = workers.start(env, "--concurrency", "1", "--async-concurrency", "50")
        wait_until(lambda: claim.applied == 1, 30, "the lost claim reply")
        wait_until(lambda: acks.applied == 3, 60, "3 lost acknowledging replies")

        def drained() -> bool:
            state = sizes(store)
            return state["pending"] == 0 and state["running"] == 0

        wait_until(drained, 60, "the queue to drain")
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
    done = [int(value) for value in runs(runs_client, tag)]
    report(
        scenario="45. async tasks on the event loop: lost claim and ack replies",
        jobs=jobs,
        lost=len(set(range(jobs)) - set(done)),
        duplicates=len(done) - len(set(done)),
        dead=sizes(store)["dead"],
    )
    assert set(done) == set(range(jobs)), f"never ran: {sorted(set(range(jobs)) - set(done))}"
    assert sizes(store) == EMPTY
    assert code == 0, worker.output()
    assert "async concurrency 50" in worker.output()


def test_a_killed_worker_with_async_attempts_in_flight_loses_none(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """150 async jobs of 1 s; a worker at --async-concurrency 100 is SIGKILLed with 100 of
    them in flight on its loop (their leases: 2 s). Wanted: a second worker recovers every
    one (attempt counted, retried) and each job runs to the end at least once."""
    jobs = 150
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    with installed(store):
        schedule_many(amark, [(tag, str(i), 1.0) for i in range(jobs)])
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2)
    victim = workers.start(env, "--async-concurrency", "100", name="victim")
    wait_until(lambda: sizes(store)["running"] >= 100, 30, "100 attempts in flight")
    victim.signal(signal.SIGKILL)
    victim.wait(30)
    rescuer = workers.start(env, "--async-concurrency", "100", name="rescuer")

    def drained() -> bool:
        state = sizes(store)
        return state["pending"] == 0 and state["running"] == 0

    wait_until(drained, 90, "the queue to drain")
    rescuer.signal(signal.SIGTERM)
    code = rescuer.wait(30)
    done = [int(value) for value in runs(runs_client, tag)]
    report(
        scenario="46. async tasks on the event loop: worker killed with 100 in flight",
        jobs=jobs,
        kills=1,
        lost=len(set(range(jobs)) - set(done)),
        duplicates=len(done) - len(set(done)),
        dead=sizes(store)["dead"],
    )
    assert set(done) == set(range(jobs)), f"never ran: {sorted(set(range(jobs)) - set(done))}"
    assert sizes(store) == EMPTY
    assert code == 0, rescuer.output()
