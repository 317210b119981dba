"""The store's contract, run on fakeredis and on the real Redis server (``store`` fixture).

Time is passed to every script explicitly (``now=``), so nothing here sleeps.
"""

from __future__ import annotations

import json
import re
import time
from importlib import resources

import pytest

from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.job import decode_record, encode_record, new_job_id
from django_delayq.store import KEY_KINDS, SCRIPTS, Store

T0 = 1_800_000_000.0
Q = "default"
DEAD_OPTS = {"dead_max_age": 3600.0, "dead_max_count": 100, "max_errors": 10}


def put(store: Store, delay: float = 0.0, key: str | None = None, now: float = T0, **kw) -> str:
    job_id = new_job_id()
    record = encode_record("tests.testapp.tasks.add", [1, 2], {}, key)
    result = store.schedule(Q, job_id, record, delay=delay, key=key, now=now, **kw)
    return result.id


def claim(store: Store, limit: int = 10, now: float = T0, token: str = "tok", lease: float = 30):
    return store.claim(Q, limit, lease=lease, token=token, worker="w1", now=now)


def fail(
    store: Store,
    job_id: str,
    token: str = "tok",
    delay: float = 0.0,
    max_retries: int = 1,
    now: float = T0,
    key: str | None = None,
):
    error = {"type": "builtins.ValueError", "message": "boom", "traceback": "tb", "attempt": 1}
    return store.fail(
        Q, job_id, token, error, delay=delay, max_retries=max_retries, key=key, now=now, **DEAD_OPTS
    )


def members(store: Store, kind: str) -> set[str]:
    return {m.decode() for m in store.client.zrange(store.key(Q, kind), 0, -1)}


def test_keys_share_one_hash_tag(store):
    keys = store.keys("emails")
    assert all(re.match(rf"^{store.prefix}:\{{emails\}}:[a-z]+$", k) for k in keys)
    assert [k.rsplit(":", 1)[1] for k in keys] == list(KEY_KINDS)
    with pytest.raises(ValueError, match="invalid queue name"):
        store.keys("bad{queue}")


def test_every_script_is_registered_and_has_its_header():
    lua = resources.files("django_delayq") / "lua"
    names = sorted(
        p.name[:-4] for p in lua.iterdir() if p.name.endswith(".lua") and p.name != "_lib.lua"
    )
    assert names == sorted(SCRIPTS)
    for name in names:
        text = (lua / f"{name}.lua").read_text()
        assert text.startswith(f"-- {name}.lua: "), name
        assert "-- KEYS:" in text and "-- Returns" in text, name
        for index in {int(i) for i in re.findall(r"ARGV\[(\d+)\]", text)}:
            assert (
                f"-- ARGV[{index}]" in text
                or "ARGV[2..]" in text
                or "ARGV[3..]" in text
                or "ARGV[1..]" in text
            ), (name, index)


def test_schedule_then_claim_only_when_due(store):
    job_id = put(store, delay=60)
    assert claim(store, now=T0 + 59.9).jobs == []
    got = claim(store, now=T0 + 60)
    assert [j.id for j in got.jobs] == [job_id]
    assert got.jobs[0].attempts == 1
    assert decode_record(got.jobs[0].record)["args"] == [1, 2]
    assert members(store, "pending") == set() and members(store, "running") == {job_id}
    lease = store.client.zscore(store.key(Q, "running"), job_id)
    assert lease == pytest.approx(T0 + 60 + 30)


def test_claim_takes_due_jobs_in_due_order_up_to_limit(store):
    late = put(store, delay=5)
    early = put(store, delay=1)
    also = put(store, delay=3)
    put(store, delay=100)
    got = claim(store, limit=2, now=T0 + 10)
    assert [j.id for j in got.jobs] == [early, also]
    assert got.next_due == pytest.approx(T0 + 5)
    assert [j.id for j in claim(store, now=T0 + 10).jobs] == [late]


def test_at_in_the_past_means_now(store):
    job_id = store.schedule(Q, new_job_id(), b'{"t":"a.b"}', at=T0 - 500, now=T0).id
    assert store.client.zscore(store.key(Q, "pending"), job_id) == T0


def test_ack_needs_the_lease_token(store):
    job_id = put(store)
    claim(store, token="mine")
    assert store.ack(Q, [(job_id, "other", None)], now=T0) == [False]
    assert members(store, "running") == {job_id}
    assert store.ack(Q, [(job_id, "mine", None)], now=T0) == [True]
    assert members(store, "running") == set()
    assert store.fetch(Q, job_id) is None
    assert store.ack(Q, [(job_id, "mine", None)], now=T0) == [False]


