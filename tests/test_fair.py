"""Fair queues (DELAYQ['QUEUES'][q]['fair']): claim.lua takes a fair queue's due jobs in turns,
group by group (lua/include/fair.lua), so one group's backlog holds another group's job back
by one claim; jobs without a group take one turn together; every way back to pending keeps
the buckets consistent (they hold due jobs only, and are pending to every reader)."""

from __future__ import annotations

import time
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from django_delayq import schedule, task
from django_delayq.conf.queues import BadQueueOption, fair_queues, problems, queue_options
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from tests.test_store import DEAD_OPTS, T0

Q = "default"
TASK = "tests.fair"


def put(store, group, now=T0, priority=0, delay=0.0, task_name=TASK):
    record = encode_record(task_name, [1], {}, None, 3, "g" if group else "", priority)
    return store.schedule(Q, new_job_id(), record, now=now, group=group, delay=delay).id


def claim(store, now, token, acks=(), limit=4):
    reply = store.claim(Q, limit, lease=30, token=token, instance="w", now=now, acks=acks)
    return [j.id for j in reply.jobs]


def members(store, kind):
    return [m.decode() for m in store.client.zrange(store.key(Q, kind), 0, -1)]


def fair(store, on=True):
    store.control.publish_fair({Q: on})


def test_a_backlog_holds_another_group_back_by_one_claim(store):
    fair(store)
    backlog = [put(store, "a") for _ in range(50)]
    b = put(store, "b", now=T0 + 1)
    got = claim(store, T0 + 2, "w#1")
    assert got == [backlog[0], b, backlog[1], backlog[2]]  # a's turn, b's, then the room shared
    # The rest of a's backlog is pending to every reader, and is claimed in its order.
    job = store.fetch(Q, backlog[3])
    assert job is not None and job.status == "pending"
    assert claim(store, T0 + 3, "w#2", limit=10) == backlog[3:13]


def test_without_fair_the_order_is_priority_then_due(store):
    backlog = [put(store, "a", task_name="tests.grouped") for _ in range(10)]
    store.control.publish_group_limits([Q], {"tests.grouped": (100, None)})
    b = put(store, "b", now=T0 + 1, task_name="tests.grouped")
    assert claim(store, T0 + 2, "w#1") == backlog[:4]
    assert b not in claim(store, T0 + 2, "w#2", limit=6)


def test_turns_rotate_over_many_groups_and_no_group_is_one_turn(store):
    fair(store)
    jobs = {g: [put(store, g) for _ in range(3)] for g in ("a", "b", "c")}
    loose = [put(store, None) for _ in range(3)]
    first = claim(store, T0, "w#1", limit=2)
    second = claim(store, T0, "w#2", limit=2)
    # Each claim starts after the group the last one served first: four turns in two claims.
    turns = first + second
    assert sorted(turns) == sorted([jobs["a"][0], jobs["b"][0], jobs["c"][0], loose[0]])
    rest = claim(store, T0, "w#3", limit=20)
    assert sorted(rest) == sorted([j for v in jobs.values() for j in v[1:]] + loose[1:])
    assert store.client.hlen(store.key(Q, "groups")) == 9  # the ungrouped jobs left no field
    assert store.client.exists(store.key(Q, "parked")) == 0


def test_work_conserving_one_group_fills_the_room(store):
    fair(store)
    a = [put(store, "a") for _ in range(6)]
    assert claim(store, T0, "w#1", limit=6) == a


def test_priority_orders_jobs_within_a_group(store):
    fair(store)
    low = put(store, "a")
    high = put(store, "a", priority=5)
    b = put(store, "b")
    assert claim(store, T0, "w#1", limit=3) == [high, b, low]


def test_nothing_runs_early_and_retries_come_back_in_turn(store):
    fair(store)
    later = put(store, "a", delay=60)
    now_job = put(store, "a")
    assert claim(store, T0, "w#1") == [now_job]
    error = {"type": "x", "message": "y"}
    store.fail(Q, now_job, "w#1", error, delay=30, default_max_retries=3, now=T0 + 1, **DEAD_OPTS)
    assert claim(store, T0 + 2, "w#2") == []  # neither the retry nor the later job is due
    assert claim(store, T0 + 32, "w#3") == [now_job]
    assert claim(store, T0 + 61, "w#4") == [later]


