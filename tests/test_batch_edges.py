"""Batch callbacks at the edges (issue 34), on fakeredis and the real Redis, SQLite and
PostgreSQL: a member replaced by its key in its own block stays a pending member; members
that wait in the database end when cancelled or replaced; a savepoint rolled back takes its
members out of the seal; a chain's dead middle step requeued continues its chain."""

from __future__ import annotations

from django_delayq import batch, get_batch, get_job, schedule_many
from django_delayq.batches.forwarding import forward
from tests.test_batches import T, _runs, burst, runs  # noqa: F401 - _runs: autouse
from tests.testapp import tasks as t


def forward_entries(store) -> dict[str, str]:
    got = store.client.hgetall(store.key("default", "forward"))
    return {k.decode(): v.decode() for k, v in got.items()}


def test_a_key_replaced_in_its_own_block_stays_one_pending_member(store):
    with batch(on_complete=t.record.call(T("b-complete"), "c")) as b:
        t.record.schedule(T("b-member"), "a", delay=60, key="cust:42")
        kept = t.record.schedule(T("b-member"), "b", delay=60, key="cust:42")
        schedule_many(
            t.record,
            [{"args": (T("b-member"), "c"), "key": "cust:43"}] * 2,
            delay=60,
        )
        t.record.schedule(T("b-member"), "now")
    assert kept.outcome == "replaced" and len(b.members) == 3
    assert forward_entries(store) == {}  # nothing of the replaced members ended
    burst()
    burst()
    state = get_batch(b.id)
    assert (state.total, state.pending, state.cancelled) == (3, 2, 0)
    assert state.callbacks == {"complete": None}
    assert get_job(kept.id).batch_id == b.id


def test_a_key_replaced_from_another_batch_counts_as_cancelled_there(store):
    with batch(on_complete=t.record.call(T("b-complete"), "first")) as first:
        held = t.record.schedule(T("b-member"), "a", delay=60, key="cust:42")
    with batch(on_complete=t.record.call(T("b-complete"), "second")) as second:
        t.record.schedule(T("b-member"), "b", delay=60, key="cust:42")
    assert list(forward_entries(store)) == [held.id]
    # What the recovery duty's sweep does (not due in a burst): forward the replace's entry.
    forward(store, store.batches.read_forward("default", [held.id]))
    burst()
    assert runs(T("b-complete")) == ["first"]
    assert get_batch(first.id).cancelled == 1
    state = get_batch(second.id)
    assert (state.total, state.pending) == (1, 1)
    assert get_job(held.id).batch_id == second.id


def test_a_dead_middle_step_requeued_continues_its_chain_and_its_batch(store):
    """The chain's second step dies: the chain's on_death, the batch's on_death and
    on_complete (every member ended) are decided. Requeued, it succeeds: the third step runs,
    and the batch counts the member as succeeded, deciding on_success; nothing decided before
    is decided again."""
    t.runs_client().rpush(f"runs:{T('b-step')}:armed", "1")
    with batch(
        on_success=t.record.call(T("b-success"), "x"),
        on_complete=t.record.call(T("b-complete"), "x"),
        on_death=t.record.call(T("b-death"), "x"),
    ) as b:
        (
            t.record.call(T("b-step"), "0")
            .then(t.fails_once_then_records.call(T("b-step"), "1"))
            .then(t.record.call(T("b-step"), "2"))
            .on_death(t.record.call(T("b-chain-death"), "x"))
            .schedule()
        )
        t.record.schedule(T("b-member"), "plain")
    for _ in range(3):
        burst()
    state = get_batch(b.id)
    assert (state.succeeded, state.dead, state.pending) == (1, 1, 0)
    assert state.callbacks == {"success": None, "complete": "scheduled", "death": "scheduled"}
    (dead_id,) = [i.decode() for i in store.client.zrange(store.key("default", "dead"), 0, -1)]
    assert store.requeue("default", [dead_id]) == [1]
    for _ in range(3):
        burst()
    assert runs(T("b-step")) == ["0", "1", "2"]
    assert runs(T("b-chain-death")) == ["x"]
    assert runs(T("b-death")) == ["x"] and runs(T("b-complete")) == ["x"]
    assert runs(T("b-success")) == ["x"]
    state = get_batch(b.id)
    assert (state.succeeded, state.dead, state.done) == (2, 0, True)
    assert store.client.keys(f"{store.prefix}:chain:*") == []  # ended with its last step


def test_a_requeued_middle_step_that_dies_again_stores_on_death_once(store):
    t.runs_client().rpush(f"runs:{T('b-step')}:armed", "1", "2")
    (
        t.record.call(T("b-step"), "0")
        .then(t.fails_once_then_records.call(T("b-step"), "1"))
        .then(t.record.call(T("b-step"), "2"))
        .on_death(t.record.call(T("b-chain-death"), "x"))
        .schedule()
    )
    dead = store.key("default", "dead")
    for requeued in range(2):
        for _ in range(3):
            burst()
        (dead_id,) = [i.decode() for i in store.client.zrange(dead, 0, -1)]
        (chain_key,) = store.client.keys(f"{store.prefix}:chain:*")
        assert store.client.pttl(chain_key) > 0  # kept while dead jobs are
        if requeued == 0:
            assert store.requeue("default", [dead_id]) == [1]
    assert runs(T("b-step")) == ["0"]
    assert runs(T("b-chain-death")) == ["x"]


def test_outcomes_sent_in_one_batch_ended_call_count_as_sent_one_by_one(store):
    """batch_ended.lua reads and writes a call's members at once: a member that moves twice
    in one call (dead, then succeeded once requeued; again dead), outcomes repeated, leave
    the batch's counts and `ended` as the same outcomes sent one call each."""
    outcomes = [
        ("m1", "dead"),
        ("m2", "succeeded"),
        ("m1", "succeeded"),
        ("m3", "cancelled"),
        ("m2", "succeeded"),
        ("m3", "dead"),
        ("m4", "expired"),
    ]
    store.call(store.batches.ended_op("together", outcomes))
    for pair in outcomes:
        store.call(store.batches.ended_op("apart", [pair]))
    for one, other in zip(store.batch_keys("together"), store.batch_keys("apart"), strict=True):
        assert store.client.hgetall(one) == store.client.hgetall(other)
    batch_key, ended_key = store.batch_keys("together")[:2]
    assert store.client.hgetall(ended_key) == {
        b"m1": b"succeeded",
        b"m2": b"succeeded",
        b"m3": b"dead",
        b"m4": b"expired",
    }
    counts = {k: v for k, v in store.client.hgetall(batch_key).items() if k.startswith(b"n:")}
    assert counts == {
        b"n:dead": b"1",
        b"n:succeeded": b"2",
        b"n:cancelled": b"0",
        b"n:expired": b"1",
    }
