"""The store's contract, run on fakeredis and on the real Redis server (``store`` fixture).

Time is passed to every script explicitly (``now=``), so nothing here sleeps.
"""

from __future__ import annotations

import json
import re
import time
from importlib import resources

import pytest

from django_delayq import get_job
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.exceptions import DelayQError
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import RESERVED
from django_delayq.jobs.record import decode_record, encode_record
from django_delayq.jobs.state import frame_error, parse_errors, parse_state
from django_delayq.storage.keys import KEY_KINDS
from django_delayq.storage.scripts import SCRIPTS, _include_parts, script_source
from django_delayq.storage.store import DONE_TTL, Store

T0 = 1_800_000_000.0
Q = "default"
DEAD_OPTS = {"dead_max_age": 3600.0, "dead_max_count": 100, "max_errors": 10}


def record(key: str | None = None, max_retries: int = 1, flags: str = "", args=(1, 2)) -> bytes:
    return encode_record("tests.testapp.tasks.add", list(args), {}, key, max_retries, flags)


def put(store: Store, delay: float = 0.0, key: str | None = None, now: float = T0, **kw) -> str:
    rec = kw.pop("record", None) or record(key, kw.pop("max_retries", 1), kw.pop("flags", ""))
    return store.schedule(Q, new_job_id(), rec, delay=delay, key=key, now=now, **kw).id


def claim(store: Store, limit: int = 10, now: float = T0, token: str = "w#1", lease: float = 30):
    return store.claim(Q, limit, lease=lease, token=token, instance="w", now=now)


def start(store: Store, job_id: str, now: float = T0, lease: float = 30) -> None:
    """What a runner does before running a claimed job: mark it started."""
    store.call(store.mark_op(Q, job_id, now + lease))


def fail(store: Store, job_id: str, token: str = "w#1", delay: float = 0.0, now: float = T0):
    error = {"type": "builtins.ValueError", "message": "boom", "traceback": "tb", "attempt": 1}
    return store.fail(
        Q, job_id, token, error, delay=delay, default_max_retries=5, now=now, **DEAD_OPTS
    )


def recover(store: Store, now: float, token: str = "r#1", **kw):
    options = {**DEAD_OPTS, **kw}
    return store.recover(
        Q, token=token, instance="rescuer", default_max_retries=5, now=now, **options
    )


def score(store: Store, kind: str, job_id: str) -> float | None:
    """A job's score in one of the queue's sorted sets, in epoch seconds (Redis holds
    milliseconds)."""
    value = store.client.zscore(store.key(Q, kind), job_id)
    return None if value is None else value / 1000


def members(store: Store, kind: str) -> set[str]:
    return {m.decode() for m in store.client.zrange(store.key(Q, kind), 0, -1)}


def state(store: Store, job_id: str) -> tuple[int, str | None]:
    return parse_state(store.client.hget(store.key(Q, "state"), job_id))


def errors_of(store: Store, job_id: str) -> list[dict]:
    return parse_errors(store.client.hget(store.key(Q, "errors"), job_id))


def key_holder(store: Store, key: str) -> str | None:
    holder = store.client.hget(store.key(Q, "keys"), key)
    return holder.decode() if holder else None


def test_keys_share_one_hash_tag(store):
    keys = store.keys("emails")
    assert all(re.fullmatch(rf"{store.prefix}:\{{emails\}}:[a-z]+", k) for k in keys)
    assert [k.rsplit(":", 1)[1] for k in keys] == list(KEY_KINDS)
    for bad in ("bad{queue}", "abc\n", "", "x" * 65, "a b", ["x"], 7):
        with pytest.raises(ValueError, match="invalid queue name"):
            store.keys(bad)


def test_every_script_is_registered_and_documents_its_contract():
    lua = resources.files("django_delayq.storage") / "lua"
    names = sorted(p.name[:-4] for p in lua.iterdir() if p.name.endswith(".lua"))
    assert names == sorted(SCRIPTS)
    for name in names:
        text = (lua / f"{name}.lua").read_text()
        assert text.startswith(f"-- {name}.lua: "), name
        assert "-- KEYS:" in text and "-- Returns" in text, name
        documented = set(re.findall(r"^-- ARGV\[(\d+)\]", text, re.M))
        ranges = [int(i) for i in re.findall(r"^-- ARGV\[(\d+)\.\.\]", text, re.M)]
        for index in {int(i) for i in re.findall(r"ARGV\[(\d+)\]", text)}:
            assert str(index) in documented or any(index >= r for r in ranges), (name, index)


