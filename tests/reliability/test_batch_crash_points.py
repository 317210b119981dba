"""A worker SIGKILLed at each step of forwarding a batch member's end (forwarding.py): the
reply of that step is held by the fault proxy (Redis ran it), the worker is killed, and a
second worker's sweep takes the forward entry the first one left (after LEFTOVER_AFTER,
10 s). Wanted at every point: the callbacks stored once (their derived ids), run once,
after every member; nothing left in `forward`."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from django_delayq import batch, get_batch, schedule_many
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, cut, delay, schedules, script
from tests.reliability.harness import installed, wait_until, worker_env
from tests.reliability.tasks import explode, timed
from tests.reliability.test_batches import callbacks, check_callbacks, settled, timed_runs

pytestmark = pytest.mark.reliability


def on_key(name: bytes, suffix: bytes):
    """Commands ``name`` on a key ending with ``suffix`` (a queue's forward hash, a batch)."""
    return lambda cmd: len(cmd) > 1 and cmd[0].upper() == name and cmd[1].endswith(suffix)


POINTS = {
    # the worker read the entries; the batch knows nothing yet
    "forward read": on_key(b"HMGET", b":forward"),
    # the batch recorded the outcomes and decided the callbacks; none stored
    "batch_ended": script("batch_ended"),
    # the first decided callback is stored (it may run at once), not marked placed
    "callback stored": schedules,
    # the callbacks are stored and marked placed; the entry is not deleted
    "placed": on_key(b"HSET", b":batch"),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_a_worker_killed_while_forwarding(
    point, servers, runs_server, runs_client, workers, prefix, tag, report
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    cb_tag = f"{tag}:cb"
    with FaultProxy(data.port) as proxy, installed(store):
        held = proxy.add_rule(POINTS[point], delay(120))
        with batch(**callbacks(cb_tag)) as b:
            schedule_many(timed, [(tag, str(i)) for i in range(3)])
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
        first = workers.start(env, "-v", "1", name="first")
        wait_until(lambda: held.applied and proxy.holding, 30, f"the {point} reply held")
        first.signal(signal.SIGKILL)
        first.wait(10)
        killed = time.time()  # the first worker is gone; the second not started yet
        began = time.monotonic()
        direct = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
        second = workers.start(direct, "-v", "1", name="second")

        def callbacks_ran() -> bool:
            values = {r.value for r in timed_runs(runs_client, cb_tag)}
            return {"success", "complete"} <= values and settled(store)

        wait_until(callbacks_ran, 45, "both callbacks, by the second worker's sweep")
        waited = time.monotonic() - began
        time.sleep(1.5)  # a sweep again: nothing more may be stored
        state = get_batch(b.id)
        second.signal(signal.SIGTERM)
        code = second.wait(30)
    ran = timed_runs(runs_client, tag)
    report(scenario=f"batches: worker SIGKILLed at {point}", jobs=3, kills=1, seconds=waited)
    assert code == 0, second.output()
    # Members are at least once: a member whose ack the SIGKILLed worker had not sent yet
    # (its end came after the held forwarding began) runs again after its lease (seen once
    # at "forward read"). The callbacks, checked below, are stored once, and run once but
    # for the one the SIGKILLed worker held: from "callback stored" on, a callback is due in
    # Redis while the held forwarding waits, and the first worker's dispatcher (another
    # thread) may claim and run it, its ack due with a next claim the kill forestalls; the
    # recovery then runs it again (at least once, guarantees.rst). A run that started before
    # the kill can only be the first worker's: exposed are those, no more.
    assert {r.value for r in ran} == {"0", "1", "2"}
    last_end = max(r.end for r in ran)
    cb_runs = timed_runs(runs_client, cb_tag)
    exposed = Counter(r.job_id for r in cb_runs if r.start < killed)
    if point in ("forward read", "batch_ended"):  # nothing stored before the kill
        assert not exposed, cb_runs
    check_callbacks(store, b.id, cb_runs, {"success", "complete"}, last_end, exposed)
    assert state.done
    assert state.callbacks == {"death": None, "success": "scheduled", "complete": "scheduled"}


def test_a_worker_killed_before_deleting_a_step_entry_of_a_chain_that_then_dies(
    servers, runs_server, runs_client, workers, prefix, tag
):
    """A batch's only member is a chain: step 0 succeeds, its worker stores step 1 and is
    SIGKILLed before deleting step 0's forward entry; step 1 dies on another worker (the
    batch's on_death and on_complete). The sweep then forwards step 0's entry again:
    on_success must never run."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    cb_tag = f"{tag}:cb"
    with FaultProxy(data.port) as proxy, installed(store):
        # Never sent to Redis (each try cuts the connection): the entry stays.
        held = proxy.add_rule(on_key(b"HDEL", b":forward"), cut(), times=None)
        with batch(**callbacks(cb_tag)) as b:
            timed.call(tag, "0").then(explode.call(tag, "1"), delay=0.5).schedule()
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
        first = workers.start(env, "-v", "1", name="first")
        wait_until(lambda: held.applied, 30, "the entry's HDEL cut")
        first.signal(signal.SIGKILL)
        first.wait(10)
        direct = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
        second = workers.start(direct, "-v", "1", name="second")
        wait_until(
            lambda: {"death", "complete"} <= {r.value for r in timed_runs(runs_client, cb_tag)},
            30,
            "the chain's death to reach the batch",
        )
        # The sweep takes step 0's entry once it is 10 s old.
        wait_until(lambda: settled(store), 30, "every forward entry taken")
        time.sleep(1.5)
        state = get_batch(b.id)
        second.signal(signal.SIGTERM)
        second.wait(30)
    assert [r.value for r in timed_runs(runs_client, cb_tag)].count("success") == 0, state
    assert (state.succeeded, state.dead) == (0, 1), state