def test_fail_retries_then_dead_letters(store):
    job_id = put(store)
    claim(store, token="a")
    assert fail(store, job_id, token="zzz") == ("lost", None)
    outcome, due = fail(store, job_id, token="a", delay=20, max_retries=1)
    assert outcome == "retry" and due == pytest.approx(T0 + 20)
    assert claim(store, now=T0 + 19).jobs == []
    again = claim(store, now=T0 + 20, token="b").jobs
    assert again[0].attempts == 2
    outcome, died = fail(store, job_id, token="b", max_retries=1, now=T0 + 21)
    assert outcome == "dead" and died == pytest.approx(T0 + 21)
    raw = store.fetch(Q, job_id)
    assert raw.status == "dead"
    meta = json.loads(raw.meta)
    assert meta["n"] == 2 and len(meta["e"]) == 2 and meta["e"][0]["message"] == "boom"


def test_negative_delay_dead_letters_at_once(store):
    job_id = put(store)
    claim(store)
    assert fail(store, job_id, delay=-1, max_retries=5)[0] == "dead"


def test_extend_pushes_the_lease_only_for_the_owner(store):
    job_id = put(store)
    claim(store, token="a", lease=10)
    assert store.extend(Q, [(job_id, "b")], 100, now=T0 + 5) == [False]
    assert store.extend(Q, [(job_id, "a")], 100, now=T0 + 5) == [True]
    assert store.client.zscore(store.key(Q, "running"), job_id) == pytest.approx(T0 + 105)


def test_recover_returns_expired_jobs_and_buries_exhausted_ones(store):
    first, second = put(store), put(store)
    claim(store, lease=10)
    store.client.hset(store.key(Q, "meta"), second, json.dumps({"n": 9, "t": "tok", "w": "w1"}))
    assert store.recover(Q, default_max_retries=3, now=T0 + 9, **DEAD_OPTS) == []
    moved = dict(store.recover(Q, default_max_retries=3, now=T0 + 11, **DEAD_OPTS))
    assert moved == {first: "retry", second: "dead"}
    assert members(store, "pending") == {first} and members(store, "dead") == {second}
    meta = json.loads(store.fetch(Q, first).meta)
    assert meta["e"][-1]["type"].endswith("LeaseLost") and "w1" in meta["e"][-1]["message"]
    # the old owner can no longer ack it
    assert store.ack(Q, [(first, "tok", None)], now=T0) == [False]


def test_recover_is_bounded_by_limit(store):
    for _ in range(5):
        put(store)
    claim(store, lease=1)
    assert len(store.recover(Q, default_max_retries=3, limit=2, now=T0 + 5, **DEAD_OPTS)) == 2
    assert len(members(store, "running")) == 3


def test_release_hands_back_without_counting_the_attempt(store):
    job_id = put(store)
    claim(store, token="a")
    assert store.release(Q, [(job_id, "a")], now=T0 + 1) == [True]
    assert claim(store, now=T0 + 1, token="b").jobs[0].attempts == 1


def test_unique_key_replace_keep_and_takeover(store):
    first = put(store, delay=60, key="order:1")
    replaced = store.schedule(
        Q, new_job_id(), encode_record("a.b", [2], {}, "order:1"), delay=120, key="order:1", now=T0
    )
    assert (replaced.outcome, replaced.id) == ("replaced", first)
    assert store.client.zscore(store.key(Q, "pending"), first) == T0 + 120
    kept = store.schedule(
        Q,
        new_job_id(),
        encode_record("a.b", [3], {}, "order:1"),
        delay=5,
        key="order:1",
        on_conflict="keep",
        now=T0,
    )
    assert kept.outcome == "kept" and kept.id == first and decode_record(kept.record)["args"] == [2]
    assert len(members(store, "pending")) == 1
    # once the keyed job runs, a new one with the same key is a new job
    claim(store, now=T0 + 500)
    new = put(store, delay=60, key="order:1", now=T0 + 500)
    assert new != first
    # the old run's ack must not free the key the new job holds
    assert store.ack(Q, [(first, "tok", "order:1")], now=T0) == [True]
    assert store.cancel(Q, key="order:1")[0] == new


def key_holder(store: Store, key: str) -> str | None:
    holder = store.client.hget(store.key(Q, "keys"), key)
    return holder.decode() if holder else None