def test_scripts_carry_only_the_helpers_they_use():
    include = resources.files("django_delayq.storage") / "lua" / "include"
    for path in include.iterdir():
        rest = path.read_text().partition("\n\n")[2]
        preamble, parts = _include_parts(rest)
        assert sorted((preamble + "".join(t for _, t in parts)).splitlines()) == sorted(
            rest.splitlines()
        ), path.name  # nothing of an include lost or duplicated by the split
    helpers = lambda name: re.findall(r"^local function (\w+)", script_source(name), re.M)  # noqa: E731
    assert "ack_from" in helpers("claim") and "trim_dead" not in helpers("claim")
    assert "cjson" not in script_source("ack") and "cjson" not in script_source("schedule")
    keys = "local pending, running, dead, jobs, state, unique_keys, wake, stats, errors,"
    assert script_source("claim").startswith(keys)


def test_schedule_then_claim_only_when_due(store):
    job_id = put(store, delay=60)
    assert claim(store, now=T0 + 59.9).jobs == []
    got = claim(store, now=T0 + 60)
    assert [j.id for j in got.jobs] == [job_id]
    assert got.jobs[0].attempt == 1
    assert decode_record(got.jobs[0].record).args == [1, 2]
    assert members(store, "pending") == set() and members(store, "running") == {job_id}
    # Claimed but not started: the lease runs, the score says "not started".
    lease = score(store, "running", job_id)
    assert lease == pytest.approx(T0 + 60 + 30 - RESERVED)
    assert state(store, job_id) == (0, "w#1")  # no attempt counted yet


def test_claim_takes_due_jobs_in_due_order_up_to_limit(store):
    late = put(store, delay=5)
    early = put(store, delay=1)
    also = put(store, delay=3)
    put(store, delay=100)
    got = claim(store, limit=2, now=T0 + 10)
    assert [j.id for j in got.jobs] == [early, also]
    assert got.next_due == pytest.approx(T0 + 5)
    assert [j.id for j in claim(store, now=T0 + 10, token="w#2").jobs] == [late]


def test_at_in_the_past_means_now(store):
    job_id = store.schedule(Q, new_job_id(), record(), at=T0 - 500, now=T0).id
    assert score(store, "pending", job_id) == T0


def test_due_times_beyond_the_range_are_refused_before_anything_is_stored(store):
    for options in ({"delay": 1e20}, {"at": 1e300}, {"at": float("inf")}):
        with pytest.raises(DelayQError, match="BAD_DUE"):
            store.schedule(Q, new_job_id(), record(), now=T0, **options)
    assert store.client.hlen(store.key(Q, "jobs")) == 0


def test_ack_needs_the_lease_token_and_is_idempotent(store):
    job_id = put(store)
    claim(store, token="w#1")
    assert store.ack(Q, [(job_id, "other#1", "")], now=T0) == [-1]  # not ours: unchanged
    assert members(store, "running") == {job_id}
    assert store.ack(Q, [(job_id, "w#1", "")], now=T0) == [1]
    assert members(store, "running") == set() and store.fetch(Q, job_id) is None
    assert store.ack(Q, [(job_id, "w#1", "")], now=T0) == [0]  # sent again: already done


def test_a_started_job_counts_its_attempt_and_fail_retries_then_dead_letters(store):
    job_id = put(store, max_retries=1)
    claim(store, token="w#1")
    start(store, job_id)
    assert fail(store, job_id, token="zzz#1") == ("lost", None)
    outcome, due = fail(store, job_id, token="w#1", delay=20)
    assert outcome == "retry" and due == pytest.approx(T0 + 20)
    assert state(store, job_id)[0] == 1
    # Sent again after a lost reply: the same answer, nothing changes.
    assert fail(store, job_id, token="w#1", delay=20) == ("retry", pytest.approx(T0 + 20))
    assert claim(store, now=T0 + 19, token="w#2").jobs == []
    again = claim(store, now=T0 + 20, token="w#3").jobs
    assert again[0].attempt == 2
    start(store, job_id, now=T0 + 20)
    outcome, died = fail(store, job_id, token="w#3", now=T0 + 21)
    assert outcome == "dead" and died == pytest.approx(T0 + 21)
    assert fail(store, job_id, token="w#3", now=T0 + 30) == ("dead", pytest.approx(T0 + 21))
    raw = store.fetch(Q, job_id)
    assert raw.status == "dead" and parse_state(raw.state)[0] == 2
    errors = parse_errors(raw.errors)
    assert len(errors) == 2 and errors[0]["message"] == "boom"


def test_max_retries_comes_from_the_record_header(store):
    job_id = put(store, max_retries=0)
    claim(store)
    start(store, job_id)
    assert fail(store, job_id)[0] == "dead"  # default_max_retries=5 applies only to 0.1 records


def test_negative_delay_dead_letters_at_once(store):
    job_id = put(store, max_retries=5)
    claim(store)
    assert fail(store, job_id, delay=-1)[0] == "dead"


