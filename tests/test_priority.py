"""Priorities (issue 20): claim order, and every script that finds, moves or removes a
pending job, for jobs of a priority other than 0 (they wait in the queue's ``ranked`` set).

Run on fakeredis and on the real server (``store`` fixture); time is passed explicitly.
"""

from __future__ import annotations

import random

import pytest

from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import decode_record, encode_record
from django_delayq.storage import control
from tests.test_store import DEAD_OPTS, T0, Q, claim, fail, members, recover, start

TASK = "tests.testapp.tasks.add"


def rec(priority: int = 0, key: str | None = None, max_retries: int = 1, flags: str = "") -> bytes:
    return encode_record(TASK, [1, 2], {}, key, max_retries, flags, priority)


def put(store, priority: int = 0, delay: float = 0.0, now: float = T0, **kw) -> str:
    key = kw.pop("key", None)
    record = rec(priority, key, kw.pop("max_retries", 1))
    return store.schedule(Q, new_job_id(), record, delay=delay, key=key, now=now, **kw).id


def claimed(reply) -> list[str]:
    return [job.id for job in reply.jobs]


def test_header_carries_the_priority():
    for priority, key in ((10, None), (-100, "k:1"), (100, "x^3"), (0, "a")):
        raw = rec(priority, key)
        fields = decode_record(raw)
        assert (fields.priority, fields.key) == (priority, key)
    assert rec(0) == encode_record(TASK, [1, 2], {}, None, 1, "")  # priority 0: no change
    assert rec(-7, "k").split(b"\n")[0] == b"1=1:k^-7"


def test_jobs_of_priority_0_stay_in_pending(store):
    job = put(store)
    assert members(store, "pending") == {job}
    assert not store.client.exists(store.key(Q, "ranked"))


def test_claim_order_priority_then_due(store):
    low = [put(store, -10, delay=10 - i, now=T0 - 60) for i in range(3)][::-1]
    mid = [put(store, 0, delay=20 - i, now=T0 - 60) for i in range(3)][::-1]
    high = [put(store, 10, delay=30 - i, now=T0 - 60) for i in range(3)][::-1]
    later = put(store, 50, delay=60)  # never before due, whatever its priority
    got = claimed(claim(store, limit=4, now=T0))
    assert got == high + mid[:1]
    reply = claim(store, limit=10, now=T0, token="w#2")
    assert claimed(reply) == mid[1:] + low
    assert reply.next_due == pytest.approx(T0 + 60)
    assert claimed(claim(store, limit=10, now=T0 + 60, token="w#3")) == [later]


def test_thousand_jobs_three_priorities(store):
    rng = random.Random(20)
    jobs = []
    for i in range(1000):
        priority = rng.choice((-10, 0, 10))
        due = rng.randrange(0, 5000) / 1000  # all due by T0, at many different times
        jobs.append((priority, due, i, put(store, priority, delay=due, now=T0 - 10)))
    order = []
    n = 0
    while True:
        n += 1
        got = claimed(claim(store, limit=37, now=T0, token=f"w#{n}"))
        if not got:
            break
        order += got
    expected = [job for _, _, _, job in sorted(jobs, key=lambda j: (-j[0], j[1], j[2]))]
    # Equal due times of one priority come in id order (both sets order ties by member);
    # ids are ULIDs, made in schedule order within a millisecond.
    by_id = {job: (p, d) for p, d, _, job in jobs}
    assert sorted(order) == sorted(expected)
    assert [by_id[j] for j in order] == [by_id[j] for j in expected]


def test_next_due_and_wake_across_sets(store):
    put(store, 5, delay=30)
    put(store, 0, delay=20)
    put(store, -5, delay=10)
    reply = claim(store, limit=10, now=T0)
    assert reply.jobs == [] and reply.next_due == pytest.approx(T0 + 10)
    due = put(store, 5, delay=-1)
    other = put(store, 5, delay=-1)
    reply = claim(store, limit=1, now=T0)
    assert claimed(reply) == [due] and reply.next_due == pytest.approx(T0 - 1)
    assert store.client.llen(store.key(Q, "wake")) >= 1  # a peer is woken for `other`
    assert claimed(claim(store, limit=1, now=T0, token="w#2")) == [other]