def errors_of(store: Store, job_id: str) -> list[dict]:
    return json.loads(store.client.hget(store.key(Q, "meta"), job_id))["e"]


def test_a_unique_key_names_at_most_one_pending_job(store):
    # A keyed job fails while a new job with its key was scheduled: it is not retried next
    # to the new one (cancel(key=) could then stop only one of them) but dead-lettered.
    old = put(store, key="k")
    claim(store)
    new = put(store, delay=60, key="k")
    assert fail(store, old, key="k", max_retries=5) == ("dead", T0)
    assert members(store, "pending") == {new} and members(store, "dead") == {old}
    assert errors_of(store, old)[-1]["type"] == "django_delayq.exceptions.Superseded"
    # ... and requeueing it is refused while the new one is pending.
    assert store.requeue(Q, [old], now=T0) == [False]
    assert key_holder(store, "k") == new
    # Once the key is free, requeue takes it back.
    store.cancel(Q, key="k")
    assert store.requeue(Q, [old], now=T0) == [True]
    assert key_holder(store, "k") == old and members(store, "pending") == {old}


def test_recovery_respects_the_unique_key_too(store):
    old = put(store, key="k")
    claim(store, lease=10)
    new = put(store, delay=60, key="k")
    assert store.recover(Q, default_max_retries=5, now=T0 + 11, **DEAD_OPTS) == [(old, "dead")]
    assert errors_of(store, old)[-1]["type"] == "django_delayq.exceptions.Superseded"
    assert members(store, "pending") == {new} and key_holder(store, "k") == new
    # Without a competitor, a recovered or retried job keeps its key.
    store.cancel(Q, key="k")
    again = put(store, key="k2")
    claim(store, lease=10, now=T0 + 20)
    assert store.recover(Q, default_max_retries=5, now=T0 + 31, **DEAD_OPTS) == [(again, "retry")]
    assert key_holder(store, "k2") == again
    claim(store, now=T0 + 40)
    assert fail(store, again, key="k2", max_retries=5, now=T0 + 40)[0] == "retry"
    assert key_holder(store, "k2") == again


def test_a_released_job_does_not_share_its_key_with_a_pending_one(store):
    old = put(store, key="k")
    claim(store)
    new = put(store, delay=60, key="k")
    assert store.release(Q, [(old, "tok")], now=T0) == [True]
    assert members(store, "pending") == {new} and members(store, "dead") == {old}
    assert errors_of(store, old)[-1]["type"] == "django_delayq.exceptions.Superseded"
    # Without a competitor the job goes back to pending with its key, attempt not counted.
    store.cancel(Q, key="k")
    assert store.requeue(Q, [old], now=T0) == [True]
    claim(store, token="t2")
    assert store.release(Q, [(old, "t2")], now=T0) == [True]
    assert members(store, "pending") == {old} and key_holder(store, "k") == old


def test_replace_starts_the_attempts_over(store):
    job_id = put(store, key="k")
    claim(store)
    assert fail(store, job_id, key="k", max_retries=5, delay=30)[0] == "retry"
    store.schedule(Q, new_job_id(), encode_record("a.b", [9], {}, "k"), delay=5, key="k", now=T0)
    meta = json.loads(store.client.hget(store.key(Q, "meta"), job_id))
    assert meta["n"] == 0 and len(meta["e"]) == 1


def test_cancel_only_pending(store):
    job_id = put(store, key="k")
    assert store.cancel(Q, job_id=job_id)[0] == job_id
    assert store.cancel(Q, job_id=job_id) is None
    assert store.client.hget(store.key(Q, "keys"), "k") is None
    running = put(store)
    claim(store)
    assert store.cancel(Q, job_id=running) is None
    assert store.cancel(Q, key="nope") is None


def test_requeue_run_now_delete_and_purge(store):
    a, b = put(store), put(store)
    claim(store)
    fail(store, a, max_retries=0)
    fail(store, b, max_retries=0)
    assert store.requeue(Q, [a, "missing"], now=T0 + 1) == [True, False]
    assert claim(store, now=T0 + 1, token="x").jobs[0].attempts == 1  # attempts reset
    later = put(store, delay=1000)
    assert store.run_now(Q, [later, "missing"], now=T0 + 2) == [True, False]
    assert store.client.zscore(store.key(Q, "pending"), later) == T0 + 2
    assert store.delete_dead(Q, [b, later]) == [True, False]
    assert store.fetch(Q, b) is None
    for _ in range(3):
        job_id = put(store)
        claim(store, token="y", now=T0 + 3)
        fail(store, job_id, token="y", max_retries=0, now=T0 + 3)
    assert store.purge_dead(Q) == 3 and members(store, "dead") == set()


