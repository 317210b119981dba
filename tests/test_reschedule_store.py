"""reschedule.lua's contract on fakeredis and the real server (``store`` fixture): a pending
job's due time moves wherever it waits (``pending``, ``ranked``, ``parked``), by id or by
unique key; a job not pending is left as it is; a re-send after a lost reply moves nothing
again. Time is passed explicitly (``now=``)."""

from __future__ import annotations

import pytest

from django_delayq.exceptions import DelayQError
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.storage.ops import Op
from django_delayq.storage.store import DONE_TTL
from tests.test_groups import claim as claim_grouped
from tests.test_groups import limit, parked
from tests.test_groups import put as put_grouped
from tests.test_store import T0, Q, claim, fail, members, put, record, score, start


def resent(op: Op) -> Op:
    """The op as the transport sends it again after a lost reply."""
    return Op(op.resend_args, op.parse, op.policy, op.route, op.script)


def wakes(store) -> int:
    return store.client.llen(store.key(Q, "wake"))


def test_by_id_moves_a_pending_job_later_and_earlier(store):
    job_id = put(store, delay=60)
    moved = store.reschedule(Q, job_id, delay=600, now=T0)
    assert (moved.id, moved.due_at, moved.record) == (job_id, T0 + 600, record())
    assert score(store, "pending", job_id) == T0 + 600
    assert store.reschedule(Q, job_id, at=T0 + 5, now=T0 + 1).due_at == T0 + 5
    assert score(store, "pending", job_id) == T0 + 5
    assert store.reschedule(Q, job_id, at=T0 - 100, now=T0 + 2).due_at == T0 + 2  # past: now
    assert store.reschedule(Q, job_id, delay=-5, now=T0 + 3).due_at == T0 + 3  # negative: now
    assert [j.id for j in claim(store, now=T0 + 3).jobs] == [job_id]


def test_by_key_moves_the_keys_job_and_keeps_the_key(store):
    job_id = put(store, delay=60, key="login:7")
    moved = store.reschedule(Q, key="login:7", delay=120, now=T0 + 30)
    assert (moved.id, moved.due_at) == (job_id, T0 + 150)
    assert store.id_for_key(Q, "login:7") == job_id
    assert store.reschedule(Q, key="nobody", delay=1, now=T0) is None


def test_a_job_not_pending_is_left_as_it_is(store):
    running = put(store)
    claim(store)  # claimed, not started
    assert store.reschedule(Q, running, delay=60, now=T0) is None
    start(store, running)
    assert store.reschedule(Q, running, delay=60, now=T0) is None
    assert members(store, "pending") == set() and members(store, "running") == {running}
    assert store.reschedule(Q, new_job_id(), delay=60, now=T0) is None  # unknown
    fail(store, running)  # max_retries 1: a retry, pending again with its backoff
    assert store.reschedule(Q, running, delay=60, now=T0 + 1).due_at == T0 + 61
    assert store.client.zcard(store.key(Q, "done")) == 1  # the mark of the call that moved
    put(store, key="k")
    claim(store, token="w#2")
    assert store.reschedule(Q, key="k", delay=5, now=T0) is None  # the key's job runs


def test_dead_and_finished_jobs_are_not_pending(store):
    dead = put(store, max_retries=0)
    claim(store)
    start(store, dead)
    assert fail(store, dead)[0] == "dead"
    assert store.reschedule(Q, dead, delay=1, now=T0) is None
    done = put(store, flags="i")
    claim(store, token="w#2")
    store.ack(Q, [(done, "w#2", "i")], now=T0)
    assert store.reschedule(Q, done, delay=1, now=T0) is None
    assert store.fetch(Q, done) is None and members(store, "pending") == set()


def test_a_priority_is_kept(store):
    rec = encode_record("tests.testapp.tasks.add", [1], {}, None, 1, "", 7)
    job_id = store.schedule(Q, new_job_id(), rec, delay=60, now=T0).id
    assert store.reschedule(Q, job_id, delay=5, now=T0).due_at == T0 + 5
    assert members(store, "pending") == set()
    assert store.fetch(Q, job_id).score == T0 + 5
    plain = put(store, delay=1)
    # Due at T0 + 5 with priority 7: claimed before the plain job due earlier.
    assert [j.id for j in claim(store, now=T0 + 6, limit=1).jobs] == [job_id]
    assert [j.id for j in claim(store, now=T0 + 6, token="w#2").jobs] == [plain]