def test_errors_are_framed_and_trimmed_without_decoding(store):
    job_id = put(store, max_retries=50)
    store.client.hset(store.key(Q, "errors"), job_id, frame_error({"message": "old"}) + b"junk")
    for i in range(12):
        claim(store, token=f"w#{i}", now=T0 + i)
        err = {"message": f"e{i}", "nested": [[[[{"deep": "x" * 10}]]]]}
        store.fail(
            Q, job_id, f"w#{i}", err, delay=0, default_max_retries=5, now=T0 + i, **DEAD_OPTS
        )
    errors = errors_of(store, job_id)
    assert [e["message"] for e in errors] == [f"e{i}" for i in range(2, 12)]  # the last 10


def test_extend_pushes_the_lease_only_for_the_owner_and_keeps_not_started_jobs_so(store):
    job_id = put(store)
    claim(store, token="w#1", lease=10)
    assert store.extend(Q, [(job_id, "b#1")], 100, now=T0 + 5) == [False]
    assert store.extend(Q, [(job_id, "w#1")], 100, now=T0 + 5) == [True]
    assert score(store, "running", job_id) == pytest.approx(T0 + 105 - RESERVED)
    start(store, job_id, now=T0 + 6)
    assert score(store, "running", job_id) == pytest.approx(T0 + 36)
    assert store.extend(Q, [(job_id, "w#1")], 100, now=T0 + 7) == [True]
    assert score(store, "running", job_id) == pytest.approx(T0 + 107)


def test_a_start_mark_never_shortens_a_lease_nor_revives_a_settled_job(store):
    job_id = put(store)
    claim(store, lease=10)
    start(store, job_id, now=T0, lease=100)
    start(store, job_id, now=T0, lease=5)  # GT: a later lease is kept
    assert score(store, "running", job_id) == pytest.approx(T0 + 100)
    assert store.ack(Q, [(job_id, "w#1", "")], now=T0) == [1]
    start(store, job_id)  # XX: a mark that arrives after the ack creates nothing
    assert members(store, "running") == set()


def test_recover_refunds_jobs_never_started_and_charges_started_ones(store):
    unstarted, started, exhausted = put(store), put(store), put(store, max_retries=0)
    claim(store, lease=10)
    start(store, started, lease=10)
    start(store, exhausted, lease=10)
    assert recover(store, now=T0 + 9) == []
    moved = {r.id: r for r in recover(store, now=T0 + 11)}
    assert {i: r.outcome for i, r in moved.items()} == {
        unstarted: "refund",
        started: "retry",
        exhausted: "dead",
    }
    assert moved[unstarted].attempts == 0 and moved[started].attempts == 1
    assert moved[started].lost_token == "w#1" and moved[started].record == record()
    assert moved[started].error["type"].endswith("LeaseLost")
    assert members(store, "pending") == {unstarted, started}
    assert members(store, "dead") == {exhausted}
    assert errors_of(store, unstarted) == []
    assert "lease expired: worker w" in errors_of(store, started)[-1]["message"]
    assert errors_of(store, started)[-1]["worker"] == "w"  # the attempt's worker, for its page
    [lost] = get_job(started).attempt_history
    assert lost.worker == "w" and lost.number == 1 and lost.duration is None
    # The old owner can no longer ack it, nor record a failure.
    assert store.ack(Q, [(started, "w#1", "")], now=T0) == [-1]
    assert fail(store, started, token="w#1")[0] == "lost"
    # Recovered jobs count attempts on from there.
    got = {j.id: j.attempt for j in claim(store, now=T0 + 12, token="w#9").jobs}
    assert got == {unstarted: 1, started: 2}


def test_recover_sent_again_answers_the_same_and_moves_nothing(store):
    job_id = put(store)
    claim(store, lease=10)
    start(store, job_id, lease=10)
    first = recover(store, now=T0 + 11, token="r#7")
    assert [(r.id, r.outcome) for r in first] == [(job_id, "retry")]
    claim(store, now=T0 + 12, token="w#2")  # claimed again meanwhile
    again = recover(store, now=T0 + 13, token="r#7")
    assert [(r.id, r.outcome, r.attempts) for r in again] == [(job_id, "retry", 1)]
    assert members(store, "running") == {job_id}  # untouched by the re-send


def test_recover_is_bounded_by_limit(store):
    for _ in range(5):
        put(store)
    claim(store, lease=1)
    assert len(recover(store, now=T0 + 5, limit=2)) == 2
    assert len(members(store, "running")) == 3


