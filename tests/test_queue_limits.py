"""A queue's concurrency limit (issue 20): DELAYQ['QUEUES'] = {"emails": {"concurrency": N}}
lets at most N attempts of the queue's jobs hold a lease at once across all workers,
enforced in claim.lua with the slots of @task(concurrency=N); a slot frees when its job is
acknowledged, fails, is handed back or is recovered after its lease expired."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_delayq import task
from django_delayq.checks import check_settings
from django_delayq.conf.queues import queue_limits
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.limits import publish_limits
from tests.conftest import more_settings
from tests.overlap import Overlap
from tests.test_store import DEAD_OPTS, T0, members

Q = "default"


def put(store, task_name="tests.testapp.tasks.add", now=T0, priority=0):
    record = encode_record(task_name, [1], {}, None, 3, "", priority=priority)
    return store.schedule(Q, new_job_id(), record, now=now).id


def claim(store, now, token, acks=(), limit=10):
    return store.claim(Q, limit, lease=30, token=token, instance="w", now=now, acks=acks)


def ids(reply):
    return [j.id for j in reply.jobs]


def holders(store):
    raw = store.client.hget(store.key(Q, "control"), "qhold")
    return sorted((raw or b"").decode().split())


# -- settings and checks ----------------------------------------------------------------


def check_ids(queues):
    with override_settings(DELAYQ={"QUEUES": queues}):
        return [(e.id, e.msg) for e in check_settings()]


def test_queues_as_a_dict_of_options_pass_the_checks():
    assert check_ids({"default": {}, "emails": {"concurrency": 5}, "other": None}) == []
    with override_settings(DELAYQ={"QUEUES": {"default": None, "emails": {"concurrency": 5}}}):
        assert queue_limits(["default", "emails", "unlisted"]) == {
            "default": None,
            "emails": 5,
            "unlisted": None,
        }
    with override_settings(DELAYQ={"QUEUES": ["default", "emails"]}):
        assert queue_limits(["default", "emails"]) == {"default": None, "emails": None}


@pytest.mark.parametrize("bad", [0, -3, 2.5, "5", True])
def test_e012_a_bad_concurrency_is_named(bad):
    ((check_id, msg),) = check_ids({"emails": {"concurrency": bad}})
    assert check_id == "delayq.E012"
    assert "DELAYQ['QUEUES']['emails']['concurrency']" in msg and f"got {bad!r}" in msg


@pytest.mark.parametrize(
    "options, shown",
    [
        (5, "got 5"),
        (["concurrency", 5], "got ['concurrency', 5]"),
        ({"concurrancy": 5}, "'concurrancy'"),
    ],
)
def test_e013_options_not_a_dict_or_unknown(options, shown):
    ((check_id, msg),) = check_ids({"emails": options})
    assert check_id == "delayq.E013" and "DELAYQ['QUEUES']['emails']" in msg and shown in msg


@pytest.mark.parametrize(
    "name, bad",
    [
        ("finished_max_age", -1),
        ("finished_max_age", float("inf")),
        ("finished_max_age", "1h"),
        ("finished_max_age", 10**9),
        ("finished_max_age", 0.0001),
        ("finished_max_count", 2.5),
        ("finished_max_count", -1),
        ("finished_max_count", True),
    ],
)
def test_e012_a_bad_keep_option_is_named(name, bad):
    ((check_id, msg),) = check_ids({"emails": {name: bad}})
    assert check_id == "delayq.E012"
    assert f"DELAYQ['QUEUES']['emails']['{name}']" in msg and f"got {bad!r}" in msg
    assert f"or None (DELAYQ's '{name.upper()}')" in msg
    assert ("at least 0.001" in msg) == (name == "finished_max_age")


def test_e005_still_checks_the_names_of_a_dict():
    ((check_id, msg),) = check_ids({"not ok": {"concurrency": 2}})
    assert check_id == "delayq.E005" and "'not ok'" in msg
    ((check_id, _),) = check_ids({})
    assert check_id == "delayq.E005"


def test_a_worker_refuses_a_bad_limit_of_its_queues(store):
    settings = {"PREFIX": store.prefix, "QUEUES": {Q: {"concurrency": 0}}}
    with override_settings(DELAYQ=settings), pytest.raises(ImproperlyConfigured, match="got 0"):
        Worker([Q])


# -- claim.lua --------------------------------------------------------------------------


def test_at_most_n_claimed_and_slots_free_as_jobs_leave(store):
    store.control.publish_queue_limits({Q: 2})
    assert store.control.queue_limit(Q) == (2, 0)
    jobs = [put(store, now=T0 + i / 1000) for i in range(6)]
    store.client.delete(store.key(Q, "wake"))  # (schedule pushed wake tokens)
    first = claim(store, T0 + 1, "w#1")
    assert ids(first) == jobs[:2]
    assert first.next_due == pytest.approx(T0 + 1.25)  # polls for a slot, no wake storm
    assert store.client.llen(store.key(Q, "wake")) == 0
    assert set(jobs[2:]) <= members(store, "pending")
    assert store.fetch(Q, jobs[2]).score == pytest.approx(T0 + 0.002)  # left untouched
    assert store.client.hget(store.key(Q, "state"), jobs[2]) is None  # no attempt counted
    assert ids(claim(store, T0 + 1, "w#2")) == []
    assert store.control.queue_limit(Q) == (2, 2)
    # An ack sent with a claim frees its slot for that very claim.
    got = claim(store, T0 + 2, "w#3", acks=[(jobs[0], "w#1", "")])
    assert got.acked == [1] and ids(got) == [jobs[2]]
    assert holders(store) == sorted([f"{jobs[1]}|w#1", f"{jobs[2]}|w#3"])
    # A failure (a retry) frees its slot too.
    error = {"type": "x", "message": "y"}
    store.fail(Q, jobs[1], "w#1", error, delay=60, default_max_retries=3, now=T0 + 3, **DEAD_OPTS)
    assert ids(claim(store, T0 + 3, "w#4")) == [jobs[3]]
    # A job handed back (release) frees its slot.
    assert store.release(Q, [(jobs[2], "w#3")], now=T0 + 4) == [1]
    assert len(claim(store, T0 + 4, "w#5").jobs) == 1
    # A separate ack frees the slot at the next claim.
    assert store.ack(Q, [(jobs[3], "w#4", "")], now=T0 + 5) == [1]
    assert len(claim(store, T0 + 5, "w#6").jobs) == 1
    assert len(holders(store)) == 2


def test_a_holder_whose_worker_died_frees_its_slot_when_its_lease_expired(store):
    store.control.publish_queue_limits({Q: 1})
    a, b = put(store), put(store)
    assert ids(claim(store, T0, "dead#1")) == [a]  # this worker is SIGKILLed: no ack
    assert ids(claim(store, T0 + 29, "w#1")) == []  # its lease (30 s) still holds the slot
    store.recover(
        Q, token="r#1", instance="rescuer", default_max_retries=3, now=T0 + 31, **DEAD_OPTS
    )
    got = ids(claim(store, T0 + 31, "w#2"))
    assert len(got) == 1 and got[0] in (a, b)
    assert holders(store) == [f"{got[0]}|w#2"]


def test_a_claim_sent_again_after_a_lost_reply_holds_no_extra_slot(store):
    store.control.publish_queue_limits({Q: 2})
    jobs = [put(store) for _ in range(4)]
    first = claim(store, T0, "w#1")  # its reply is lost: the worker sends it again
    again = claim(store, T0 + 1, "w#1")
    assert ids(again) == ids(first) == jobs[:2]
    assert holders(store) == sorted(f"{j}|w#1" for j in jobs[:2])
    assert ids(claim(store, T0 + 1, "w#2")) == []


def test_an_error_answer_writes_nothing(store):
    """A claim that fails (a key of the wrong type) leases nothing and holds no slot."""
    store.control.publish_queue_limits({Q: 1})
    put(store)
    store.client.set(store.key(Q, "running"), "garbage")
    with pytest.raises(Exception, match="WRONGTYPE"):
        claim(store, T0, "w#1")
    assert holders(store) == []
    store.client.delete(store.key(Q, "running"))
    assert len(claim(store, T0, "w#2").jobs) == 1


def test_the_limit_covers_prioritised_jobs_and_keeps_their_order(store):
    store.control.publish_queue_limits({Q: 1})
    low, high = put(store, priority=-5), put(store, priority=7)
    plain = put(store)
    assert ids(claim(store, T0, "w#1")) == [high]
    assert ids(claim(store, T0, "w#2", acks=[(high, "w#1", "")])) == [plain]
    assert ids(claim(store, T0, "w#3", acks=[(plain, "w#2", "")])) == [low]


def test_task_and_queue_limits_together(store):
    store.control.publish_queue_limits({Q: 3})
    store.control.publish_concurrency([Q], {"tests.exclusive": 1})
    a, b = put(store, "tests.exclusive"), put(store, "tests.exclusive")
    c, d = put(store), put(store)
    got = ids(claim(store, T0, "w#1")) + ids(claim(store, T0, "w#2"))
    assert b not in got
    assert sorted(got) == sorted([a, c, d])  # b waits for its task's slot, not the queue's
    assert len(holders(store)) == 3
    assert ids(claim(store, T0 + 1, "w#3")) == []  # the queue is full: b waits on


def test_removing_the_limit_drops_its_holders(store):
    store.control.publish_queue_limits({Q: 1})
    _, b = put(store), put(store)
    claim(store, T0, "w#1")
    store.control.publish_queue_limits({Q: None})
    assert store.control.queue_limit(Q) == (None, 1)
    assert ids(claim(store, T0, "w#2")) == [b]
    assert store.control.queue_limit(Q) == (None, 0)
    assert not store.client.exists(store.key(Q, "control"))  # back on the plain path


def test_a_worker_publishes_its_queues_limits(store):
    assert publish_limits(store, [Q], {Q: 4})
    assert store.control.queue_limit(Q) == (4, 0)
    assert publish_limits(store, [Q], {Q: None})
    assert store.control.queue_limit(Q) == (None, 0)


def test_a_queue_limit_of_two_across_three_workers(real_store):
    """A queue limit of 2, 3 workers x concurrency 4: the task records how many of the
    queue's jobs run at once (in Redis, across workers): never more than 2; each runs once."""
    overlap = Overlap("qconc")
    limited = task(name=f"tests.queue_limited_{overlap.tag}", retry_backoff=0)(overlap.body(0.05))
    settings = {"PREFIX": real_store.prefix, "RETRY_BACKOFF": 0, "QUEUES": {Q: {"concurrency": 2}}}
    with override_settings(DELAYQ=settings):
        workers = [Worker([Q], concurrency=4) for _ in range(3)]
    seen = overlap.run(workers, limited.schedule, 20)
    assert len(seen) == 20  # each ran once
    assert max(seen) <= 2, seen
    assert max(seen) == 2  # the limit was reached, not merely never tested


def test_a_dict_of_queues_names_the_queues_as_a_list_did(store):
    from django_delayq import schedule

    queues = {"default": {}, "emails": {"concurrency": 5}}
    # more_settings keeps the fixture's store: with override_settings alone, schedule()
    # built a store on REDIS_URL's Redis, and the fakeredis run left the job there.
    with more_settings(store, QUEUES=queues):
        assert Worker().queues == ["default", "emails"]  # no --queues: the dict's keys
        assert Worker().queue_limits == {"default": None, "emails": 5}
        assert schedule("tests.testapp.tasks.add", 1, 2, queue="emails").queue == "emails"
        with pytest.raises(ValueError, match="did you mean 'emails'"):
            schedule("tests.testapp.tasks.add", 1, 2, queue="emails2")
