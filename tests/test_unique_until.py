"""Keys that hold through the run (issue 36 item 3): ``unique_until="end"`` (record flag 'h').
While the key's job (the leader) runs, ``keep`` answers the running job and stores nothing,
``replace`` stores one follower (``keys`` field "\\0f" + key -> "<id>|<not before ms>"),
which becomes pending only when the leader ended, however it ended
(lua/include/followers.lua). On fakeredis and the real server (``store`` fixture); times
injected (``now=``): structure, not wall clock."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.db import transaction

from django_delayq import get_job, schedule, schedule_many, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import JobSpec, decode_record, encode_job
from django_delayq.storage.expiry import expire_op
from tests.test_admin import url
from tests.test_store import T0, Q, claim, fail, recover, start
from tests.testapp import tasks as t

KEY = "customer:42:index"


def rec(held: bool = True, args=(1,), key: str | None = KEY) -> bytes:
    spec = JobSpec("tests.testapp.tasks.add", list(args), {}, key, 1, held=held)
    return encode_job(spec).data


def put(store, now: float = 0, delay: float = 0, held: bool = True, **kw):
    return store.schedule(
        Q,
        kw.pop("job_id", None) or new_job_id(),
        kw.pop("record", None) or rec(held, (now, delay)),
        delay=delay,
        key=KEY,
        now=T0 + now,
        **kw,
    )


def pending(store) -> dict[str, float]:
    raw = store.client.zrange(store.key(Q, "pending"), 0, -1, withscores=True)
    return {m.decode(): s / 1000 - T0 for m, s in raw}


def follower_mark(store) -> bytes | None:
    return store.client.hget(store.key(Q, "keys"), b"\0f" + KEY.encode())


def running_leader(store, now: float = 1):
    """A held leader, claimed and started at T0 + now: its id and ack info."""
    leader = put(store)
    job = claim(store, now=T0 + now).jobs[0]
    assert job.id == leader.id
    start(store, leader.id, now=T0 + now)
    return leader.id, decode_record(job.record).info


def test_the_record_carries_flag_h_and_a_key():
    fields = decode_record(rec())
    assert "h" in fields.flags and fields.key == KEY and fields.info == f"h={KEY}"


def test_keep_while_the_leader_runs_answers_the_running_job_and_stores_nothing(store):
    leader, _ = running_leader(store)
    kept = put(store, 2, on_conflict="keep")
    assert (kept.outcome, kept.id) == ("kept", leader)
    assert pending(store) == {} and follower_mark(store) is None
    assert store.client.hlen(store.key(Q, "jobs")) == 1


def test_without_unique_until_end_a_replace_while_it_runs_makes_a_second_job(store):
    """Today's behaviour (the default, "start"), which the flag changes."""
    put(store, held=False)
    claim(store, now=T0 + 1)
    second = put(store, 2, held=False)
    assert second.outcome == "created" and list(pending(store)) == [second.id]


def test_a_replace_stores_one_follower_that_waits_for_the_leaders_ack(store):
    leader, info = running_leader(store)
    follower = put(store, 2, delay=1)
    assert follower.outcome == "created" and follower.id != leader
    assert pending(store) == {}  # never due beside its leader
    assert follower_mark(store) == f"{follower.id}|{int((T0 + 3) * 1000)}".encode()
    again = put(store, 3, delay=0, record=rec(args=("latest",)))
    assert (again.outcome, again.id) == ("replaced", follower.id)
    assert decode_record(store.client.hget(store.key(Q, "jobs"), follower.id)).args == ["latest"]
    assert claim(store, now=T0 + 4, token="w#2").jobs == []  # the leader still runs
    assert store.ack(Q, [(leader, "w#1", info)], now=T0 + 5) == [1]
    # due at max(its own due 3, the leader's end 5), and it holds the key now
    assert pending(store) == {follower.id: 5}
    assert store.client.hget(store.key(Q, "keys"), KEY) == follower.id.encode()
    assert follower_mark(store) is None


def test_a_followers_later_due_time_is_honoured_as_not_before(store):
    leader, info = running_leader(store)
    follower = put(store, 2, delay=100)
    store.ack(Q, [(leader, "w#1", info)], now=T0 + 5)
    assert pending(store) == {follower.id: 102}


