"""Batches and chains (django_delayq.batches): callbacks once, after the last member, through
the worker, on fakeredis and the real Redis."""

from __future__ import annotations

import pytest

import django_delayq
from django_delayq import batch, cancel, cancel_batch, get_batch, get_job
from django_delayq.batches import forwarding
from django_delayq.batches.links import derived_id
from django_delayq.worker.dispatch import Worker
from tests.testapp import tasks as t

_tags = {"prefix": "b-"}


def T(name: str) -> str:
    """A run tag of this test alone (runs:<tag> lists live in the shared real Redis, where
    another process of the suite may run the same test on the other client)."""
    return f"{_tags['prefix']}{name}"


@pytest.fixture(autouse=True)
def _runs(store):
    _tags["prefix"] = f"{store.prefix}-"
    yield
    client = t.runs_client()
    keys = list(client.scan_iter(match=f"runs:{store.prefix}-*"))
    if keys:
        client.delete(*keys)


def runs(tag: str) -> list[str]:
    return [v.decode() for v in t.runs_client().lrange(f"runs:{tag}", 0, -1)]


def burst(queues=("default",)) -> None:
    assert Worker(list(queues), burst=True).run() == 0


def test_callbacks_run_once_after_every_member(store):
    with batch(
        on_success=t.record_batch.call(T("b-success")),
        on_complete=t.record_batch.call(T("b-complete")),
        on_death=t.record_batch.call(T("b-death")),
    ) as b:
        for i in range(5):
            t.record.schedule(T("b-member"), str(i))
        django_delayq.schedule_many(t.record, [(T("b-member"), "m1"), (T("b-member"), "m2")])
    state = get_batch(b.id)
    assert (state.total, state.pending, state.succeeded, state.done) == (7, 7, 0, False)
    burst()
    burst()  # callbacks stored by the first run's forwarding
    assert sorted(runs(T("b-member"))) == sorted([*map(str, range(5)), "m1", "m2"])
    assert runs(T("b-success")) == [b.id]
    assert runs(T("b-complete")) == [b.id]
    assert runs(T("b-death")) == []
    state = get_batch(b.id)
    assert (state.total, state.pending, state.succeeded, state.dead, state.done) == (
        7,
        0,
        7,
        0,
        True,
    )
    assert state.callbacks == {"success": "scheduled", "complete": "scheduled", "death": None}


def test_a_dead_member_runs_on_death_and_on_complete_never_on_success(store):
    with batch(
        on_success=t.record.call(T("b-success"), "x"),
        on_complete=t.record.call(T("b-complete"), "x"),
        on_death=t.record.call(T("b-death"), "x"),
    ) as b:
        t.record.schedule(T("b-member"), "ok")
        t.runs_client().rpush(f"runs:{T('b-flaky')}:armed", "1")
        dying = t.fails_once_then_records.schedule(T("b-flaky"), "later")
    burst()
    burst()
    assert (
        runs(T("b-death")) == ["x"]
        and runs(T("b-complete")) == ["x"]
        and runs(T("b-success")) == []
    )
    state = get_batch(b.id)
    assert (state.succeeded, state.dead, state.pending, state.done) == (1, 1, 0, True)
    # Requeued from the admin, the dead member succeeds: the batch succeeded after all.
    assert store.requeue("default", [dying.id]) == [1]
    burst()
    burst()
    assert runs(T("b-flaky")) == ["later"]
    assert (
        runs(T("b-success")) == ["x"]
        and runs(T("b-complete")) == ["x"]
        and runs(T("b-death")) == ["x"]
    )
    state = get_batch(b.id)
    assert (state.succeeded, state.dead) == (2, 0)


def test_an_empty_batch_runs_its_callbacks_when_its_block_ends(store):
    with batch(on_complete=t.record.call(T("b-complete"), "empty")) as b:
        pass
    burst()
    assert runs(T("b-complete")) == ["empty"]
    assert get_batch(b.id).total == 0