def test_dead_set_is_trimmed_by_age_and_count(store):
    ids = [put(store) for _ in range(4)]
    claim(store)
    opts = {**DEAD_OPTS, "dead_max_count": 2, "dead_max_age": 100.0}
    for i, job_id in enumerate(ids[:3]):
        store.fail(
            Q,
            job_id,
            "tok",
            {"message": "x"},
            delay=-1,
            max_retries=0,
            key=None,
            now=T0 + i,
            **opts,
        )
    assert members(store, "dead") == set(ids[1:3])  # trimmed to the 2 newest
    assert store.fetch(Q, ids[0]) is None  # its record went too
    store.fail(
        Q, ids[3], "tok", {"message": "x"}, delay=-1, max_retries=0, key=None, now=T0 + 150, **opts
    )
    assert members(store, "dead") == {ids[3]}  # the others were older than 100 s
    # On a quiet queue (nothing dies, nothing to recover) the periodic recover trims too.
    opts.pop("dead_max_count")
    assert store.recover(Q, default_max_retries=0, dead_max_count=2, now=T0 + 200, **opts) == []
    assert members(store, "dead") == {ids[3]}
    assert store.recover(Q, default_max_retries=0, dead_max_count=2, now=T0 + 251, **opts) == []
    assert members(store, "dead") == set() and store.fetch(Q, ids[3]) is None


def test_claim_dead_letters_an_id_without_record(store):
    store.client.zadd(store.key(Q, "pending"), {"01ORPHAN": T0})
    good = put(store)
    got = claim(store)
    assert [j.id for j in got.jobs] == [good]
    assert members(store, "dead") == {"01ORPHAN"}
    assert "missing" in json.loads(store.fetch(Q, "01ORPHAN").meta)["e"][0]["message"]


def test_schedule_wakes_a_worker_only_for_a_new_earliest_job(store):
    wake = store.key(Q, "wake")
    put(store, delay=100)
    assert store.client.llen(wake) == 1
    put(store, delay=200)
    assert store.client.llen(wake) == 1  # not the earliest: no token
    put(store, delay=50)
    assert store.client.llen(wake) == 2
    for i in range(20):
        put(store, delay=40 - i)  # each one is the new earliest
    assert store.client.llen(wake) == 8  # bounded


def test_claim_passes_the_wake_token_on_when_due_jobs_remain(store):
    for _ in range(3):
        put(store)
    store.client.delete(store.key(Q, "wake"))
    claim(store, limit=1)
    assert store.client.llen(store.key(Q, "wake")) == 1


def test_pipelined_run_returns_each_result(store):
    a, b = put(store), put(store)
    claim(store)
    ops = [
        store.ack_op(Q, [(a, "tok", None)], now=T0),
        store.ack_op(Q, [(b, "wrong", None)], now=T0),
        store.claim_op(Q, 5, lease=10, token="t2", now=T0),
    ]
    acked, refused, claimed = store.run(ops)
    assert acked == [True] and refused == [False] and claimed.jobs == []


def test_counts_page_and_throughput(store):
    ids = [put(store, delay=d) for d in (-5, 10, 20)]  # a past due time means now
    counts = store.counts(Q, now=T0)
    assert counts == {"pending": 3, "due": 1, "running": 0, "dead": 0, "oldest_due_at": T0}
    page = store.page(Q, "pending", 1, 2)
    assert [r.id for r in page] == ids[1:] and page[0].score == T0 + 10
    claim(store, now=T0)
    store.ack(Q, [(ids[0], "tok", None)], now=T0 + 60)
    series = store.throughput(Q, now=T0 + 60, minutes=5)
    assert series["d"][-1] == 1 and sum(series["f"]) == 0


def test_unreachable_redis_raises_delayq_connection_error():
    import redis

    store = Store(redis.Redis(port=1, socket_connect_timeout=0.2), prefix="x")
    with pytest.raises(DelayQConnectionError, match="unreachable"):
        store.schedule(Q, new_job_id(), b'{"t":"a.b"}', delay=1)


