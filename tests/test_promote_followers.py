"""Followers an older worker left waiting (lua/promote_followers.lua, storage/followers.py):
a 0.7.0 worker's end of a leader (``unique_until="end"``) promotes no follower; the recovery
duty's scan of ``keys`` does, once the leader has ended, never while it is pending or
running. On fakeredis and the real server (``store`` fixture); times injected (``now=``)."""

from __future__ import annotations

import threading

import pytest

from django_delayq.worker.maintenance import Recovery
from tests.test_store import DEAD_OPTS, T0, Q, claim, fail
from tests.test_unique_until import KEY, follower_mark, pending, put, running_leader


def promote(store, now: float = 10, cursor: int = 0, count: int = 500):
    return store.followers.promote(Q, cursor, count, now=T0 + now)


def keys_hash(store) -> dict[bytes, bytes]:
    return store.client.hgetall(store.key(Q, "keys"))


def old_ack(store, leader: str) -> None:
    """What 0.7.0's ack leaves: the leader gone, its key released, no follower promoted
    (the info it sends has no flag 'h')."""
    assert store.ack(Q, [(leader, "w#1", f"={KEY}")], now=T0 + 5) == [1]


def test_a_follower_whose_leader_an_old_worker_acked_is_promoted(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    old_ack(store, leader)
    assert pending(store) == {} and follower_mark(store) is not None
    assert promote(store) == (0, [follower.id])
    assert pending(store) == {follower.id: 10}
    assert follower_mark(store) is None
    assert store.client.hget(store.key(Q, "keys"), KEY) == follower.id.encode()
    assert [j.id for j in claim(store, now=T0 + 11, token="w#2").jobs] == [follower.id]


def test_its_own_later_due_time_is_kept_as_not_before(store):
    leader, _ = running_leader(store)
    follower = put(store, 2, delay=100)
    old_ack(store, leader)
    assert promote(store)[1] == [follower.id]
    assert pending(store) == {follower.id: 102}


def test_a_follower_whose_leader_lies_dead_is_promoted_and_takes_the_key(store):
    """What an old worker's dead-letter may leave: the leader in `dead`, the key naming it."""
    leader, _ = running_leader(store)
    follower = put(store, 2)
    client = store.client
    client.zrem(store.key(Q, "running"), leader)
    client.zadd(store.key(Q, "dead"), {leader: (T0 + 5) * 1000})
    client.hset(store.key(Q, "state"), leader, "1|~w#1")
    assert client.hget(store.key(Q, "keys"), KEY) == leader.encode()
    assert promote(store) == (0, [follower.id])
    assert pending(store) == {follower.id: 10}
    assert client.hget(store.key(Q, "keys"), KEY) == follower.id.encode()


def test_a_follower_whose_leader_record_is_gone_is_promoted(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    client = store.client
    for kind in ("jobs", "state"):
        client.hdel(store.key(Q, kind), leader)
    client.zrem(store.key(Q, "running"), leader)
    assert promote(store)[1] == [follower.id]
    assert pending(store) == {follower.id: 10}


def test_a_running_leader_holds_its_follower_back(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    before = keys_hash(store)
    assert promote(store) == (0, [])
    assert pending(store) == {} and keys_hash(store) == before
    assert store.client.hget(store.key(Q, "keys"), KEY) == leader.encode()
    assert follower_mark(store).startswith(follower.id.encode() + b"|")


def test_a_leader_pending_for_its_retry_holds_its_follower_back(store):
    leader, info = running_leader(store)
    follower = put(store, 2)
    assert fail(store, leader, delay=10, now=T0 + 3)[0] == "retry"
    before = keys_hash(store)
    assert promote(store) == (0, [])
    assert pending(store) == {leader: 13} and keys_hash(store) == before
    # its last end promotes the follower, as ever; the scan then finds nothing to do
    claim(store, now=T0 + 13, token="w#2")
    store.ack(Q, [(leader, "w#2", info)], now=T0 + 14)
    assert pending(store) == {follower.id: 14}
    assert promote(store) == (0, [])


def test_a_leader_claimed_but_not_started_holds_its_follower_back(store):
    """Its lease (the state's token) holds it, whatever its score in `running`."""
    leader = put(store).id
    claim(store, now=T0 + 1)
    put(store, 2)
    store.client.zrem(store.key(Q, "running"), leader)  # only the lease says it runs
    assert promote(store) == (0, []) and pending(store) == {}


def test_a_re_sent_call_promotes_nothing_twice(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    old_ack(store, leader)
    assert promote(store)[1] == [follower.id]
    after = (keys_hash(store), pending(store))
    assert promote(store) == (0, [])
    assert promote(store, now=20) == (0, [])
    assert (keys_hash(store), pending(store)) == after


def test_keys_without_a_follower_are_untouched(store):
    store.client.hset(store.key(Q, "keys"), mapping={"a": "x", "\0db": "y|1", "c": "z"})
    before = keys_hash(store)
    assert promote(store) == (0, [])
    assert keys_hash(store) == before and pending(store) == {}


def test_a_queue_without_keys_answers_a_finished_scan(store):
    assert promote(store) == (0, [])
    assert not store.client.exists(store.key(Q, "keys"))


def test_the_scan_goes_round_a_large_hash_in_steps(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    old_ack(store, leader)
    many = {f"other:{i}": f"id{i}" for i in range(600)}  # beyond a listpack: a real scan
    store.client.hset(store.key(Q, "keys"), mapping=many)
    cursor, found, steps = 0, [], 0
    while True:
        cursor, ids = promote(store, cursor=cursor, count=50)
        found += ids
        steps += 1
        if cursor == 0:
            break
    assert found == [follower.id] and steps > 1
    assert pending(store) == {follower.id: 10}


@pytest.mark.parametrize("count", [0, -1, 1.5, "5", True])
def test_a_bad_count_is_refused_naming_the_value(store, count):
    with pytest.raises(ValueError, match=repr(count).replace(".", r"\.")):
        store.followers.promote_op(Q, 0, count)


def test_the_recovery_duty_promotes_them_and_keeps_its_cursor(store):
    leader, _ = running_leader(store)
    follower = put(store, 2)
    old_ack(store, leader)
    recovery = Recovery(
        store, [Q, "other"], "w", DEAD_OPTS, 5, threading.Event(), lambda: T0 + 10, every=1.0
    )
    assert recovery.promote_followers() == [follower.id]
    assert pending(store) == {follower.id: 10}
    assert recovery.promote_followers() == []
    recovery.step()  # a whole pass: recovery, the sweep, the scan
    assert pending(store) == {follower.id: 10}
