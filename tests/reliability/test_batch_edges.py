"""Batch callbacks at the edges (issue 34), with real redis-server and delayq_worker
processes: a member replaced by its unique key inside its own batch's block stays that
member, so on_complete waits for it (through schedule() and schedule_many()); a chain's
dead middle step requeued from the admin that then succeeds continues its chain, and its
batch counts the member by its final outcome, each callback decided once. Runs recorded in
the separate "runs" Redis (tests/reliability/tasks.py timed)."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from django_delayq import batch, get_batch, get_job, schedule_many
from django_delayq.admin.actions import ACTIONS, apply_action
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, sizes, wait_until, worker_env
from tests.reliability.tasks import timed, timed_unless_armed
from tests.reliability.test_batches import check_callbacks, settled, timed_runs

pytestmark = pytest.mark.reliability

FAR = 3600  # seconds: a member that waits until the test runs it now


def batch_fields(store: Store, batch_id: str) -> dict[str, str]:
    key = store.batch_keys(batch_id)[0]
    return {k.decode(): v.decode() for k, v in store.client.hgetall(key).items()}


def test_a_member_replaced_by_its_key_in_its_own_block_keeps_on_complete_waiting(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Two batches, each with a member scheduled twice under one unique key (the second
    call replaces the first: one job, one member) and a member that runs at once: once the
    quick members' ends were forwarded and nothing else waits to be forwarded, neither
    batch has decided on_complete (its keyed member is pending), and each decides it once,
    after the keyed member ran."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="replacer")
    cb = f"{tag}:cb"
    forward = store.key("default", "forward")
    with installed(store):
        calls = {f"on_{kind}": timed.call(cb, kind) for kind in ("success", "complete")}
        with batch(**calls) as one:  # through schedule()
            timed.schedule(tag, "a", delay=FAR, key=f"{tag}:cust:42")
            first = timed.schedule(tag, "b", delay=FAR, key=f"{tag}:cust:42")
            timed.schedule(tag, "quick-one")
        calls = {f"on_{kind}": timed.call(f"{cb}:many", kind) for kind in ("success", "complete")}
        with batch(**calls) as many:  # both calls in one schedule_many()
            key = f"{tag}:cust:43"
            second = schedule_many(
                timed,
                [{"args": (tag, "c"), "key": key}, {"args": (tag, "d"), "key": key}],
                delay=FAR,
            )[0]
            schedule_many(timed, [(tag, "quick-many")], delay=0)
        for opened in (one, many):
            assert len(opened.members) == 2, opened.members

        def quick_ones_counted() -> bool:
            states = [get_batch(one.id), get_batch(many.id)]
            # Every end written was forwarded (the sweep, too, had nothing left to take).
            return all(s.succeeded == 1 for s in states) and store.client.hlen(forward) == 0

        wait_until(quick_ones_counted, 45, "the quick members' ends")
        for opened, job in ((one, first), (many, second)):
            fields = batch_fields(store, opened.id)
            assert "fire:complete" not in fields, "on_complete decided with a member pending"
            assert get_job(job.id).status == "pending"
            state = get_batch(opened.id)
            assert (state.total, state.pending, state.cancelled) == (2, 1, 0)
        assert store.run_now("default", [first.id, second.id]) == [True, True]

        def callbacks_ran() -> bool:
            done = {r.value for r in timed_runs(runs_client, cb)} | {
                f"many:{r.value}" for r in timed_runs(runs_client, f"{cb}:many")
            }
            wanted = {"success", "complete", "many:success", "many:complete"}
            return wanted <= done and settled(store)

        wait_until(callbacks_ran, 45, "the callbacks after the keyed members ran")
        time.sleep(1.0)  # a callback stored twice would run now
        states = [get_batch(one.id), get_batch(many.id)]
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    report(scenario="batches: a member replaced by its key in its own block", jobs=4)
    assert code == 0, proc.output()
    ran = {r.value: r for r in timed_runs(runs_client, tag)}
    assert set(ran) == {"b", "d", "quick-one", "quick-many"}  # the replaced calls never ran
    wanted = {"success", "complete"}
    for opened, value, cb_tag, state in zip(
        (one, many), ("b", "d"), (cb, f"{cb}:many"), states, strict=True
    ):
        cb_runs = timed_runs(runs_client, cb_tag)
        check_callbacks(store, opened.id, cb_runs, wanted, ran[value].end, Counter())
        assert (state.total, state.succeeded, state.cancelled, state.done) == (2, 2, 0, True)


def test_a_chain_whose_dead_middle_step_is_requeued_goes_on_and_its_batch_follows(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """A batch of a plain member and a chain of three steps whose second dies: the chain's
    on_death, the batch's on_death and on_complete run (every member ended, one dead), not
    on_success. The admin's requeue of the dead step, which then succeeds: the third step
    runs after it, the batch counts the member as succeeded and runs on_success, once, after
    the chain's last step; on_death and on_complete are not decided again."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="requeuer")
    cb, chain_death = f"{tag}:cb", f"{tag}:chain-death"
    runs_client.rpush(f"runs:{tag}:armed", "1")
    with installed(store):
        calls = {f"on_{kind}": timed.call(cb, kind) for kind in ("success", "complete", "death")}
        with batch(**calls) as b:
            (
                timed.call(tag, "s0")
                .then(timed_unless_armed.call(tag, "s1"))
                .then(timed.call(tag, "s2"))
                .on_death(timed.call(chain_death, "chain"))
                .schedule()
            )
            timed.schedule(tag, "plain")

        def ran(tag_: str, *values: str) -> bool:
            return set(values) <= {r.value for r in timed_runs(runs_client, tag_)}

        wait_until(lambda: ran(cb, "death", "complete") and ran(chain_death, "chain"), 45, "deaths")
        wait_until(lambda: settled(store) and sizes(store)["dead"] == 1, 30, "the dead step")
        before = get_batch(b.id)
        (dead_id,) = [i.decode() for i in store.client.zrange(store.key("default", "dead"), 0, -1)]
        applied = apply_action(store, ACTIONS["requeue"], "default", [dead_id])
        assert applied.done == 1
        wait_until(lambda: ran(cb, "success") and settled(store), 45, "on_success")
        time.sleep(1.0)  # a callback stored twice would run now
        after = get_batch(b.id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    report(scenario="batches: a chain's dead middle step requeued", jobs=4)
    assert code == 0, proc.output()
    assert (before.succeeded, before.dead, before.done) == (1, 1, True)
    assert before.callbacks == {"success": None, "complete": "scheduled", "death": "scheduled"}
    steps = {r.value: r for r in timed_runs(runs_client, tag)}
    assert set(steps) == {"s0", "s1", "s2", "plain"}
    assert steps["s2"].start >= steps["s1"].end  # the chain went on from the requeued step
    cb_runs = timed_runs(runs_client, cb)
    check_callbacks(
        store,
        b.id,
        [r for r in cb_runs if r.value == "success"],
        {"success"},
        steps["s2"].end,
        Counter(),
    )
    assert sorted(r.value for r in cb_runs) == ["complete", "death", "success"]
    assert len(timed_runs(runs_client, chain_death)) == 1
    assert (after.succeeded, after.dead, after.done) == (2, 0, True)
