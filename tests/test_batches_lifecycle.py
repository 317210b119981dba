"""Batches (django_delayq.batches) at the edges of their life, on fakeredis and the real
Redis: a finished batch leaves the open batches (the sweep's work list) and starts its keys'
BATCH_TTL as soon as its last callback is placed; a member replaced by another batch's job (a
unique key, on_conflict="replace") ends in its first batch; an abandoned batch (its block
never ended) expires; a stale end of a chain step counts nothing once its chain died."""

from __future__ import annotations

import time

from django_delayq import batch, get_batch
from django_delayq.batches import forwarding
from tests.test_batches import T, _runs, burst, runs  # noqa: F401 - _runs: autouse
from tests.testapp import tasks as t


def test_a_finished_batch_leaves_the_open_batches_and_expires(store):
    with batch(on_complete=t.record.call(T("b-complete"), "x")) as b:
        t.record.schedule(T("b-member"), "1")
    burst()
    burst()  # the callback, stored by the first run's forwarding
    assert runs(T("b-complete")) == ["x"]
    state = get_batch(b.id)
    assert state.done and state.callbacks == {"complete": "scheduled"}
    assert store.client.zscore(store.open_batches_key, b.id) is None, "still in batches:open"
    assert store.client.ttl(store.batch_keys(b.id)[0]) > 0, "the batch's keys never expire"


def test_a_member_replaced_by_another_batchs_job_ends_in_the_first(store):
    """A member with a unique key is replaced (on_conflict="replace") by a job of another
    batch: it left the first batch (cancelled there) and counts for the second."""
    with batch(on_complete=t.record.call(T("b-complete"), "first")) as first:
        t.record.schedule(T("b-member"), "1", key=T("b-key"), delay=60)
    with batch(on_complete=t.record.call(T("b-complete"), "second")) as second:
        t.record.schedule(T("b-member"), "2", key=T("b-key"), on_conflict="replace")
    burst()  # the replacing job runs and is acknowledged
    burst()  # the second batch's on_complete
    forwarding.sweep(store, ["default"], now=time.time() + 120)  # whatever a crash left
    burst()
    assert runs(T("b-member")) == ["2"]
    assert get_batch(second.id).done
    state = get_batch(first.id)
    assert (state.cancelled, state.pending) == (1, 0), state
    assert sorted(runs(T("b-complete"))) == ["first", "second"]


def test_an_abandoned_batch_expires(store):
    """A batch whose block never ended (a rolled-back transaction: its seal never ran) is
    let go by the sweep a day after it opened, and its keys expire like a finished one's."""
    now = time.time()
    ops = store.batches.open_ops(
        T("b-abandoned"), {"complete": '{"steps":[]}'}, int((now - 2 * 86400) * 1000)
    )
    store.run(ops)
    forwarding.sweep(store, ["default"], now=now)
    assert store.client.zscore(store.open_batches_key, T("b-abandoned")) is None  # let go
    assert store.client.ttl(store.batch_keys(T("b-abandoned"))[0]) > 0, "kept for good"


def test_a_stale_step_end_after_its_chain_died_does_not_succeed_the_batch(store, monkeypatch):
    """A member chain's first step is acknowledged and its next step stored, then the
    worker dies before deleting the forward entry; the second step dies (the batch's
    on_death, on_complete); the sweep later forwards the first step's entry again: the
    chain stays dead for its batch, on_success never runs."""
    t.runs_client().rpush(f"runs:{T('b-dies')}:armed", "1")
    with batch(
        on_success=t.record.call(T("b-success"), "x"),
        on_complete=t.record.call(T("b-complete"), "x"),
        on_death=t.record.call(T("b-death"), "x"),
    ) as b:
        first = (
            t.record.call(T("b-chain"), "0")
            .then(t.fails_once_then_records.call(T("b-dies"), "1"))
            .schedule()
        )
    store.claim("default", 1, lease=30, token="w#1")
    assert store.ack("default", [(first.id, "w#1", "l")]) == [1]
    entries = store.batches.read_forward("default", [first.id])
    with monkeypatch.context() as crash:
        crash.setattr(forwarding, "_drop", lambda store, entries: None)  # died before HDEL
        forwarding.forward(store, entries)  # the next step is stored
    burst()  # the second step dies
    burst()  # on_death, on_complete
    assert runs(T("b-death")) == ["x"] and runs(T("b-complete")) == ["x"]
    forwarding.sweep(store, ["default"], now=time.time() + 120)  # the first step's entry
    burst()
    state = get_batch(b.id)
    assert (state.succeeded, state.dead) == (0, 1), state
    assert runs(T("b-success")) == []
