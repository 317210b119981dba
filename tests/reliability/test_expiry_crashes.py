"""An expired job never runs again under a SIGKILLed worker (issue 36, "Done when"): a job
with an expiry starts in time, its worker is SIGKILLed once the expiry passed. Its lease
lapses; the next worker's recovery hands it back as a failed attempt (``LeaseLost``), and
its claim, after the expiry, ends it "expired": the retry never starts.

Not covered here (a worker process cannot be stopped between its claim and its runner's
start from outside): a job claimed and killed before it started; recovery refunds it and
the next claim sifts it the same way (tests/test_expiry.py drives that claim in process)."""

from __future__ import annotations

import signal

import pytest

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from tests.reliability.harness import held_by, installed, runs, wait_until, worker_env
from tests.reliability.tasks import stall

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
