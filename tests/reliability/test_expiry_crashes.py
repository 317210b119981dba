"""An expired job never runs again under a SIGKILLed worker (issue 36, "Done when"): a job
with an expiry starts in time, its worker is SIGKILLed once the expiry passed. Its lease
lapses; the next worker's recovery hands it back as a failed attempt (``LeaseLost``), and
its claim, after the expiry, ends it "expired": the retry never starts. And a lost reply:
Redis ran the worker's expire.lua and the reply was lost with the connection (the fault
proxy of faults.py); the call sent again finds the job ended by the first, and the worker
does what the first reply would have had it do: the job is expired once, never run, never
lost, counted once in the stats and the history.

Not covered here (a worker process cannot be stopped between its claim and its runner's
start from outside): a job claimed and killed before it started; recovery refunds it and
the next claim sifts it the same way (tests/test_expiry.py drives that claim in process)."""

from __future__ import annotations

import signal

import pytest

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, drop_reply, script
from tests.reliability.harness import held_by, installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import mark, stall

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]


def test_a_job_killed_running_past_its_expiry_is_expired_never_run_again(
    servers, runs_server, runs_client, workers, prefix, tag
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    first = workers.start(env, "--concurrency", "1", "-v", "0", name="holder")
    with installed(store):
        # The worker on the roster first (its start under load can outlast any expiry), then
        # an expiry it meets in time: claimed at once (the schedule wakes it).
        live = store.roster.live
        wait_until(lambda: live(store.server_time()), 60, "the worker on the roster")
        late = schedule(stall, tag, "late", 60, expires=8)
        started = f"runs:{tag}:started"
        wait_until(lambda: runs_client.llen(started) == 1, 20, "the job started in time")
        expiry = late.expires_at.timestamp()
        wait_until(lambda: store.server_time() > expiry + 0.2, 15, "its expiry passed")
        assert held_by(store, "holder") == [late.id]  # still running, its expiry passed
        first.signal(signal.SIGKILL)
        first.wait(10)
        workers.start(env, "--concurrency", "2", "-v", "0", name="next")

        def ended():
            kept = get_job(late.id, finished=True)
            return kept is not None and kept.status == "expired" and kept

        kept = wait_until(ended, 30, f"the job expired\n{workers.outputs()}")
        assert kept.attempts == 1  # the killed attempt, counted by the recovery
        assert [e["type"] for e in kept.errors] == ["django_delayq.exceptions.LeaseLost"]
        assert runs_client.llen(started) == 1  # the retry never started
        assert runs(runs_client, tag) == []  # and no attempt finished
        assert store.totals("default")["expired"] == 1


def test_a_lost_expire_reply_sent_again_expires_the_job_once_never_run(
    servers, runs_server, runs_client, workers, prefix, tag
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    with FaultProxy(data.port) as proxy, installed(store):
        lost = proxy.add_rule(script("expire"), drop_reply())
        env = worker_env(proxy.url, runs_server.url, prefix, MAX_SLEEP=1)
        # Due in 2 s, expiring after 1 s: its claim (after its expiry) ends it unrun.
        late = schedule(mark, tag, "late", delay=2, expires=1)
        on_time = schedule(mark, tag, "on time", delay=2)
        worker = workers.start(env, "-v", "0", name="expirer")
        wait_until(lambda: lost.applied == 1, 30, f"the expire reply lost\n{workers.outputs()}")

        def ended():
            kept = get_job(late.id, finished=True)
            return kept is not None and kept.status == "expired" and kept

        kept = wait_until(ended, 30, f"the job expired\n{workers.outputs()}")
        wait_until(lambda: runs(runs_client, tag) == ["on time"], 30, "the other job ran")
        wait_until(lambda: get_job(on_time.id) is None, 30, "the other job acknowledged")
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
    assert code == 0, worker.output()
    assert lost.matched == 2  # the call that Redis ran, then the same call sent again
    assert kept.attempts == 0 and kept.errors == []  # never started, no lease lost
    assert runs(runs_client, tag) == ["on time"]  # the expired job never ran
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert store.totals("default")["expired"] == 1  # counted once by the script
    now = store.server_time()
    points = store.history.points("default", now, minutes=5)
    assert sum(p.expired for p in points) == 1  # and once in the history
    assert sum(p.done for p in points) == 1