def test_the_ack_riding_on_the_next_claim_promotes_the_follower(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    got = store.claim(
        Q, 10, lease=30, token="w#2", instance="w", now=T0 + 5, acks=[(leader, "w#1", info)]
    )
    assert got.acked == [1]
    assert pending(store) == {follower.id: 5}  # promoted by the ack the claim carried
    assert [j.id for j in claim(store, now=T0 + 6, token="w#3").jobs] == [follower.id]


def test_the_leader_going_dead_promotes_the_follower(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    assert fail(store, leader, delay=-1, now=T0 + 6)[0] == "dead"
    assert pending(store) == {follower.id: 6}


def test_a_retry_of_the_leader_keeps_the_follower_waiting_until_its_last_end(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    assert fail(store, leader, delay=10, now=T0 + 3)[0] == "retry"
    assert pending(store) == {leader: 13}  # the leader only: the follower still waits
    assert follower_mark(store) is not None
    job = claim(store, now=T0 + 13, token="w#2").jobs[0]
    assert job.id == leader
    store.ack(Q, [(leader, "w#2", info)], now=T0 + 14)
    assert pending(store) == {follower.id: 14}


def test_a_recovery_after_a_lost_worker_keeps_the_follower_waiting(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    moved = recover(store, now=T0 + 40)  # the lease (30 s from 1) ran out
    assert [(r.id, r.outcome) for r in moved] == [(leader, "retry")]
    assert pending(store) == {leader: 40}
    claim(store, now=T0 + 41, token="w#3")
    store.ack(Q, [(leader, "w#3", info)], now=T0 + 42)
    assert pending(store) == {follower.id: 42}


def test_a_recovery_that_dead_letters_the_leader_promotes_the_follower(store):
    spec = JobSpec("tests.testapp.tasks.add", [0], {}, KEY, 0, held=True)
    leader = put(store, record=encode_job(spec).data).id
    claim(store, now=T0 + 1)
    start(store, leader, now=T0 + 1)
    follower = put(store, 2)
    moved = recover(store, now=T0 + 40)
    assert [(r.id, r.outcome) for r in moved] == [(leader, "dead")]
    assert pending(store) == {follower.id: 40}


def test_the_leader_expiring_promotes_the_follower(store):
    leader = put(store).id
    claim(store, now=T0 + 1)  # claimed, not started: expire.lua's case
    follower = put(store, 2)
    assert store.call(expire_op(store, Q, [(leader, "w#1", T0)], now=T0 + 3)) == [1]
    assert pending(store) == {follower.id: 3}


def test_cancelling_the_pending_leader_promotes_the_follower(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    fail(store, leader, delay=10, now=T0 + 3)
    assert store.cancel(Q, leader, now=T0 + 4)[0] == leader
    assert pending(store) == {follower.id: 4}


def test_cancel_by_key_while_the_leader_runs_cancels_the_follower(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    assert store.cancel(Q, key=KEY, now=T0 + 3)[0] == follower.id
    assert follower_mark(store) is None
    assert store.client.hget(store.key(Q, "jobs"), follower.id) is None
    store.ack(Q, [(leader, "w#1", info)], now=T0 + 5)
    assert pending(store) == {}


def test_cancel_of_the_follower_by_id(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    assert store.cancel(Q, follower.id, now=T0 + 3)[0] == follower.id
    assert store.cancel(Q, follower.id, now=T0 + 3) is None
    store.ack(Q, [(leader, "w#1", info)], now=T0 + 5)
    assert pending(store) == {}


def test_a_lost_reply_on_the_first_replace_sent_again_stores_nothing_more(store):
    leader, info = running_leader(store)
    job_id, record = new_job_id(), rec(args=("once",))
    op = store.schedule_op(Q, job_id, record, delay=0, key=KEY, now=T0 + 2)
    again = store.schedule_op(Q, job_id, record, delay=0, key=KEY, now=T0 + 3, relay=True)
    replies = store.run([op, again])
    assert [(r.outcome, r.id, r.waits_for) for r in replies] == [("created", job_id, leader)] * 2
    store.ack(Q, [(leader, "w#1", info)], now=T0 + 5)
    assert list(pending(store)) == [job_id]
    assert store.client.hlen(store.key(Q, "jobs")) == 1


def test_a_lost_reply_on_a_second_replace_sent_again_stores_nothing_more(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    job_id, record = new_job_id(), rec(args=("second",))
    op = store.schedule_op(Q, job_id, record, delay=0, key=KEY, now=T0 + 3)
    again = store.schedule_op(Q, job_id, record, delay=0, key=KEY, now=T0 + 4, relay=True)
    replies = store.run([op, again])
    assert [(r.outcome, r.id) for r in replies] == [("replaced", follower.id)] * 2
    store.ack(Q, [(leader, "w#1", info)], now=T0 + 5)
    assert list(pending(store)) == [follower.id]
    assert store.client.hlen(store.key(Q, "jobs")) == 1


def test_a_follower_an_old_worker_left_waiting_is_promoted_by_the_next_schedule(store):
    """A 0.7.0 worker's ack releases the key but promotes nothing: the key's next schedule
    promotes the follower first, then meets it as the key's pending job."""
    leader, _ = running_leader(store)
    follower = put(store, 2)
    # what 0.7.0's ack leaves: the leader gone, its key released, the follower still waiting
    store.ack(Q, [(leader, "w#1", f"={KEY}")], now=T0 + 5)
    assert pending(store) == {} and follower_mark(store) is not None
    kept = put(store, 6, on_conflict="keep")
    assert (kept.outcome, kept.id) == ("kept", follower.id)
    assert pending(store) == {follower.id: 6}


def test_a_plain_keyed_job_stores_no_follower_mark(store):
    put(store, held=False)
    claim(store, now=T0 + 1)
    put(store, 2, held=False)
    assert follower_mark(store) is None


@pytest.mark.parametrize("conflict", ["keep", "replace"])
def test_a_pending_leader_is_kept_or_replaced_as_today(store, conflict):
    first = put(store, delay=10)
    second = put(store, 1, delay=20, on_conflict=conflict)
    assert second.id == first.id
    assert second.outcome == ("kept" if conflict == "keep" else "replaced")
    assert follower_mark(store) is None


# The API --------------------------------------------------------------------------------


@task(unique_until="end")
def reindex(customer):
    t.CALLS.append(("reindex", customer))


def flags_of(store, job_id: str) -> str:
    return decode_record(store.client.hget(store.key(Q, "jobs"), job_id)).flags


def start_leader(store, job_id: str) -> None:
    claimed = claim(store, now=time.time())
    assert [j.id for j in claimed.jobs] == [job_id]


def test_schedule_with_unique_until_end_stores_a_follower_while_the_job_runs(store):
    first = schedule(t.add, 1, 2, key=KEY, unique_until="end")
    assert "h" in flags_of(store, first.id)
    start_leader(store, first.id)
    kept = schedule(t.add, 3, 4, key=KEY, unique_until="end", on_conflict="keep")
    assert (kept.outcome, kept.id, kept.status) == ("kept", first.id, "running")
    follower = schedule(t.add, 5, 6, key=KEY, unique_until="end")
    assert follower.outcome == "created" and follower.status == "waiting"
    assert follower.waits_for == first.id
    got = get_job(follower.id)
    assert (got.status, got.waits_for, got.args) == ("waiting", first.id, [5, 6])
    assert pending(store) == {}


def test_the_task_default_applies_to_its_keyed_calls_only(store):
    keyed = reindex.schedule(42, key=KEY)
    assert "h" in flags_of(store, keyed.id)
    assert "h" not in flags_of(store, reindex.schedule(43).id)  # no key: nothing to hold
    assert "h" not in flags_of(store, reindex.schedule(44, key="k2", unique_until="start").id)
    assert "h" in flags_of(store, reindex.call(45).schedule(key="k3").id)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"unique_until": "end"}, "needs key="),
        ({"unique_until": "finish", "key": KEY}, "'finish'"),
        ({"unique_until": None, "key": KEY}, None),
    ],
)
def test_bad_unique_untils_are_refused_naming_the_value(store, options, named):
    if named is None:  # None: the task's default ("start")
        assert "h" not in flags_of(store, schedule(t.add, 1, 2, **options).id)
        return
    with pytest.raises(ValueError, match="unique_until") as raised:
        schedule(t.add, 1, 2, **options)
    assert named in str(raised.value)
    assert store.client.hlen(store.key(Q, "jobs")) == 0


def test_task_unique_until_is_checked_when_the_decorator_is_written():
    with pytest.raises(ValueError, match=r"@task\(unique_until=\.\.\.\).*'always'"):
        task(unique_until="always")(lambda: None)


def test_schedule_many_and_the_outbox_carry_it_in_the_record(store, db):
    jobs = schedule_many(t.add, [(1, 2)], key=KEY, unique_until="end")
    assert "h" in flags_of(store, jobs[0].id)
    from django_delayq.models import OutboxJob
    from django_delayq.outbox.relay import relay_now

    start_leader(store, jobs[0].id)
    with transaction.atomic():
        row = schedule(t.add, 3, 4, key=KEY, unique_until="end", on_commit=True)
    assert b"h" in bytes(OutboxJob.objects.get(id=row.id).record).split(b"=")[0]
    assert relay_now(store, "default", [row.id])  # (the test's transaction never commits)
    # relayed while the key's job runs: the row's job is its follower, under the row's id
    got = get_job(row.id)
    assert (got.status, got.waits_for) == ("waiting", jobs[0].id)
    assert "h" in flags_of(store, row.id) and pending(store) == {}


def test_a_batch_member_refuses_it_naming_why(store):
    from django_delayq import batch

    with pytest.raises(ValueError, match="batch or chain"), batch():
        schedule(t.add, 1, 2, key=KEY, unique_until="end")


@pytest.mark.parametrize("redis_client", ["real"], indirect=True)  # the async API: a server
def test_aschedule_takes_unique_until(store):
    from django_delayq import aschedule

    first = asyncio.run(aschedule(t.add, 1, 2, key=KEY, unique_until="end"))
    start_leader(store, first.id)
    follower = asyncio.run(aschedule(t.add, 3, 4, key=KEY, unique_until="end"))
    assert follower.status == "waiting" and follower.id != first.id


def test_the_admin_job_page_shows_unique_until_and_the_leader_escaped(store, admin_client):
    first = schedule(t.add, 1, 2, key=KEY, unique_until="end")
    start_leader(store, first.id)
    follower = schedule(t.add, 5, 6, key=KEY)
    assert get_job(first.id).unique_until == "end" and follower.unique_until == "start"
    page = admin_client.get(url("detail", Q, follower.id)).content.decode()
    assert f"waits for {first.id}" in page
    leader_page = admin_client.get(url("detail", Q, first.id)).content.decode()
    assert "the key holds while it runs" in leader_page