def test_forwarding_twice_stores_each_callback_once(store):
    """A forwarding re-sent (a crash before the entry's delete): nothing twice."""
    with batch(on_complete=t.record.call(T("b-complete"), "once")) as b:
        job = t.record.schedule(T("b-member"), "1")
    claim = store.claim("default", 1, lease=30, token="w#1")
    (claimed,) = claim.jobs
    assert store.ack("default", [(job.id, "w#1", "l")]) == [1]
    entries = store.batches.read_forward("default", [job.id])
    assert len(entries) == 1 and entries[0].outcome == "succeeded"
    forwarding.forward(store, entries)
    forwarding.forward(store, entries)  # the same entries again, as after a crash
    assert store.batches.read_forward("default", [job.id]) == []
    burst()
    forwarding.forward(store, entries)  # after the callback ran: its tombstone holds
    burst()
    assert runs(T("b-complete")) == ["once"]
    assert claimed.id == job.id and get_batch(b.id).done


def test_a_cancelled_member_ends_and_a_cancelled_batch_runs_no_callback(store):
    with batch(on_complete=t.record.call(T("b-complete"), "one")) as b:
        first = t.record.schedule(T("b-member"), "1", delay=60)
        t.record.schedule(T("b-member"), "2")
    assert cancel(first.id)
    burst()
    burst()
    assert runs(T("b-complete")) == ["one"]
    assert get_batch(b.id).cancelled == 1

    with batch(on_complete=t.record.call(T("b-complete"), "two")) as b2:
        late = [t.record.schedule(T("b-member"), str(i), delay=60) for i in range(3)]
    assert cancel_batch(b2.id) == 3
    assert all(get_job(j.id) is None for j in late)
    burst()
    burst()
    assert runs(T("b-complete")) == ["one"]
    state = get_batch(b2.id)
    assert state.done and state.cancelled == 3 and state.callbacks == {"complete": None}
    with pytest.raises(LookupError, match="no batch"):
        cancel_batch("nope")


def test_a_chain_runs_its_steps_in_order_and_a_dead_step_ends_it(store):
    chain = (
        t.record.call(T("b-chain"), "1")
        .then(t.record.call(T("b-chain"), "2"))
        .then(t.record.call(T("b-chain"), "3"), queue="default")
    )
    first = chain.schedule()
    for _ in range(4):
        burst()
    assert runs(T("b-chain")) == ["1", "2", "3"]
    assert store.client.exists(store.chain_key(first.id)) == 0

    t.runs_client().rpush(f"runs:{T('b-dies')}:armed", "1")
    dying = (
        t.record.call(T("b-chain2"), "1")
        .then(t.fails_once_then_records.call(T("b-dies"), "x"))
        .then(t.record.call(T("b-chain2"), "never"))
        .on_death(t.record.call(T("b-chain2"), "death"))
    )
    dying.schedule()
    for _ in range(4):
        burst()
    assert runs(T("b-chain2")) == ["1", "death"]


def test_a_batch_of_chains_ends_when_every_chain_ended(store):
    """A chain scheduled in a batch is one member: the batch ends with its last step."""
    with batch(on_complete=t.record.call(T("b-order"), "complete")) as b:
        for i in range(2):
            t.record.call(T("b-order"), f"{i}a").then(
                t.record.call(T("b-order"), f"{i}b")
            ).schedule()
    burst()
    burst()
    order = runs(T("b-order"))
    assert sorted(order[:4]) == ["0a", "0b", "1a", "1b"] and order[4:] == ["complete"]
    state = get_batch(b.id)
    assert (state.total, state.succeeded, state.done) == (2, 2, True)


def test_bad_callbacks_fail_in_the_batch_call(store):
    with pytest.raises(TypeError, match="on_complete must be a Call"), batch(on_complete=t.record):
        pass
    with pytest.raises(TypeError), batch(on_complete=t.record.call("only-one-argument")):
        pass
    with pytest.raises(TypeError, match="not 'key'"):
        t.record.call("a", "b").then(t.record.call("c", "d"), key="k").schedule()