def test_claim_at_exactly_the_due_time(store):
    due = T0 + 0.1234561234  # rounds down at 6 digits than a 6-decimal rendering keeps
    job_id = store.schedule(Q, new_job_id(), b'{"t":"a.b"}', at=due, now=T0).id
    assert [j.id for j in claim(store, now=due).jobs] == [job_id]


def test_page_with_no_room_reads_nothing(store):
    put(store)
    assert store.page(Q, "pending", 0, 0) == [] and store.page(Q, "pending", -1, 5) == []


V1_RECORD = b'{"t":"a.b","a":[1],"u":"order:9","r":0}'  # format 1, as 0.1 wrote it


@pytest.mark.parametrize(
    "record",
    [V1_RECORD, encode_record("a.b", [1], {}, "order:9", 0)],
    ids=["format1", "format2"],
)
def test_scripts_read_key_and_max_retries_of_both_record_formats(store, record):
    job_id = store.schedule(Q, new_job_id(), record, key="order:9", now=T0).id
    claim(store, now=T0, lease=10)
    # max_retries 0 from the record: the expired lease dead-letters it, releasing the key.
    assert store.recover(Q, default_max_retries=5, now=T0 + 11, **DEAD_OPTS) == [(job_id, "dead")]
    assert store.id_for_key(Q, "order:9") is None
    second = store.schedule(Q, new_job_id(), record, key="order:9", now=T0).id
    assert store.cancel(Q, key="order:9") == (second, record)
    assert store.id_for_key(Q, "order:9") is None


def test_an_idle_wake_wait_never_outlasts_the_socket_read_timeout(real_client):
    """redis-py 8 connections default to a 5 s read timeout that connection_kwargs do not
    show; a BLPOP as long as MAX_SLEEP (5 s) then failed as if Redis were unreachable."""
    import redis as redis_py
    from django.conf import settings

    plain = Store(redis_py.Redis.from_url(settings.REDIS_URL), prefix="dqt-wake")
    if int(redis_py.__version__.split(".")[0]) >= 8:
        assert plain.read_timeout() == 5
    short = Store(
        redis_py.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0), prefix="dqt-wake"
    )
    assert short.read_timeout() == 1.0
    began = time.monotonic()
    assert short.wait_for_wake([Q], timeout=5.0) is False  # no TimeoutError
    assert time.monotonic() - began < 1.0


def test_stream_answers_chunk_by_chunk_and_survives_a_script_flush(store):
    jobs = [(new_job_id(), encode_record("a.b", [i], {})) for i in range(6)]
    taken = jobs[0][0]
    chunks = [
        [store.schedule_many_op(Q, [(i, r, {"delay": 5.0}) for i, r in jobs[:3]], now=T0)],
        # the same id with another record: refused, and the chunk behind it still runs
        [store.schedule_many_op(Q, [(taken, b'["x.y"]', {"delay": 5.0})], now=T0)],
        [store.schedule_many_op(Q, [(i, r, {"at": T0 + 9}) for i, r in jobs[3:]], now=T0)],
    ]
    first, refused, last = store.stream(iter(chunks))
    assert [s.due_at for s in first[0]] == [T0 + 5] * 3
    assert "DUPLICATE_ID" in str(refused[0])
    assert [s.due_at for s in last[0]] == [T0 + 9] * 3
    store.client.script_flush()  # Redis forgot the scripts: NOSCRIPT, loaded and sent again
    resend = [(jobs[0][0], jobs[0][1], {"delay": 60.0})]
    ((again,),) = store.stream([[store.schedule_many_op(Q, resend, now=T0)]])
    assert again[0].due_at == T0 + 5  # the re-sent job answers with its stored due time
    assert len(members(store, "pending")) == 6


def test_scripts_carry_only_the_helpers_they_use():
    from django_delayq.store import _lib_parts, script_source

    lib = (resources.files("django_delayq") / "lua" / "_lib.lua").read_text()
    preamble, parts = _lib_parts(lib)
    assert sorted((preamble + "".join(t for _, t in parts)).splitlines()) == sorted(
        lib.splitlines()
    )  # nothing of _lib.lua lost or duplicated by the split
    helpers = lambda name: re.findall(r"^local function (\w+)", script_source(name), re.M)  # noqa: E731
    assert helpers("delete") == ["forget"]
    assert helpers("schedule_many") == ["clock", "fmt", "wake"]
    assert "ack_from" in helpers("claim") and "trim_dead" not in helpers("claim")
    assert script_source("claim").startswith(preamble)
