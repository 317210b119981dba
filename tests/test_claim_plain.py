"""claim_plain.lua against claim.lua (design: benchmarks/engine_design.md 4.3, 11 risk 1): the
same plain jobs claimed and acknowledged through either script leave every key of the queue
the same and get the same replies; on a queue using features claim_plain.lua acknowledges,
leases nothing and says so. Run on fakeredis and on the real server (``store`` fixture)."""

from __future__ import annotations

import pytest

from django_delayq.exceptions import DelayQError
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from tests.test_engine_prototypes import dump
from tests.test_store import T0, record

QUEUES = ("general", "plain")  # claimed through claim.lua, through claim_plain.lua


def both(store, limit: int, token: str, now: float, acks=(), keep=(0, 0)) -> list:
    """The same claim on each queue, through each script; their replies."""
    return [
        store.claim(
            q,
            limit,
            lease=30,
            token=token,
            instance="w",
            acks=acks,
            keep=keep,
            now=now,
            plain=q == "plain",
        )
        for q in QUEUES
    ]


def put_both(store, n: int, delay: float = 0.0, now: float = T0) -> list[str]:
    ids = [new_job_id() for _ in range(n)]
    for q in QUEUES:
        for i, job_id in enumerate(ids):
            store.schedule(q, job_id, record(args=(i,)), delay=delay + i / 1000, now=now)
    return ids


def same(store, replies) -> None:
    general, plain = replies
    assert plain == general  # jobs, attempts, due times, next_due, ack flags, 'plain'
    assert dump(store, "plain") == dump(store, "general")


def acks_of(claim, token: str, summary: str = "", info: str = "") -> list[tuple[str, ...]]:
    return [(c.id, token, info, summary) for c in claim.jobs]


@pytest.mark.parametrize("info", ["", "i", "iku"])  # a tombstone (schedule()'s due soon)
@pytest.mark.parametrize("keep", [(0, 0), (3_600_000, 1000), (3_600_000, 2)])
def test_plain_jobs_claimed_and_acked_through_either_script_leave_the_same_keys(store, keep, info):
    ids = put_both(store, 7)
    put_both(store, 1, delay=600)  # not due: next_due
    first = both(store, 3, "w#1", T0 + 1, keep=keep)  # due jobs left: a wake token
    same(store, first)
    assert first[1].plain and [c.id for c in first[1].jobs] == ids[:3]
    for c in first[0].jobs:
        for q in QUEUES:
            store.call(store.mark_op(q, c.id, T0 + 31))  # started
    summary = "1 1800000001000 5 1800000000000 w"
    second = both(store, 3, "w#2", T0 + 2, acks_of(first[0], "w#1", summary, info), keep)
    same(store, second)
    assert second[1].acked == [1, 1, 1]
    # sent again (its reply lost): acks answer gone, the same jobs come back
    again = both(store, 3, "w#2", T0 + 3, acks_of(first[0], "w#1", summary, info), keep)
    same(store, again)
    assert again[1].acked == [0, 0, 0]
    assert [c.id for c in again[1].jobs] == [c.id for c in second[1].jobs]
    # not ours: a token that does not hold the lease
    same(store, both(store, 0, "w#3", T0 + 4, [(ids[3], "w#9", "", "")], keep))
    # only acks (limit 0), then the rest
    same(store, both(store, 0, "w#4", T0 + 5, acks_of(second[0], "w#2", summary, info), keep))
    same(store, both(store, 10, "w#5", T0 + 700, keep=keep))


def test_a_missing_record_is_dead_lettered_by_either_script(store):
    ids = put_both(store, 2)
    for q in QUEUES:
        store.client.hdel(store.key(q, "jobs"), ids[0])
    same(store, both(store, 5, "w#1", T0 + 10))
    assert store.client.zscore(store.key("plain", "dead"), ids[0]) is not None


def use_feature(store, queue: str, feature: str, job_id: str = "01" + "0" * 24) -> None:
    """Make ``queue`` general: a prioritised job, a pause, a published limit, a parked job."""
    if feature == "priority":
        rec = encode_record("tests.testapp.tasks.add", [9], {}, None, 1, "", 5)
        store.schedule(queue, job_id, rec, delay=0, now=T0)
    elif feature == "pause":
        store.control.pause(queue, now=T0)
    elif feature == "limit":
        store.control.publish_rates([queue], {"tests.testapp.tasks.other": (1, 1000)})
    else:
        store.client.zadd(store.key(queue, "parked"), {"t\ng\n0\nx": 0})


FEATURES = ["priority", "pause", "limit", "parked"]


@pytest.mark.parametrize("feature", FEATURES)
def test_on_a_queue_using_features_claim_plain_acks_and_leases_nothing(store, feature):
    put_both(store, 3)
    first = both(store, 2, "w#1", T0 + 1)
    for q in QUEUES:
        use_feature(store, q, feature)
    acks = acks_of(first[0], "w#1")
    options = {"lease": 30, "token": "w#2", "instance": "w", "acks": acks, "keep": (0, 0)}
    general = store.claim("general", 0, now=T0 + 2, **options)
    plain = store.claim("plain", 2, now=T0 + 2, plain=True, **options)
    assert plain.features and not plain.plain and plain.jobs == [] and plain.next_due is None
    assert plain.acked == general.acked == [1, 1]
    assert not general.plain
    assert dump(store, "plain") == dump(store, "general")
    # claim.lua then claims as it does on any queue: and says when the queue is plain again
    reply = store.claim("plain", 2, lease=30, token="w#2", instance="w", now=T0 + 2)
    assert not reply.plain


def test_a_claim_plain_sent_again_returns_its_jobs_on_a_queue_turned_general(store):
    put_both(store, 3)
    first = store.claim("plain", 2, lease=30, token="w#1", instance="w", now=T0 + 1, plain=True)
    store.control.pause("plain")
    again = store.claim("plain", 2, lease=30, token="w#1", instance="w", now=T0 + 2, plain=True)
    assert again.jobs == [c.__class__(c.id, c.record, c.attempt, None) for c in first.jobs]
    assert not again.plain and not again.features
    assert again.next_due == T0 + 2  # claim.lua, sent next, tells where the next job is


@pytest.mark.parametrize("info", ["=k", "i=k", "l", "g", "t", "ie"])
def test_claim_plain_refuses_an_ack_it_cannot_do_before_any_write(store, info):
    put_both(store, 1)
    first = both(store, 1, "w#1", T0 + 1)
    before = dump(store, "plain")
    with pytest.raises(DelayQError, match="NOT_PLAIN"):
        store.claim(
            "plain",
            1,
            lease=30,
            token="w#2",
            instance="w",
            now=T0 + 2,
            plain=True,
            acks=acks_of(first[1], "w#1", info=info),
            keep=(0, 0),
        )
    assert dump(store, "plain") == before