def test_cancel_reschedule_and_run_now_of_a_bucketed_job(store):
    fair(store)
    a = [put(store, "a") for _ in range(6)]
    loose = [put(store, None) for _ in range(3)]
    first = claim(store, T0, "w#1", limit=2)  # one turn each: the rest wait in their buckets
    assert sorted(first) == sorted([a[0], loose[0]])
    assert store.client.zcard(store.key(Q, "parked")) == 7
    assert store.cancel(Q, a[1], now=T0 + 1) is not None
    assert store.cancel(Q, loose[1], now=T0 + 1) is not None
    assert store.fetch(Q, a[1]) is None and store.fetch(Q, loose[1]) is None
    assert store.reschedule(Q, a[2], delay=60, now=T0 + 1) is not None
    job = store.fetch(Q, a[2])
    assert job is not None and job.status == "pending"
    assert store.run_now(Q, [a[3]], now=T0 + 1) == [True]
    got = claim(store, T0 + 2, "w#2", limit=10)
    assert sorted(got) == sorted([a[3], a[4], a[5], loose[2]])  # a[2] is not due yet
    assert claim(store, T0 + 62, "w#3") == [a[2]]
    groups = store.client.hgetall(store.key(Q, "groups"))
    assert not any(k.decode() in loose for k in groups)  # no field left for the ungrouped


def test_recover_and_release_bring_jobs_back_to_their_turn(store):
    fair(store)
    a = [put(store, "a") for _ in range(3)]
    assert claim(store, T0, "w#1", limit=2) == a[:2]
    assert store.release(Q, [(a[0], "w#1")], now=T0 + 1) is not None
    got = claim(store, T0 + 2, "w#2", limit=5)
    assert sorted(got) == sorted([a[0], a[2]])


def test_turning_fair_off_loses_nothing(store):
    fair(store)
    a = [put(store, "a") for _ in range(5)]
    assert claim(store, T0, "w#1", limit=1) == [a[0]]
    fair(store, on=False)
    got = []
    for i in range(200):  # the sweep hands the buckets back, one group at a time
        got += claim(store, T0 + 100 * (i + 1), f"w#{i + 2}", limit=5)
        if len(got) == 4:
            break
    assert sorted(got) == sorted(a[1:])


def test_fair_is_a_bool_option():
    assert queue_options("q", {"fair": True})["fair"] is True
    assert queue_options("q", {})["fair"] is False
    with pytest.raises(BadQueueOption, match=r"\['fair'\] must be True .* got 'yes'"):
        queue_options("q", {"fair": "yes"})
    with override_settings(DELAYQ={"QUEUES": {"q": {"fair": 1}}}):
        assert [p.check_id for p in problems()] == ["delayq.E012"]
    with override_settings(DELAYQ={"QUEUES": {"q": {"fair": True}, "r": {}}}):
        assert fair_queues(["q", "r", "s"]) == {"q": True, "r": False, "s": False}


def test_group_is_accepted_on_a_fair_queue_only(store):
    from django_delayq.scheduling.registry import unregister

    loose = task(name=f"tests.fair_{uuid.uuid4().hex}", queue="fq")(lambda: None)
    try:  # unregistered after: its queue would be a known queue of every later test
        with pytest.raises(ValueError, match=r"queue 'fq' is not fair: .*\['fair'\] = True"):
            schedule(loose, group="shop:1")
        with override_settings(DELAYQ={**settings.DELAYQ, "QUEUES": {"fq": {"fair": True}}}):
            job = schedule(loose, group="shop:1")
            assert job.group == "shop:1"
    finally:
        unregister(loose.name)


def test_a_due_job_of_a_group_takes_its_turn_when_scheduled(store):
    fair(store)
    now_job = put(store, "a")
    later = put(store, "a", delay=60)
    loose = put(store, None)
    # The due job of a group is in its turn at once; a later one and one without a group
    # wait in `pending` until a claim's intake.
    assert [m.rsplit("\n", 1)[1] for m in members(store, "parked")] == [now_job]
    assert sorted(members(store, "pending")) == sorted([later, loose])
    job, waiting = store.fetch(Q, now_job), store.fetch(Q, later)
    assert job is not None and job.status == "pending" and job.score == T0
    assert waiting is not None and waiting.status == "pending"
    fair(store, on=False)
    assert put(store, "b") in members(store, "pending")


