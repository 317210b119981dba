"""The worker's forwarder (worker/forwarder.py) wakes its dispatcher only after a forwarding
that stored a job: a forwarding that stored nothing (a batch member that was not the last)
costs the dispatcher no claim round trip, one that stored a callback or a chain's next step
wakes it so that job is claimed at once, not at the next poll. On fakeredis and the real
Redis. The dispatcher claims only when its wake is set or its sleep ends (dispatch.py): the
tests check the wake itself, and that what it wakes for is in Redis, due."""

from __future__ import annotations

from django_delayq import batch
from django_delayq.worker.dispatch import Worker
from tests.test_batches import T, _runs, runs  # noqa: F401 - _runs: autouse
from tests.testapp import tasks as t


def ended_unforwarded(store) -> list[tuple[str, str]]:
    """Run what is due in one burst whose forwarder is left out: the (queue, job id) of the
    linked jobs it ended, their forward entries still in Redis."""
    ended: list[tuple[str, str]] = []
    worker = Worker(["default"], burst=True)
    worker.parts.results.forward = ended.extend
    assert worker.run() == 0
    assert len(store.client.hkeys(store.key("default", "forward"))) == len(ended)
    return ended


def due_now(store) -> list[str]:
    """Ids of the jobs of the default queue due now."""
    got = store.client.zrangebyscore(store.key("default", "pending"), "-inf", "+inf")
    return [i.decode() for i in got]


def test_a_member_that_is_not_the_last_wakes_no_claim_the_last_wakes_one(store):
    with batch(on_complete=t.record_batch.call(T("b-complete"))) as b:
        t.record.schedule(T("b-member"), "1")
        t.record.schedule(T("b-member"), "2")
    first, last = ended_unforwarded(store)
    assert due_now(store) == []
    worker = Worker(["default"], burst=True)  # not run: its forwarder, its dispatcher's wake
    forwarder, wake = worker.parts.forwarder, worker._wake
    forwarder.notify([first])
    forwarder.flush()
    assert forwarder.forwarded == 1 and forwarder.stored == 0
    assert not wake.is_set()  # no claim round trip for it
    assert forwarder.generation == 0  # --burst: nothing new to claim since the last claim
    assert due_now(store) == []
    forwarder.notify([last])
    forwarder.flush()
    assert (forwarder.forwarded, forwarder.stored, forwarder.generation) == (2, 1, 1)
    assert wake.is_set()  # the callback is claimed now, not at the next poll
    assert len(due_now(store)) == 1
    assert worker.run() == 0
    assert runs(T("b-complete")) == [b.id]


def test_a_chain_step_stored_wakes_the_dispatcher(store):
    (
        t.record.call(T("b-step"), "0")
        .then(t.record.call(T("b-step"), "1"))
        .then(t.record.call(T("b-step"), "2"))
        .schedule()
    )
    (step,) = ended_unforwarded(store)
    worker = Worker(["default"], burst=True)
    forwarder, wake = worker.parts.forwarder, worker._wake
    forwarder.notify([step])
    forwarder.flush()
    assert (forwarder.stored, forwarder.generation) == (1, 1)
    assert wake.is_set()
    assert len(due_now(store)) == 1  # the second step, due now
    assert runs(T("b-step")) == ["0"]


def test_a_burst_waiting_for_a_forwarding_alone_is_woken_when_it_ends(store):
    """--burst with nothing held waits for a forwarding under way (it may store a job): one
    that stored nothing wakes it too, so the burst ends without waiting out its sleep."""
    with batch(on_complete=t.record_batch.call(T("b-complete"))):
        t.record.schedule(T("b-member"), "1")
        t.record.schedule(T("b-member"), "2")
    first, _ = ended_unforwarded(store)
    worker = Worker(["default"], burst=True)
    forwarder, wake = worker.parts.forwarder, worker._wake
    forwarder.notify([first])
    assert not worker._nothing_left()  # an end not forwarded yet; nothing held
    assert forwarder.wake_when_idle
    forwarder.flush()
    assert forwarder.stored == 0 and wake.is_set()
    assert worker._nothing_left()
