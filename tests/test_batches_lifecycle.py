"""Batches (django_delayq.batches) at the edges of their life, on fakeredis and the real
Redis: a finished batch should leave the open batches (the sweep's work list) and start its
keys' BATCH_TTL as soon as its last callback is placed; a member replaced by another batch's
job (a unique key, on_conflict="replace") should end in its first batch; an abandoned batch
(its block never ended) should expire."""

from __future__ import annotations

import time

import pytest

from django_delayq import batch, get_batch
from django_delayq.batches import forwarding
from django_delayq.storage import batches as stored
from tests.test_batches import burst, runs
from tests.testapp import tasks as t


@pytest.fixture(autouse=True)
def _runs(store):
    client = t.runs_client()
    for key in client.scan_iter(match="runs:b-*"):
        client.delete(key)
    yield
    for key in client.scan_iter(match="runs:b-*"):
        client.delete(key)


@pytest.mark.xfail(
    strict=True,
    reason="forwarding.place_decided() closes a batch (close_op: ZREM from batches:open) "
    "only when the batch script's reply said finished, and decide() says finished only once "
    "no decided callback is left unplaced: the call that decides the last callback never "
    "does, and nothing calls decide() again after placed_op, so a finished batch stays in "
    "batches:open with no TTL on its keys until a sweep's due_open() looks at it (60 s after "
    "it opened, then every LOOK_AGAIN_MS), at most SWEEP_BATCHES (100) per recovery pass "
    "and worker: past ~100 finished batches per pass interval (lease/2, 30 s by default) "
    "the open set and the never-expiring batch keys grow without bound",
)
def test_a_finished_batch_leaves_the_open_batches_and_expires(store):
    with batch(on_complete=t.record.call("b-complete", "x")) as b:
        t.record.schedule("b-member", "1")
    burst()
    burst()  # the callback, stored by the first run's forwarding
    assert runs("b-complete") == ["x"]
    state = get_batch(b.id)
    assert state.done and state.callbacks == {"complete": "scheduled"}
    assert store.client.zscore(store.open_batches_key, b.id) is None, "still in batches:open"
    assert store.client.ttl(store.batch_keys(b.id)[0]) > 0, "the batch's keys never expire"


@pytest.mark.xfail(
    strict=True,
    reason="schedule.lua's replace writes the holder's 'cancelled' end to `forward` under the "
    "holder's id and gives that same id the new link; nobody forwards that entry at once "
    "(schedule() does not, unlike cancel()), so when the job then ends (the sweep only takes "
    "entries older than 10 s) its ack's forward() HSETs the same field: the 'cancelled' end "
    "is overwritten and the first batch never learns its member left (pending forever)",
)
def test_a_member_replaced_by_another_batchs_job_ends_in_the_first(store):
    """A member with a unique key is replaced (on_conflict="replace") by a job of another
    batch: it left the first batch (cancelled there) and counts for the second."""
    with batch(on_complete=t.record.call("b-complete", "first")) as first:
        t.record.schedule("b-member", "1", key="b-key", delay=60)
    with batch(on_complete=t.record.call("b-complete", "second")) as second:
        t.record.schedule("b-member", "2", key="b-key", on_conflict="replace")
    burst()  # the replacing job runs and is acknowledged
    burst()  # the second batch's on_complete
    forwarding.sweep(store, ["default"], now=time.time() + 120)  # whatever a crash left
    burst()
    assert runs("b-member") == ["2"]
    assert get_batch(second.id).done
    state = get_batch(first.id)
    assert (state.cancelled, state.pending) == (1, 0), state
    assert sorted(runs("b-complete")) == ["first", "second"]


@pytest.mark.xfail(
    strict=True,
    reason="decide() (_lib.lua) lets an abandoned batch go (finished=1: out of batches:open) "
    "and keeps its keys on purpose (a late seal still decides), but with no EXPIRE at all: "
    "the batch hash of every block that never ended (a rolled-back transaction's on_commit "
    "batch, a process that died in its block) stays in Redis for good (a design question: "
    "a long TTL would bound it)",
)
def test_an_abandoned_batch_expires(store):
    """A batch whose block never ended (a rolled-back transaction: its seal never ran) is
    let go by the sweep a day after it opened, and its keys expire like a finished one's."""
    now = time.time()
    ops = stored.open_ops(
        store, "b-abandoned", {"complete": '{"steps":[]}'}, int((now - 2 * 86400) * 1000)
    )
    store.run(ops)
    forwarding.sweep(store, ["default"], now=now)
    assert store.client.zscore(store.open_batches_key, "b-abandoned") is None  # let go
    assert store.client.ttl(store.batch_keys("b-abandoned")[0]) > 0, "kept for good"


@pytest.mark.xfail(
    strict=True,
    reason="forwarding._chain_end(): an entry of a chain step that succeeded, forwarded again "
    "(a crash before its HDEL) after the chain ended, finds no next step (the chain's hash "
    "was deleted at its end), so it returns True and the batch gets (chain, 'succeeded'): "
    "batch_ended.lua's 'last outcome counts' moves the dead chain to succeeded and decides "
    "on_success",
)
def test_a_stale_step_end_after_its_chain_died_does_not_succeed_the_batch(store, monkeypatch):
    """A member chain's first step is acknowledged and its next step stored, then the
    worker dies before deleting the forward entry; the second step dies (the batch's
    on_death, on_complete); the sweep later forwards the first step's entry again: the
    chain stays dead for its batch, on_success never runs."""
    t.runs_client().rpush("runs:b-dies:armed", "1")
    with batch(
        on_success=t.record.call("b-success", "x"),
        on_complete=t.record.call("b-complete", "x"),
        on_death=t.record.call("b-death", "x"),
    ) as b:
        first = (
            t.record.call("b-chain", "0")
            .then(t.fails_once_then_records.call("b-dies", "1"))
            .schedule()
        )
    store.claim("default", 1, lease=30, token="w#1")
    assert store.ack("default", [(first.id, "w#1", "l")]) == [1]
    entries = stored.read_forward(store, "default", [first.id])
    with monkeypatch.context() as crash:
        crash.setattr(forwarding, "_drop", lambda store, entries: None)  # died before HDEL
        forwarding.forward(store, entries)  # the next step is stored
    burst()  # the second step dies
    burst()  # on_death, on_complete
    assert runs("b-death") == ["x"] and runs("b-complete") == ["x"]
    forwarding.sweep(store, ["default"], now=time.time() + 120)  # the first step's entry
    burst()
    state = get_batch(b.id)
    assert (state.succeeded, state.dead) == (0, 1), state
    assert runs("b-success") == []