def test_a_parked_job_leaves_parked_at_its_new_time(store):
    limit(store, conc=1)
    a, b = put_grouped(store, "g"), put_grouped(store, "g")
    assert [j.id for j in claim_grouped(store, T0, "w#1").jobs] == [a]
    assert parked(store) == 1
    assert store.reschedule(Q, b, delay=60, now=T0 + 1).due_at == T0 + 61
    assert parked(store) == 0 and score(store, "pending", b) == T0 + 61
    assert store.client.hget(store.key(Q, "groups"), b) == b"tests.grouped\ng"
    assert store.fetch(Q, b).status == "pending"
    # a finishes: nothing parked comes back; b is claimed at its new time, in its group.
    assert claim_grouped(store, T0 + 2, "w#2", acks=[(a, "w#1", "g")]).jobs == []
    assert [j.id for j in claim_grouped(store, T0 + 61, "w#3").jobs] == [b]


def test_a_parked_job_moved_earlier_is_parked_again_while_its_group_is_full(store):
    limit(store, conc=1)
    a, b = put_grouped(store, "g"), put_grouped(store, "g")
    claim_grouped(store, T0, "w#1")
    assert store.reschedule(Q, b, delay=0, now=T0 + 1).due_at == T0 + 1
    assert claim_grouped(store, T0 + 2, "w#2").jobs == []
    assert parked(store) == 1  # parked again: the group still runs a
    assert [j.id for j in claim_grouped(store, T0 + 3, "w#3", acks=[(a, "w#1", "g")]).jobs] == [b]


def test_wakes_a_worker_only_when_the_job_becomes_the_first_due(store):
    first, second = put(store, delay=10), put(store, delay=20)
    store.client.delete(store.key(Q, "wake"))
    store.reschedule(Q, second, delay=30, now=T0)  # later: the sleep is short enough
    assert wakes(store) == 0
    store.reschedule(Q, second, delay=15, now=T0)  # still after `first`
    assert wakes(store) == 0
    store.reschedule(Q, second, delay=5, now=T0)  # before every other: wake
    assert wakes(store) == 1
    assert first in members(store, "pending")


def test_a_resend_after_a_lost_reply_moves_the_job_once(store):
    job_id = put(store, delay=60)
    op = store.reschedule_op(Q, job_id, delay=100, now=T0 + 10)
    again = store.reschedule_op(Q, job_id, delay=100, now=T0 + 20, call_id="other")
    first = store.call(op)
    assert first.due_at == T0 + 110
    # Sent again later (its now later too): the mark answers; nothing moves.
    repeat = resent(store.reschedule_op(Q, job_id, delay=100, now=T0 + 15, call_id=_call(op)))
    assert store.call(repeat) == first
    assert score(store, "pending", job_id) == T0 + 110
    # The re-send answers the same once the job ran, too.
    store.run_now(Q, [job_id], now=T0 + 16)
    claim(store, now=T0 + 16)
    assert store.call(repeat) == first
    assert store.call(again) is None  # another call: the job is not pending


def test_a_resend_whose_first_send_never_ran_moves_the_job(store):
    job_id = put(store, delay=60)
    assert store.call(resent(store.reschedule_op(Q, job_id, at=T0 + 5, now=T0))).due_at == T0 + 5
    assert score(store, "pending", job_id) == T0 + 5


def test_marks_go_after_done_ttl(store):
    job_id = put(store, delay=60)
    op = store.reschedule_op(Q, job_id, delay=100, now=T0)
    store.call(op)
    store.reschedule(Q, job_id, delay=100, now=T0 + DONE_TTL + 1)
    assert "r:" + _call(op) not in members(store, "done")
    assert len(members(store, "done")) == 1


def test_bad_input_is_refused_and_changes_nothing(store):
    job_id = put(store, delay=60)
    with pytest.raises(DelayQError, match="BAD_DUE"):
        store.reschedule(Q, job_id, at=1e13, now=T0)
    assert score(store, "pending", job_id) == T0 + 60
    assert members(store, "done") == set()
    with pytest.raises(ValueError, match="exactly one"):
        store.reschedule_op(Q, job_id, key="k", delay=1)
    with pytest.raises(ValueError, match="exactly one"):
        store.reschedule_op(Q, job_id, delay=1, at=T0)
    with pytest.raises(ValueError, match="exactly one"):
        store.reschedule_op(Q, job_id)


def test_a_done_key_of_the_wrong_type_fails_before_anything_moved(store):
    job_id = put(store, delay=60)
    store.client.set(store.key(Q, "done"), "x")
    with pytest.raises(DelayQError):
        store.reschedule(Q, job_id, delay=1, now=T0)
    assert score(store, "pending", job_id) == T0 + 60


def _call(op: Op) -> str:
    """The call id an op carries (ARGV[6])."""
    head = op.head_len
    value = op.args[head + 5]
    return value.decode() if isinstance(value, bytes) else value
