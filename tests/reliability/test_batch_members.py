"""Batches whose members are chains (one member each, ended by the chain's last step or its
death) while worker processes are SIGKILLed, and a batch cancelled half-way while workers
run its members. Real redis-server and delayq_worker processes; runs recorded in the
separate "runs" Redis (tests/reliability/tasks.py timed)."""

from __future__ import annotations

import signal
import time

import pytest

from django_delayq import batch, cancel_batch, get_batch, schedule_many
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import explode, timed
from tests.reliability.test_batches import (
    KillLoop,
    callbacks,
    check_callbacks,
    settled,
    timed_runs,
)

pytestmark = pytest.mark.reliability


def test_a_batch_of_chains_with_a_dying_chain_while_workers_are_killed(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """A batch of 20 plain members and 5 chains of 3 steps (0.5 s apart); the third chain's
    second step dies (its chain's on_death runs, its last step never). Two workers, one
    SIGKILLed every 2 s: the batch's on_death and on_complete run once, after the chains
    ended; on_success never."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)

    loop = KillLoop(workers, env, store, "bc", 2)
    cb_tag, chain_death = f"{tag}:cb", f"{tag}:chain-death"
    with installed(store):
        with batch(**callbacks(cb_tag)) as b:
            schedule_many(timed, [(tag, f"m{i}", 0.05) for i in range(20)])
            for c in range(5):
                second = explode.call(tag, f"c{c}.1") if c == 2 else timed.call(tag, f"c{c}.1", 0.2)
                (
                    timed.call(tag, f"c{c}.0", 0.2)
                    .then(second, delay=0.5)
                    .then(timed.call(tag, f"c{c}.2", 0.2), delay=0.5)
                    .on_death(timed.call(chain_death, f"c{c}"))
                    .schedule()
                )
        began = time.monotonic()

        def complete_ran() -> bool:
            return "complete" in {r.value for r in timed_runs(runs_client, cb_tag)}

        loop.run(complete_ran, 2.0, began)
        wait_until(lambda: settled(store), 60, "the batch to drain")
        time.sleep(1.0)
        state = get_batch(b.id)
        codes = loop.stop()
    exposed, kills = loop.exposed, loop.kills
    ran = timed_runs(runs_client, tag)
    values = {r.value for r in ran}
    report(scenario="batches of chains, a dying chain, SIGKILL every 2 s", jobs=35, kills=kills)
    assert codes == [0, 0], workers.outputs()
    wanted = {f"m{i}" for i in range(20)} | {f"c{c}.{s}" for c in range(5) for s in range(3)}
    assert values == wanted - {"c2.1", "c2.2"}, sorted(values ^ (wanted - {"c2.1", "c2.2"}))
    deaths = timed_runs(runs_client, chain_death)
    assert [r.value for r in deaths][:1] == ["c2"] and len({r.job_id for r in deaths}) == 1
    assert deaths[0].batch_id == b.id  # a member chain's on_death tells its batch
    last_end = max(r.end for r in ran)
    cb_runs = timed_runs(runs_client, cb_tag)
    check_callbacks(store, b.id, cb_runs, {"death", "complete"}, last_end, exposed)
    assert (state.total, state.succeeded, state.dead, state.done) == (25, 24, 1, True)


def test_a_batch_cancelled_half_way_runs_no_callback(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """30 members due now, 30 due in an hour; once the first 30 ran, cancel_batch(): it
    cancels the 30 pending ones, and no callback is decided then or later. Half way is
    decided by state: the later members cannot start however long the first take."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="canceller")
    cb_tag = f"{tag}:cb"
    with installed(store):
        with batch(**callbacks(cb_tag)) as b:
            schedule_many(timed, [(tag, f"now{i}") for i in range(30)])
            later = schedule_many(timed, [(tag, f"later{i}") for i in range(30)], delay=3600)
        wait_until(lambda: len(runs(runs_client, tag)) >= 30, 30, "the first 30 members")
        wait_until(lambda: sizes(store)["running"] == 0, 30, "their acks")
        cancelled = cancel_batch(b.id)
        # Their due time comes: none is pending any more (so none can run), and a sweep
        # or two (every VISIBILITY_TIMEOUT / 2) passes.
        assert store.run_now("default", [job.id for job in later]) == [False] * 30
        time.sleep(5.0)
        wait_until(lambda: settled(store), 30, "nothing left")
        state = get_batch(b.id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    report(scenario="batches: cancelled half-way", jobs=60)
    assert code == 0, proc.output()
    assert cancelled == 30
    assert sorted(r.value for r in timed_runs(runs_client, tag)) == sorted(
        f"now{i}" for i in range(30)
    )
    assert timed_runs(runs_client, cb_tag) == []
    assert state.done and state.cancelled == 30 and state.succeeded == 30
    assert state.callbacks == {"death": None, "success": None, "complete": None}