def test_cancel_run_now_fetch_and_lists(store):
    a = put(store, 3, delay=100)
    b = put(store, 0, delay=50)
    c = put(store, -3, delay=10)
    d = put(store, 3, delay=200)
    assert store.size(Q, "pending") == 4
    assert [r.id for r in store.page(Q, "pending", 0, 10)] == [a, d, b, c]  # claim order
    assert [r.score for r in store.page(Q, "pending", 1, 2)] == [T0 + 200, T0 + 50]
    assert store.page_ids(Q, "pending", 2, 5) == [b, c]
    raw = store.fetch(Q, a)
    assert (raw.status, raw.score) == ("pending", T0 + 100)
    counts = store.counts(Q, now=T0 + 60)
    assert (counts["pending"], counts["due"], counts["oldest_due_at"]) == (4, 2, T0 + 10)
    assert [(b.priority, b.count, b.due) for b in counts["priorities"]] == [(3, 2, 0), (-3, 1, 1)]
    assert store.run_now(Q, [d, c], now=T0) == [True, True]
    assert control.split_score(store.client.zscore(store.key(Q, "ranked"), d)) == (3, T0)
    assert claimed(claim(store, limit=1, now=T0)) == [d]
    assert store.cancel(Q, a) is not None
    assert store.cancel(Q, a) is None
    assert store.size(Q, "pending") == 2


def test_retry_recover_release_requeue_keep_the_priority(store):
    ranked = store.key(Q, "ranked")
    job = put(store, 7, max_retries=3)
    claim(store, now=T0)
    start(store, job)
    assert fail(store, job, delay=5)[0] == "retry"
    assert control.split_score(store.client.zscore(ranked, job)) == (7, T0 + 5)
    assert fail(store, job, delay=5) == ("retry", T0 + 5)  # re-sent: same answer
    claim(store, now=T0 + 5, token="w#2")
    start(store, job, now=T0 + 5)
    got = recover(store, now=T0 + 100)
    assert [r.outcome for r in got] == ["retry"]
    assert control.split_score(store.client.zscore(ranked, job)) == (7, T0 + 100)
    claim(store, now=T0 + 100, token="w#3")
    assert store.release(Q, [(job, "w#3")], now=T0 + 101) == [1]
    assert control.split_score(store.client.zscore(ranked, job)) == (7, T0 + 101)
    assert store.release(Q, [(job, "w#3")], now=T0 + 101) == [1]  # re-sent
    claim(store, now=T0 + 101, token="w#4")
    start(store, job, now=T0 + 101)
    error = {"type": "x", "message": "y"}
    store.fail(Q, job, "w#4", error, delay=-1, default_max_retries=0, now=T0 + 102, **DEAD_OPTS)
    assert members(store, "dead") == {job}
    assert store.requeue(Q, [job], now=T0 + 200) == [1]
    assert control.split_score(store.client.zscore(ranked, job)) == (7, T0 + 200)
    assert members(store, "pending") == set()


def test_unique_key_replace_moves_between_sets(store):
    first = put(store, 0, delay=10, key="k")
    again = store.schedule(Q, new_job_id(), rec(9, "k"), delay=20, key="k", now=T0)
    assert (again.outcome, again.id) == ("replaced", first)
    assert members(store, "pending") == set() and members(store, "ranked") == {first}
    assert again.due_at == pytest.approx(T0 + 20)
    kept = store.schedule(
        Q, new_job_id(), rec(9, "k"), delay=5, key="k", on_conflict="keep", now=T0
    )
    assert (kept.outcome, kept.id, kept.due_at) == ("kept", first, pytest.approx(T0 + 20))
    back = store.schedule(Q, new_job_id(), rec(0, "k"), delay=30, key="k", now=T0)
    assert back.id == first and members(store, "pending") == {first}
    assert members(store, "ranked") == set()
    # A key held by a prioritised pending job: a retry of another job with that key is
    # superseded (take_key looks in both sets).
    holder = put(store, 4, key="h")
    store.cancel(Q, holder)
    runner = put(store, 0, key="h")
    claim(store, now=T0)
    start(store, runner)
    put(store, 4, key="h")
    assert fail(store, runner)[0] == "dead"


def test_schedule_many_splits_by_priority(store):
    jobs = [(new_job_id(), rec(p), {"delay": -1.0}) for p in (0, 5, -5, 0)]
    result = store.call(store.schedule_many_op(Q, jobs, now=T0))
    assert len(result) == 4
    assert members(store, "pending") == {jobs[0][0], jobs[3][0]}
    assert members(store, "ranked") == {jobs[1][0], jobs[2][0]}
    order = claimed(claim(store, now=T0))
    assert order == [jobs[1][0], jobs[0][0], jobs[3][0], jobs[2][0]]
    # Re-sent after a lost reply: nothing stored twice, due times answered from both sets.
    again = store.call(store.schedule_many_op(Q, jobs, now=T0))
    assert len(again) == 4


def test_claim_resend_with_priorities(store):
    a, b = put(store, 5), put(store, -5)
    first = claimed(claim(store, now=T0))
    assert first == [a, b]
    assert claimed(claim(store, now=T0)) == [a, b]  # the same token: the same jobs


def test_bands_are_bounded_by_priorities_present(store):
    for p in range(-100, 101, 25):
        if p:
            put(store, p, delay=-1)
    found = store.control.bands(Q, T0)
    assert [b.priority for b in found] == [100, 75, 50, 25, -25, -50, -75, -100]
    assert all(b.count == 1 and b.due == 1 for b in found)
