"""claim_plain.lua against claim.lua (design: benchmarks/engine_design.md 4.3, 11 risk 1): the
same plain jobs claimed and acknowledged through either script leave every key of the queue
the same and get the same replies; on a queue using features claim_plain.lua acknowledges,
leases nothing and says so. Run on fakeredis and on the real server (``store`` fixture)."""

from __future__ import annotations

from dataclasses import replace

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


TASK, OTHER = "tests.testapp.tasks.add", "tests.testapp.tasks.remember"  # record()'s, another
NEVER_HELD = (1_000_000, 1000)  # a rate that holds no job of these tests back


def use_feature(store, queue: str, feature: str, job_id: str = "01" + "0" * 24) -> None:
    """Make ``queue`` general for record()'s jobs: a prioritised job, a pause, a limit of
    their task or of the queue, a parked job, a grouped job of a task with group limits."""
    if feature == "priority":
        rec = encode_record(TASK, [9], {}, None, 1, "", 5)
        store.schedule(queue, job_id, rec, delay=0, now=T0)
    elif feature == "pause":
        store.control.pause(queue, now=T0)
    elif feature == "rate":
        store.control.publish_rates([queue], {TASK: NEVER_HELD})
    elif feature == "concurrency":
        store.control.publish_concurrency([queue], {TASK: 100})
    elif feature == "queue_limit":
        store.control.publish_queue_limits({queue: 100})
    elif feature == "queue_holders":  # left by a removed queue limit: claim.lua drops them
        store.client.hset(store.key(queue, "control"), "qhold", f"{job_id}|w#0")
    elif feature == "group_limit":
        store.control.publish_group_limits([queue], {TASK: (100, None)})
        rec = encode_record(TASK, [9], {}, None, 1, "g")
        store.schedule(queue, job_id, rec, delay=0, now=T0, group="g1")
    else:
        store.client.zadd(store.key(queue, "parked"), {"t\ng\n0\nx": 0})


FEATURES = [
    "priority",
    "pause",
    "rate",
    "concurrency",
    "queue_limit",
    "queue_holders",
    "group_limit",
    "parked",
]
# After claim.lua took the due jobs, the queue is plain again for claim_plain.lua: the
# prioritised job taken, the queue holders dropped, the parked entry swept (it had no job).
PLAIN_AFTER = {"priority", "queue_holders", "parked"}


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
    assert not general.plain  # an acks-only call beside `control` reads no job: no hint
    if feature != "queue_holders":  # claim.lua's acks-only call dropped "qhold" already
        assert dump(store, "plain") == dump(store, "general")
    # claim.lua then claims as it does on any queue: and says when the queue is plain again
    reply = store.claim("plain", 2, lease=30, token="w#2", instance="w", now=T0 + 2)
    left = {"pause": 0, "priority": 2, "group_limit": 2}.get(feature, 1)
    assert len(reply.jobs) == left
    assert reply.plain == (feature in PLAIN_AFTER)


UNRELATED = {
    "another task's rate": lambda store, q: store.control.publish_rates([q], {OTHER: (1, 1000)}),
    "another task's concurrency": lambda store, q: store.control.publish_concurrency(
        [q], {OTHER: 1}
    ),
    "group limits of ungrouped jobs": lambda store, q: store.control.publish_group_limits(
        [q], {TASK: (1, (1, 1000))}
    ),
    "state of limits removed": lambda store, q: store.client.hset(
        store.key(q, "control"),
        mapping={f"tat:{TASK}": "99999999999999999", f"hold:{TASK}": "x|w#0", "gscan": "0"},
    ),
}


@pytest.mark.parametrize("setting", UNRELATED)
def test_beside_limits_that_apply_to_none_of_its_jobs_claim_plain_claims_as_claim_does(
    store, setting
):
    """A control hash whose fields claim.lua would not apply to the jobs it reads: both
    scripts lease the same jobs, leave the same keys, and say 'plain'."""
    ids = put_both(store, 5)
    put_both(store, 1, delay=600)
    for q in QUEUES:
        UNRELATED[setting](store, q)
    first = both(store, 3, "w#1", T0 + 1)
    same(store, first)
    assert first[1].plain and not first[1].features
    assert [c.id for c in first[1].jobs] == ids[:3]
    # sent again: the same jobs; claim.lua, reading none, gives no hint beside `control`
    general, plain = both(store, 3, "w#1", T0 + 2)
    assert replace(plain, plain=False) == general and dump(store, "plain") == dump(store, "general")
    assert [c.id for c in plain.jobs] == ids[:3] and plain.plain
    rest = both(store, 10, "w#2", T0 + 3, acks_of(first[0], "w#1"))
    same(store, rest)
    assert rest[1].acked == [1, 1, 1] and [c.id for c in rest[1].jobs] == ids[3:]