def test_a_claim_sent_again_returns_what_the_first_send_leased(store):
    a, b, c = put(store), put(store), put(store)
    first = claim(store, limit=2, token="w#5")
    again = claim(store, limit=2, token="w#5")  # its reply was lost
    assert [j.id for j in again.jobs] == [j.id for j in first.jobs] == [a, b]
    assert members(store, "pending") == {c}
    # Acks ride along and answer "done" the second time.
    ack = [(a, "w#5", "")]
    assert store.claim(Q, 0, lease=30, token="w#6", instance="w", acks=ack, now=T0).acked == [1]
    assert store.claim(Q, 0, lease=30, token="w#6", instance="w", acks=ack, now=T0).acked == [0]
    # Sent again once more, it returns only what its token still holds.
    assert [j.id for j in claim(store, limit=2, token="w#5").jobs] == [b]
    # A new token claims anew.
    assert [j.id for j in claim(store, token="w#7").jobs] == [c]


def test_release_hands_back_without_counting_and_answers_twice(store):
    job_id = put(store)
    claim(store, token="w#1")
    start(store, job_id)
    assert store.release(Q, [(job_id, "w#1")], now=T0 + 1) == [1]
    assert store.release(Q, [(job_id, "w#1")], now=T0 + 1) == [1]  # sent again
    assert store.release(Q, [(job_id, "x#1")], now=T0 + 1) == [0]
    assert claim(store, now=T0 + 1, token="w#2").jobs[0].attempt == 1


def test_unique_key_replace_keep_and_takeover(store):
    first = put(store, delay=60, key="order:1")
    replaced = store.schedule(
        Q, new_job_id(), record("order:1", args=[2]), delay=120, key="order:1", now=T0
    )
    assert (replaced.outcome, replaced.id) == ("replaced", first)
    assert score(store, "pending", first) == T0 + 120
    kept = store.schedule(
        Q,
        new_job_id(),
        record("order:1", args=[3]),
        delay=5,
        key="order:1",
        on_conflict="keep",
        now=T0,
    )
    assert kept.outcome == "kept" and kept.id == first
    assert decode_record(kept.record).args == [2]
    assert len(members(store, "pending")) == 1
    # once the keyed job runs, a new one with the same key is a new job
    claim(store, now=T0 + 500)
    new = put(store, delay=60, key="order:1", now=T0 + 500)
    assert new != first
    # the old run's ack must not free the key the new job holds
    assert store.ack(Q, [(first, "w#1", "=order:1")], now=T0) == [1]
    assert store.cancel(Q, key="order:1")[0] == new


def test_a_unique_key_names_at_most_one_pending_job(store):
    # A keyed job fails while a new job with its key was scheduled: it is not retried next
    # to the new one (cancel(key=) could then stop only one of them) but dead-lettered.
    old = put(store, key="k", max_retries=5)
    claim(store)
    start(store, old)
    new = put(store, delay=60, key="k")
    assert fail(store, old) == ("dead", T0)
    assert members(store, "pending") == {new} and members(store, "dead") == {old}
    assert errors_of(store, old)[-1]["type"] == "django_delayq.exceptions.Superseded"
    # ... and requeueing it is refused (2: the key is held) while the new one is pending.
    assert store.requeue(Q, [old], now=T0) == [2]
    assert key_holder(store, "k") == new
    # Once the key is free, requeue takes it back.
    store.cancel(Q, key="k")
    assert store.requeue(Q, [old], now=T0) == [1]
    assert key_holder(store, "k") == old and members(store, "pending") == {old}


def test_recovery_and_release_respect_the_unique_key_too(store):
    old = put(store, key="k", max_retries=5)
    claim(store, lease=10)
    start(store, old, lease=10)
    new = put(store, delay=60, key="k")
    assert [(r.id, r.outcome) for r in recover(store, now=T0 + 11)] == [(old, "dead")]
    assert errors_of(store, old)[-1]["type"] == "django_delayq.exceptions.Superseded"
    assert members(store, "pending") == {new} and key_holder(store, "k") == new
    store.cancel(Q, key="k")
    assert store.requeue(Q, [old], now=T0 + 12) == [1]
    claim(store, now=T0 + 12, token="w#2")
    newer = put(store, delay=60, key="k", now=T0 + 12)
    assert store.release(Q, [(old, "w#2")], now=T0 + 13) == [2]  # dead-lettered instead
    assert key_holder(store, "k") == newer


def test_replace_starts_the_attempts_over(store):
    job_id = put(store, key="k", max_retries=5)
    claim(store)
    start(store, job_id)
    assert fail(store, job_id, delay=30)[0] == "retry"
    store.schedule(Q, new_job_id(), record("k", args=[9]), delay=5, key="k", now=T0)
    assert state(store, job_id)[0] == 0 and len(errors_of(store, job_id)) == 1