def test_derived_ids_are_ulid_shaped_and_stable():
    a = derived_id("01ABC", "next", 1_700_000_000_000)
    assert a == derived_id("01ABC", "next", 1_700_000_000_000)
    assert a != derived_id("01ABC", "death", 1_700_000_000_000)
    assert len(a) == 26
    from django_delayq.jobs.ids import id_timestamp

    assert id_timestamp(a) == 1_700_000_000.0


def test_the_sweep_takes_what_a_crash_left(store):
    """A process died after a seal decided a callback (before storing it), a worker after an
    ack (before forwarding it): a later sweep does both, once; a block that never ended is
    let go after a day."""
    import time

    now = time.time()
    with batch(on_complete=t.record.call(T("b-complete"), "sealed")) as b:
        pass
    store.client.hdel(store.batch_keys(b.id)[0], "placed:complete")  # as if it died there
    with batch(on_complete=t.record.call(T("b-complete"), "acked")) as b2:
        job = t.record.schedule(T("b-member"), "1", queue=T("b-q"))
    store.claim(T("b-q"), 1, lease=30, token="w#1")
    assert store.ack(T("b-q"), [(job.id, "w#1", "l")]) == [1]  # no forwarding: a crash
    forwarding.sweep(store, [T("b-q")], now=now)  # too early for both
    assert store.batches.read_forward(T("b-q"), [job.id]) != []
    forwarding.sweep(store, [T("b-q")], now=now + 120)
    forwarding.sweep(store, [T("b-q")], now=now + 240)
    assert store.batches.read_forward(T("b-q"), [job.id]) == []
    burst()
    assert sorted(runs(T("b-complete"))) == ["acked", "sealed"]
    assert get_batch(b2.id).done

    ops = store.batches.open_ops("abandoned", {}, int((now - 2 * 86400) * 1000))
    store.run(ops)
    assert store.client.zscore(store.open_batches_key, "abandoned") is not None
    forwarding.sweep(store, ["default"], now=now)
    assert store.client.zscore(store.open_batches_key, "abandoned") is None


def test_cancel_batch_cuts_a_member_chain_between_steps(store):
    with batch(on_complete=t.record.call(T("b-complete"), "x")) as b:
        first = t.record.call(T("b-cut"), "1")
        first.then(t.record.call(T("b-cut"), "2"), delay=60).then(
            t.record.call(T("b-cut"), "3")
        ).schedule()
        t.record.call(T("b-cut"), "solo").schedule(delay=60)
    burst()  # the first step runs; the second waits 60 s
    assert runs(T("b-cut")) == ["1"]
    assert cancel_batch(b.id) == 1  # the solo member; the chain's waiting step is no member id
    (waiting,) = store.page_ids("default", "pending", 0, 10)
    assert store.run_now("default", [waiting]) == [True]
    burst()  # the waiting step runs; the chain stops there
    burst()
    assert runs(T("b-cut")) == ["1", "2"] and runs(T("b-complete")) == []
    state = get_batch(b.id)
    assert (state.cancelled, state.pending, state.done) == (2, 0, True)


@pytest.mark.parametrize("redis_client", ["real"], indirect=True)  # the async API: a server
def test_a_job_scheduled_after_the_block_joins_nothing(store):
    """An asyncio task made in the block keeps the block's context: what it schedules after
    the block ended must not reach the batch (it is not in its total)."""
    import asyncio

    from django_delayq import aschedule

    async def scenario():
        with batch(on_success=t.record.call(T("b-success"), "x")) as b:
            member = await aschedule(t.record, T("b-member"), "m", delay=3600)
            late = asyncio.get_running_loop().create_task(asyncio.sleep(0.05))
            follower = asyncio.create_task(_schedule_after(late))
        return b, member, await follower

    async def _schedule_after(waiting):
        await waiting
        return await aschedule(t.record, T("b-late"), "1")

    b, member, late_job = asyncio.run(scenario())
    burst()
    burst()
    assert runs(T("b-late")) == ["1"] and runs(T("b-success")) == []  # the member still waits
    assert get_batch(b.id).pending == 1 and get_job(member.id) is not None
    assert get_job(late_job.id) is None