def test_group_limits_hold_on_a_fair_queue(store):
    fair(store)
    store.control.publish_group_limits([Q], {TASK: (1, None)})
    a = [put(store, "a") for _ in range(3)]
    b = put(store, "b")
    assert claim(store, T0 + 1, "w#1") == [a[0], b]  # a holds its one slot: its others wait
    assert claim(store, T0 + 2, "w#2") == []
    # The ack frees a's slot: a's next job is claimed from its turn by the same call.
    assert claim(store, T0 + 3, "w#3", acks=[(a[0], "w#1", "g"), (b, "w#1", "g")]) == [a[1]]
    assert store.client.zcard(store.key(Q, "pending")) == 0
    assert claim(store, T0 + 4, "w#4", acks=[(a[1], "w#3", "g")]) == [a[2]]
    assert store.client.exists(store.key(Q, "parked")) == 0


def test_a_replace_keeps_the_job_in_its_turn(store):
    fair(store)
    record = encode_record(TASK, [1], {}, None, 3, "g", 0)
    first = store.schedule(Q, new_job_id(), record, now=T0, group="a", key="k").id
    again = encode_record(TASK, [2], {}, None, 3, "g", 0)
    replaced = store.schedule(
        Q, new_job_id(), again, now=T0 + 1, group="b", key="k", on_conflict="replace"
    )
    assert (replaced.outcome, replaced.id) == ("replaced", first)
    parked = members(store, "parked")
    assert len(parked) == 1 and parked[0].startswith(f"{TASK}\nb\n") and parked[0].endswith(first)
    assert claim(store, T0 + 2, "w#1") == [first]
    assert store.client.hget(store.key(Q, "groups"), first) == f"{TASK}\nb".encode()


def _bulk_task():
    return task(name=f"tests.fair_bulk_{uuid.uuid4().hex}", queue=Q)(lambda n: None)


def _claims_until(store, job_id, now, most=3):
    """The claims (of 4 jobs each) it takes until ``job_id`` is claimed (most + 1: not yet)."""
    for n in range(1, most + 1):
        if job_id in claim(store, now + n, f"w#{n}"):
            return n
    return most + 1


@pytest.mark.parametrize("way", ["schedule", "schedule_many"])
def test_a_schedule_many_backlog_holds_another_group_back_by_one_claim(store, way):
    """schedule_many() sends a grouped job through schedule.lua (storage/bulk.py), so each
    of its due jobs is in its turn from its schedule: 3,000 of them wait for no intake."""
    from django_delayq import schedule_many
    from django_delayq.scheduling.registry import unregister
    from tests.conftest import more_settings

    fair(store)
    bulk = _bulk_task()
    try:
        with more_settings(store, QUEUES={Q: {"fair": True}}):
            backlog = schedule_many(bulk, [{"args": [i], "group": "a"} for i in range(3000)])
            if way == "schedule":
                b = schedule(bulk, -1, group="b")
            else:
                (b,) = schedule_many(bulk, [(-1,)], group="b")
        assert store.client.zcard(store.key(Q, "parked")) == 3001  # no intake needed
        assert store.client.zcard(store.key(Q, "pending")) == 0
        assert _claims_until(store, b.id, time.time()) == 1
        assert len({j.id for j in backlog}) == 3000
    finally:
        unregister(bulk.name)


def test_schedule_many_on_a_fair_queue_retries_and_replaces(store):
    """A grouped job of schedule_many() comes back in its turn after a failure, and a keyed
    one replaces the key's job in its turn (the replaced job leaves its bucket)."""
    from django_delayq import schedule_many
    from django_delayq.scheduling.registry import unregister
    from tests.conftest import more_settings

    fair(store)
    bulk = _bulk_task()
    try:
        with more_settings(store, QUEUES={Q: {"fair": True}}):
            a = schedule_many(bulk, [(i,) for i in range(3)], group="a")
            kept = schedule_many(bulk, [{"args": [9], "key": "k", "group": "b"}])[0]
            again = schedule_many(bulk, [{"args": [10], "key": "k", "group": "c"}])[0]
        assert again.id == kept.id  # replaced: the key's job, now of group c, in c's turn
        assert sorted(m.split("\n")[1] for m in members(store, "parked")) == ["a", "a", "a", "c"]
        now = time.time()
        assert sorted(claim(store, now, "w#1", limit=2)) == sorted([a[0].id, kept.id])
        error = {"type": "x", "message": "y"}
        store.fail(Q, a[0].id, "w#1", error, delay=0, default_max_retries=3, now=now, **DEAD_OPTS)
        got = claim(store, now + 1, "w#2", limit=10)
        assert sorted(got) == sorted([a[0].id, a[1].id, a[2].id])
        assert store.client.exists(store.key(Q, "parked")) == 0
    finally:
        unregister(bulk.name)