def test_cancel_only_pending_and_reads_only_the_header(store):
    nested: list = []
    for _ in range(500):  # deeper than Lua's cjson would decode: never decoded now
        nested = [nested]
    deep = encode_record("a.b", [nested], {}, "k", 0)
    job_id = store.schedule(Q, new_job_id(), deep, key="k", now=T0).id
    assert store.cancel(Q, job_id=job_id) == (job_id, deep)
    assert store.cancel(Q, job_id=job_id) is None
    assert key_holder(store, "k") is None
    for kind in ("jobs", "state", "errors"):
        assert not store.client.hexists(store.key(Q, kind), job_id)
    running = put(store)
    claim(store)
    assert store.cancel(Q, job_id=running) is None
    assert store.cancel(Q, key="nope") is None


def test_a_schedule_sent_again_never_stores_a_job_twice(store):
    job_id, rec = new_job_id(), record(flags="i")
    op = store.schedule_op(Q, job_id, rec, delay=0, now=T0)
    resend = type(op)(op.resend_args, op.parse, op.policy, op.route, op.script)
    assert store.call(op).outcome == "created"
    assert store.call(resend).outcome == "created"  # still pending: the same job
    claim(store)
    assert store.call(resend).outcome == "created"  # running: the same job
    assert store.ack(Q, [(job_id, "w#1", "i")], now=T0 + 1) == [1]
    again = store.call(resend)
    assert (again.outcome, again.id) == ("done", job_id)  # finished: not stored again
    assert store.fetch(Q, job_id) is None
    # The tombstone is dropped once DONE_TTL has passed, by a later finish.
    other = put(store, flags="i", now=T0 + DONE_TTL + 5)
    claim(store, now=T0 + DONE_TTL + 5, token="w#2")
    store.ack(Q, [(other, "w#2", "i")], now=T0 + DONE_TTL + 5)
    assert members(store, "done") == {other}


def test_a_replace_sent_again_never_stores_the_job_beside_the_one_it_replaced(store):
    """schedule(key=..., on_conflict='replace') replaced the key's pending job and its reply
    was lost; by the time it is sent again the replaced job may be pending, running or
    finished. The re-send must answer the replace, never store the record again as a new
    job (which would run it twice)."""
    held = put(store, delay=60, key="order:1", flags="i")
    new_id, rec = new_job_id(), record(key="order:1", flags="i", args=(3, 4))
    op = store.schedule_op(Q, new_id, rec, delay=0, key="order:1", now=T0)
    resend = type(op)(op.resend_args, op.parse, op.policy, op.route, op.script)

    def answer(call):
        result = store.call(call)
        return result.outcome, result.id

    assert answer(op) == ("replaced", held)
    assert answer(resend) == ("replaced", held)  # still pending
    assert [j.id for j in claim(store, now=T0 + 1).jobs] == [held]
    assert answer(resend) == ("replaced", held)  # running
    assert store.ack(Q, [(held, "w#1", "i=order:1")], now=T0 + 2) == [1]
    assert key_holder(store, "order:1") is None
    assert answer(resend) == ("done", new_id)  # finished
    assert members(store, "pending") == set() and members(store, "running") == set()
    assert store.client.hlen(store.key(Q, "jobs")) == 0


def test_cancelled_and_deleted_jobs_leave_tombstones_when_flagged(store):
    a = put(store, flags="i")
    b = put(store, flags="i", max_retries=0)
    plain = put(store)
    store.cancel(Q, job_id=a, now=T0)
    claim(store)
    start(store, b)
    fail(store, b)
    store.delete_dead(Q, [b], now=T0)
    store.cancel(Q, job_id=plain, now=T0)
    assert members(store, "done") == {a, b}


def test_requeue_run_now_delete_and_purge(store):
    a, b = put(store, max_retries=0), put(store, max_retries=0)
    claim(store)
    start(store, a)
    start(store, b)
    fail(store, a)
    fail(store, b)
    assert store.requeue(Q, [a, "missing"], now=T0 + 1) == [1, 0]
    assert claim(store, now=T0 + 1, token="x#1").jobs[0].attempt == 1  # attempts reset
    later = put(store, delay=1000)
    assert store.run_now(Q, [later, "missing"], now=T0 + 2) == [True, False]
    assert score(store, "pending", later) == T0 + 2
    assert store.delete_dead(Q, [b, later]) == [True, False]
    assert store.fetch(Q, b) is None
    for i in range(3):
        job_id = put(store, max_retries=0)
        claim(store, token=f"y#{i}", now=T0 + 3)
        fail(store, job_id, token=f"y#{i}", now=T0 + 3)
    assert store.purge_dead(Q) == 3 and members(store, "dead") == set()


