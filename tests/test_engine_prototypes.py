"""The lean scripts of benchmarks/prototypes/engine do today's work for plain jobs, so what
benchmarks/engine_cost.py --prototypes measures of them is a fair comparison: on the same
plain jobs, schedule_plain.lua stores what schedule.lua stores, and claim_plain.lua (with
its acks) leaves every key of the queue as claim.lua leaves it."""

from __future__ import annotations

from typing import Any

from benchmarks.prototypes.engine import claim_keys, schedule_keys, text
from django_delayq.jobs.record import encode_record
from django_delayq.storage.keys import KEY_KINDS

T0 = 1_700_000_000_000  # epoch ms
IDS = [f"{i:026d}" for i in range(5)]


def record(i: int) -> bytes:
    return encode_record("tests.tasks.noop", [i], {}, max_retries=3)


def dump(store: Any, queue: str) -> dict[str, Any]:
    """Every key of ``queue``, read whole (the kinds and their contents)."""
    client, out = store.client, {}
    for kind in KEY_KINDS:
        key = store.key(queue, kind)
        kind_of = client.type(key).decode()
        if kind_of == "zset":
            out[kind] = client.zrange(key, 0, -1, withscores=True)
        elif kind_of == "hash":
            out[kind] = client.hgetall(key)
        elif kind_of == "list":
            out[kind] = client.lrange(key, 0, -1)
    return out


def plain_schedule(store: Any, queue: str, i: int, now: int) -> list:
    sha = store.client.script_load(text("schedule_plain"))
    keys = schedule_keys(store, queue=queue)
    return store.client.evalsha(sha, len(keys), *keys, IDS[i], record(i), 0, now, queue)


def plain_claim(store: Any, queue: str, token: str, now: int, acks: list) -> list:
    sha = store.client.script_load(text("claim_plain"))
    keys = claim_keys(store, queue)
    flat = [part for entry in acks for part in entry]
    return store.client.evalsha(sha, len(keys), *keys, now, 3, 30_000, token, "w", 0, 0, *flat)


def test_schedule_plain_stores_what_schedule_stores(store):
    for i in range(3):
        store.schedule("today", IDS[i], record(i), delay=0, now=(T0 + i) / 1000)
        reply = plain_schedule(store, "lean", i, T0 + i)
        assert reply == [b"created", IDS[i].encode(), T0 + i]
    assert dump(store, "lean") == dump(store, "today")
    # sent again: the same answer, nothing stored twice
    assert plain_schedule(store, "lean", 0, T0 + 9) == [b"created", IDS[0].encode(), T0]
    assert dump(store, "lean") == dump(store, "today")


def test_claim_plain_leases_and_acknowledges_as_claim_does(store):
    for queue in ("today", "lean"):
        for i in range(5):
            store.schedule(queue, IDS[i], record(i), delay=0, now=(T0 + i) / 1000)
    due = T0 + 10  # all five due; a claim takes 3
    first = store.claim("today", 3, lease=30.0, token="w#1", instance="w", now=due / 1000)
    reply = plain_claim(store, "lean", "w#1", due, [])
    assert [c.id for c in first.jobs] == [j.decode() for j in reply[3][0::4]] == IDS[:3]
    assert dump(store, "lean") == dump(store, "today")
    acks = [(c.id, "w#1", "", "") for c in first.jobs]
    later = T0 + 1000
    second = store.claim(
        "today", 3, lease=30.0, token="w#2", instance="w", acks=acks, keep=(0, 0), now=later / 1000
    )
    reply = plain_claim(store, "lean", "w#2", later, acks)
    assert second.acked == reply[2] == [1, 1, 1]
    assert [c.id for c in second.jobs] == [j.decode() for j in reply[3][0::4]] == IDS[3:]
    assert dump(store, "lean") == dump(store, "today")