def test_one_due_job_of_a_limited_task_sends_the_whole_claim_to_claim_lua(store):
    """Plain jobs with one job of a limited task among the due ones: claim_plain.lua leases
    none of them (before any write), claim.lua holds the limit."""
    ids = put_both(store, 2)
    limited = encode_record(OTHER, [0], {}, None, 1)
    other = new_job_id()
    for q in QUEUES:
        store.schedule(q, other, limited, delay=0.0015, now=T0)
        store.control.publish_concurrency([q], {OTHER: 1})
        store.client.hset(store.key(q, "control"), f"hold:{OTHER}", f"{ids[0]}|w#0")
    store.claim("general", 0, lease=30, token="w#0", instance="w", now=T0 + 1)  # no write
    before = dump(store, "plain")
    options = {"lease": 30, "token": "w#1", "instance": "w", "now": T0 + 5}
    refused = store.claim("plain", 5, plain=True, **options)
    assert refused.features and refused.jobs == []
    assert dump(store, "plain") == before
    reply = store.claim("plain", 5, **options)
    assert sorted(c.id for c in reply.jobs) == sorted([*ids, other]) and not reply.plain
    held = store.client.hget(store.key("plain", "control"), f"hold:{OTHER}")
    assert held == f"{other}|w#1".encode()  # the limit's holder


def test_a_claim_plain_sent_again_returns_its_jobs_on_a_queue_turned_general(store):
    put_both(store, 3)
    first = store.claim("plain", 2, lease=30, token="w#1", instance="w", now=T0 + 1, plain=True)
    store.control.pause("plain")
    again = store.claim("plain", 2, lease=30, token="w#1", instance="w", now=T0 + 2, plain=True)
    assert again.jobs == [c.__class__(c.id, c.record, c.attempt, None) for c in first.jobs]
    assert not again.plain and not again.features
    assert again.next_due == T0 + 2  # claim.lua, sent next, tells where the next job is


@pytest.mark.parametrize("info", ["l", "il"])
def test_linked_jobs_acked_through_either_script_leave_the_same_forward_entries(store, info):
    """A batch member's or chain step's ack (flag 'l'): claim_plain.lua writes its end to
    `forward` and deletes its link as claim.lua does, several in one call, and a second
    entry of an id waiting already goes under "<id>#<ms>" there too."""
    ids = [new_job_id() for _ in range(3)]
    for q in QUEUES:
        for i, job_id in enumerate(ids):
            rec = record(args=(i,), flags="l")
            link = "" if i == 2 else f'{{"b":"batch-{i}"}}'  # the last: its link gone
            store.schedule(q, job_id, rec, delay=i / 1000, now=T0, link=link)
        store.client.hset(store.key(q, "forward"), ids[1], "dead 1\n{}")  # an end waiting
    first = both(store, 3, "w#1", T0 + 1)
    same(store, first)
    second = both(store, 0, "w#2", T0 + 2, acks_of(first[0], "w#1", info=info))
    same(store, second)
    assert second[1].acked == [1, 1, 1]
    forward = store.client.hgetall(store.key("plain", "forward"))
    at = int(T0 + 2) * 1000
    assert forward == {
        ids[0].encode(): b'succeeded %d\n{"b":"batch-0"}' % at,
        ids[1].encode(): b"dead 1\n{}",
        f"{ids[1]}#{at}".encode(): b'succeeded %d\n{"b":"batch-1"}' % at,
    }
    assert not store.client.exists(store.key("plain", "links"))


@pytest.mark.parametrize("info", ["=k", "i=k", "g", "t", "ie", "lg"])
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