def test_requeue_keeps_a_job_without_record_dead(store):
    store.client.zadd(store.key(Q, "dead"), {"01ORPHAN": T0 * 1000})
    assert store.requeue(Q, ["01ORPHAN"], now=T0) == [3]


def test_dead_set_is_trimmed_by_age_and_count(store):
    ids = [put(store, max_retries=0) for _ in range(4)]
    claim(store)
    opts = {**DEAD_OPTS, "dead_max_count": 2, "dead_max_age": 100.0}
    for i, job_id in enumerate(ids[:3]):
        store.fail(
            Q, job_id, "w#1", {"m": "x"}, delay=-1, default_max_retries=0, now=T0 + i, **opts
        )
    assert members(store, "dead") == set(ids[1:3])  # trimmed to the 2 newest
    assert store.fetch(Q, ids[0]) is None  # its record went too
    store.fail(Q, ids[3], "w#1", {"m": "x"}, delay=-1, default_max_retries=0, now=T0 + 150, **opts)
    assert members(store, "dead") == {ids[3]}  # the others were older than 100 s
    # On a quiet queue (nothing dies, nothing to recover) the periodic recover trims too.
    assert recover(store, now=T0 + 200, dead_max_count=2, dead_max_age=100.0) == []
    assert members(store, "dead") == {ids[3]}
    assert recover(store, now=T0 + 251, dead_max_count=2, dead_max_age=100.0, token="r#2") == []
    assert members(store, "dead") == set() and store.fetch(Q, ids[3]) is None


def test_claim_dead_letters_an_id_without_record(store):
    store.client.zadd(store.key(Q, "pending"), {"01ORPHAN": T0 * 1000})
    good = put(store)
    got = claim(store)
    assert [j.id for j in got.jobs] == [good]
    assert members(store, "dead") == {"01ORPHAN"}
    assert "missing" in errors_of(store, "01ORPHAN")[0]["message"]


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
        store.ack_op(Q, [(a, "w#1", "")], now=T0),
        store.ack_op(Q, [(b, "wrong#1", "")], now=T0),
        store.claim_op(Q, 5, lease=10, token="t#2", instance="t", now=T0),
    ]
    acked, refused, claimed = store.run(ops)
    assert acked == [1] and refused == [-1] and claimed.jobs == []


def test_a_key_of_the_wrong_type_fails_a_script_before_it_writes(store):
    job_id = put(store, max_retries=0)
    claim(store)
    start(store, job_id)
    store.client.set(store.key(Q, "dead"), "not a sorted set")
    with pytest.raises(DelayQError, match="WRONGTYPE"):
        fail(store, job_id)
    assert members(store, "running") == {job_id}  # nothing moved
    store.client.delete(store.key(Q, "dead"))
    assert fail(store, job_id)[0] == "dead"


def test_counts_page_and_throughput(store):
    ids = [put(store, delay=d) for d in (-5, 10, 20)]  # a past due time means now
    counts = store.counts(Q, now=T0)
    assert counts == {
        "pending": 3,
        "due": 1,
        "running": 0,
        "waiting": 0,
        "dead": 0,
        "oldest_due_at": T0,
        "paused": False,
        "priorities": [],
        "parked": 0,
        "finished": 0,
    }
    page = store.page(Q, "pending", 1, 2)
    assert [r.id for r in page] == ids[1:] and page[0].score == T0 + 10
    claim(store, now=T0)
    assert store.counts(Q, now=T0)["waiting"] == 1
    store.ack(Q, [(ids[0], "w#1", "")], now=T0 + 60)
    assert store.counts(Q, now=T0 + 60)["finished"] == 1  # kept (the default settings)
    series = store.throughput(Q, now=T0 + 60, minutes=5)
    assert series["d"][-1] == 1 and sum(series["f"]) == 0


def test_garbage_in_the_stats_and_queues_is_skipped(store):
    store.client.hset(store.key(Q, "stats"), mapping={"d:1": "x:y", "f:2": b"\xff", "zz": "1:2"})
    assert store.throughput(Q, now=T0, minutes=5) == {"d": [0] * 5, "f": [0] * 5}
    store.client.sadd(store.queues_key, b"\xff\xfe", "bad name!", "good")
    assert store.queues() == ["good"]


def test_unreachable_redis_raises_delayq_connection_error():
    import redis

    store = Store(redis.Redis(port=1, socket_connect_timeout=0.2), prefix="x")
    began = time.monotonic()
    with pytest.raises(DelayQConnectionError, match="unreachable"):
        store.schedule(Q, new_job_id(), record(), delay=1)
    # Bounded by the API's re-send budget (2 s, plus redis-py's connection retries: 3.8 s
    # here): a margin against re-sending for ever, not a measure of how fast it gives up.
    assert time.monotonic() - began < 30


def test_claim_at_exactly_the_due_time(store):
    due = T0 + 0.1234561234  # rounds down at 6 digits than a 6-decimal rendering keeps
    job_id = store.schedule(Q, new_job_id(), record(), at=due, now=T0).id
    assert [j.id for j in claim(store, now=due).jobs] == [job_id]


def test_page_with_no_room_reads_nothing(store):
    put(store)
    assert store.page(Q, "pending", 0, 0) == [] and store.page(Q, "pending", -1, 5) == []


V1_RECORD = b'{"t":"a.b","a":[1],"u":"order:9","r":0}'  # format 1, as 0.1 wrote it
V2_RECORD = b'[{"t":"a.b","u":"order:9","r":0},1]'  # format 2, as 0.1 wrote it


@pytest.mark.parametrize("legacy", [V1_RECORD, V2_RECORD], ids=["format1", "format2"])
def test_records_of_0_1_still_run_and_decode(store, legacy):
    fields = decode_record(legacy)
    assert (fields.task, fields.args, fields.key, fields.max_retries) == ("a.b", [1], "order:9", 0)
    job_id = store.schedule(Q, new_job_id(), legacy, now=T0).id
    claim(store, now=T0, lease=10)
    start(store, job_id, lease=10)
    # No header: scripts apply the default max_retries (5 here) and know no unique key.
    assert [(r.id, r.outcome) for r in recover(store, now=T0 + 11)] == [(job_id, "retry")]


def test_the_header_alone_tells_max_retries_flags_and_key():
    raw = encode_record("a.b", [1, {"x": [2]}], {"why": "late"}, "order:1\n|=:", 7, "i")
    assert raw.startswith(b"7ik=11:order:1\n|=:\n")
    fields = decode_record(raw)
    assert fields.args == [1, {"x": [2]}] and fields.kwargs == {"why": "late"}
    assert (fields.key, fields.max_retries, fields.flags) == ("order:1\n|=:", 7, "i")
    assert fields.info == "i=order:1\n|=:"


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
    sent = []
    command = short.command
    short.command = lambda *args, **kwargs: sent.append(args) or command(*args, **kwargs)
    assert short.wait_for_wake([Q], timeout=5.0) is False  # no TimeoutError
    # The BLPOP asked Redis to block for less than the read timeout (0.5 s, not 5).
    (blpop,) = sent
    assert blpop[0] == b"BLPOP" and float(blpop[-1]) < short.read_timeout()


def test_schedule_many_answers_per_job_and_survives_a_script_flush(flushable_store):
    store = flushable_store
    jobs = [(new_job_id(), record(args=[i])) for i in range(6)]
    taken = jobs[0][0]
    first = store.call(
        store.schedule_many_op(Q, [(i, r, {"delay": 5.0}) for i, r in jobs[:3]], now=T0)
    )
    assert [s.due_at for s in first] == [T0 + 5] * 3
    with pytest.raises(DelayQError, match="DUPLICATE_ID"):  # the same id, another record
        store.call(store.schedule_many_op(Q, [(taken, b"0\nx.y\n", {"delay": 5.0})], now=T0))
    store.client.script_flush()  # Redis forgot the scripts: NOSCRIPT, loaded and sent again
    last = store.call(
        store.schedule_many_op(Q, [(i, r, {"at": T0 + 9}) for i, r in jobs[3:]], now=T0)
    )
    assert [s.due_at for s in last] == [T0 + 9] * 3
    again = store.call(store.schedule_many_op(Q, [(jobs[0][0], jobs[0][1], {"delay": 60})]))
    assert again[0].due_at == T0 + 5  # the re-sent job answers with its stored due time
    assert len(members(store, "pending")) == 6


def test_a_stream_keeps_final_errors_and_sends_again_what_redis_did_not_run(flushable_store):
    """stream() (schedule_many's chunks): an error answer is that op's final answer
    (WRONGTYPE, translated), an EVALSHA that met NOSCRIPT is sent again with its script
    loaded, and every other answer stays in its place."""
    store = flushable_store
    put(store)  # the transport now believes schedule.lua is loaded
    store.client.script_flush()
    wake = store.key(Q, "wake")
    store.client.lpush(wake, b"x")
    ids = [new_job_id() for _ in range(3)]
    chunks = [
        [
            store.schedule_op(Q, ids[0], record(), delay=5.0, now=T0),
            store.command(b"HGET", wake, b"f", route=wake),
        ],
        [store.schedule_op(Q, i, record(), delay=5.0, now=T0) for i in ids[1:]],
    ]
    first, second = store.stream(chunks)
    assert first[0].outcome == "created" and first[0].due_at == T0 + 5
    assert isinstance(first[1], DelayQError) and "WRONGTYPE" in str(first[1])
    assert [s.outcome for s in second] == ["created", "created"]
    assert set(ids) <= members(store, "pending")


def test_results_are_found_by_id_alone(store):
    store.save_result("01RESULT", b'{"v":1}', ttl=60)
    assert store.load_result("01RESULT") == b'{"v":1}'
    assert store.client.pttl(store.result_key("01RESULT")) > 0
    assert store.load_result("01OTHER") is None


def test_fetch_reads_one_job_whole(store):
    job_id = put(store, max_retries=3)
    raw = store.fetch(Q, job_id)
    assert (raw.status, raw.score, raw.record) == ("pending", T0, record(max_retries=3))
    assert store.fetch(Q, "nope") is None
    assert json.loads(json.dumps(raw.id)) == job_id


def test_a_script_using_a_key_it_does_not_declare_is_refused(tmp_path, monkeypatch):
    from django_delayq.storage import scripts

    lua = resources.files("django_delayq.storage") / "lua"
    (tmp_path / "include").mkdir()
    for path in (lua / "include").iterdir():
        (tmp_path / "include" / path.name).write_text(path.read_text())
    monkeypatch.setattr(scripts, "_lua_dir", lambda: tmp_path)
    head = '-- schedule.lua: x\n-- KEYS: pending jobs\n--- @include "wake"\n'
    refused = {
        "wake_worker()\n": r"uses keys \['wake'\]",  # wake_worker() pushes to `wake`
        "return redis.call('HGET', jobs, 'x')\nlocal pending = 1\n": r"binds \['pending'\]",
        "return pend('x', 1, 0)\n": r"calls \['pend'\] of an include it does not declare",
    }
    try:
        for body, error in refused.items():
            (tmp_path / "schedule.lua").write_text(head + body)
            scripts.script_source.cache_clear()
            with pytest.raises(LookupError, match=error):
                scripts.script_source("schedule")
    finally:
        scripts.script_source.cache_clear()


def test_totals_count_every_outcome_since_the_queue_began(store):
    done, failing, lost, corrupt = put(store), put(store, max_retries=1), put(store), put(store)
    store.client.hdel(store.key(Q, "jobs"), corrupt)  # claimed without a record: dead
    claim(store, lease=10)
    for job_id in (failing, lost):
        start(store, job_id, lease=10)
    store.ack(Q, [(done, "w#1", "")], now=T0)
    fail(store, failing)  # retried (1 of 2 attempts)
    recover(store, now=T0 + 11)  # lost: recovered, retried
    claim(store, now=T0 + 12, token="w#2")
    start(store, failing, now=T0 + 12)
    fail(store, failing, token="w#2", now=T0 + 12)  # dead (2 of 2)
    assert store.totals(Q) == {
        "done": 1,
        "failed": 2,
        "retried": 2,
        "dead": 2,
        "recovered": 1,
        "limited": 0,
        "expired": 0,
        "rescheduled": 0,
    }
    store.client.hset(store.key(Q, "stats"), "done", "garbage")
    assert store.totals(Q)["done"] == 0


def test_a_subject_store_is_built_once_per_store_and_sends_through_it(redis_client):
    """store.batches, .control, .roster, .finished, .recurring, .traces, .history, .old_layout,
    .followers: each an object of its own, made on first use and kept, whose operations go
    through the Store it belongs to (no transport of its own: one Store, one set of
    connections)."""
    import django_delayq.storage as module

    line = module.__doc__.split("- subject stores", 1)[1].split("\n- ", 1)[0]
    names = re.findall(r"[a-z_]+", line.split("):", 1)[1])
    assert names == [
        "batches",
        "control",
        "roster",
        "finished",
        "recurring",
        "traces",
        "history",
        "old_layout",
        "followers",
    ]
    store, other = Store(redis_client), Store(redis_client)
    for name in names:
        subject = getattr(store, name)
        assert getattr(store, name) is subject
        assert subject._store is store and getattr(other, name)._store is other


def test_the_store_s_public_surface_is_listed_in_one_place():
    """storage/__init__.py's docstring lists every public name of the Store, each once, and
    nothing it does not have: the table of contents a reader starts from."""
    import django_delayq.storage as module

    listing = module.__doc__.split("The Store's public surface", 1)[1].split("\n- ", 1)[1]
    listed = re.findall(r"[a-z_]+", re.sub(r"(?m)^- [^:]+: ", "", "- " + listing))
    public = {name for name in dir(Store) if not name.startswith("_")}
    assert len(listed) == len(set(listed)), "a name listed twice"
    assert set(listed) == public, (sorted(public - set(listed)), sorted(set(listed) - public))
