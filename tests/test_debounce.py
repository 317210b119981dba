"""Debounce with a cap (issue 36 item 3): ``schedule(..., key=k, on_conflict="replace",
max_wait=...)`` and ``@task(max_wait=...)``. A replace pushes the key's pending job back, but
never past the first schedule's due time plus max_wait (arq's ``_debounce_max``, BullMQ's
debounce). schedule.lua computes the cap on Redis's clock (ARGV[14]) and keeps the first due
time in the ``keys`` hash under "\\0d" + key; an ack of the job (record flag 'd') drops it.
On fakeredis and the real server (``store`` fixture); times injected (``now=``), the due
time read as the stored score: structure, not wall clock."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from django_delayq import schedule, schedule_many, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import JobSpec, decode_record, encode_job
from tests.test_store import T0, Q, claim
from tests.testapp import tasks as t

KEY = "customer:42:index"


def rec(max_wait: bool = True, args=(1, 2)) -> bytes:
    spec = JobSpec("tests.testapp.tasks.add", list(args), {}, KEY, 1, debounced=max_wait)
    return encode_job(spec).data


def put(store, now_offset: float, delay: float, max_wait: float | None = 25.0, **kw):
    """A keyed schedule at T0 + now_offset, due ``delay`` later; its reply."""
    return store.schedule(
        Q,
        kw.pop("job_id", None) or new_job_id(),
        kw.pop("record", None) or rec(max_wait is not None, (now_offset, delay)),
        delay=delay,
        key=KEY,
        now=T0 + now_offset,
        max_wait=max_wait,
        **kw,
    )


def score(store, job_id: str) -> float:
    return float(store.client.zscore(store.key(Q, "pending"), job_id))


def mark(store) -> bytes | None:
    return store.client.hget(store.key(Q, "keys"), b"\0d" + KEY.encode())


@pytest.fixture
def t_ms():
    return lambda seconds: (T0 + seconds) * 1000


# The script (store contract) ----------------------------------------------------------


def test_replaces_push_the_job_back_but_never_past_first_due_plus_max_wait(store, t_ms):
    first = put(store, 0, 10)
    assert first.outcome == "created" and score(store, first.id) == t_ms(10)
    dues = []
    for i in range(1, 7):  # a replace every 5 s, each asking for 10 s later
        replaced = put(store, 5 * i, 10)
        assert (replaced.outcome, replaced.id) == ("replaced", first.id)
        dues.append(score(store, first.id))
        assert replaced.due_at == pytest.approx(dues[-1] / 1000)
    # pushed back 15, 20, 25, 30, 35: then the cap (first due 10 + max_wait 25 = 35) holds
    assert dues == [t_ms(15), t_ms(20), t_ms(25), t_ms(30), t_ms(35), t_ms(35)]
    assert mark(store) == f"{first.id}|{int(t_ms(10))}".encode()
    assert store.client.zcard(store.key(Q, "pending")) == 1


def test_reschedule_is_an_explicit_move_not_capped_by_max_wait(store, t_ms):
    """reschedule() moves the job past first due + max_wait (BullMQ's changeDelay ignores
    the deduplication's settings) and leaves the debounce's first due time as it was: a
    later replace is capped as before."""
    first = put(store, 0, 10)  # first due 10, cap 35
    moved = store.reschedule(Q, key=KEY, delay=500, now=T0 + 5)
    assert moved.id == first.id and score(store, first.id) == t_ms(505)  # past the cap
    assert mark(store) == f"{first.id}|{int(t_ms(10))}".encode()  # the first due kept
    put(store, 20, 60)  # a replace asking for 80: capped at 35, as without the move
    assert score(store, first.id) == t_ms(35)


def test_without_max_wait_a_replace_moves_the_job_as_far_as_asked(store, t_ms):
    first = put(store, 0, 10, max_wait=None)
    for i in range(1, 7):
        put(store, 5 * i, 10, max_wait=None)
    assert score(store, first.id) == t_ms(40) and mark(store) is None


def test_a_replace_earlier_than_the_cap_is_kept_as_asked(store, t_ms):
    first = put(store, 0, 100)
    assert put(store, 1, 5).outcome == "replaced"  # sooner than both: as asked
    assert score(store, first.id) == t_ms(6)


def test_a_holder_scheduled_without_max_wait_counts_from_its_due_when_met(store, t_ms):
    """A job created without max_wait (or by 0.7.0) has no first due kept: the first replace
    with max_wait takes its due time then as the first."""
    first = put(store, 0, 10, max_wait=None)
    put(store, 5, 10)  # due 15 (not capped: 10 + 25)
    assert mark(store) == f"{first.id}|{int(t_ms(10))}".encode()
    put(store, 40, 10)
    assert score(store, first.id) == t_ms(35)


def test_a_lost_reply_sent_again_answers_the_same_and_changes_nothing(store, t_ms):
    first = put(store, 0, 10)
    record, job_id = rec(True, ("again",)), new_job_id()
    op = store.schedule_op(
        Q, job_id, record, delay=40, key=KEY, now=T0 + 5, max_wait=25.0, relay=False
    )
    again = store.schedule_op(
        Q, job_id, record, delay=40, key=KEY, now=T0 + 6, max_wait=25.0, relay=True
    )
    replies = store.run([op, again])
    assert [(r.outcome, r.id) for r in replies] == [("replaced", first.id)] * 2
    assert replies[0].due_at == replies[1].due_at == pytest.approx(T0 + 35)
    assert score(store, first.id) == t_ms(35)


def test_the_ack_drops_the_first_due_and_the_next_job_counts_from_its_own(store, t_ms):
    first = put(store, 0, 0)
    claimed = claim(store, now=T0 + 1)
    assert [c.id for c in claimed.jobs] == [first.id]
    info = decode_record(claimed.jobs[0].record).info
    assert info == f"d={KEY}"
    assert store.ack(Q, [(first.id, "w#1", info)], now=T0 + 2) == [1]
    assert mark(store) is None
    second = put(store, 100, 10)
    assert second.outcome == "created" and second.id != first.id
    put(store, 130, 10)
    assert score(store, second.id) == t_ms(135)  # 110 + 25, not 10 + 25


def test_a_key_scheduled_while_its_job_runs_starts_a_new_debounce(store, t_ms):
    first = put(store, 0, 0)
    claim(store, now=T0 + 1)  # running: the key's next schedule makes a new job
    second = put(store, 2, 10)
    assert second.outcome == "created" and mark(store) == f"{second.id}|{int(t_ms(12))}".encode()
    assert store.ack(Q, [(first.id, "w#1", f"d={KEY}")], now=T0 + 3) == [1]
    assert mark(store) == f"{second.id}|{int(t_ms(12))}".encode()  # not the first's: kept
    put(store, 50, 10)
    assert score(store, second.id) == t_ms(37)


def test_a_stale_first_due_naming_another_job_is_not_used(store, t_ms):
    store.client.hset(store.key(Q, "keys"), b"\0d" + KEY.encode(), b"01OTHER|1")
    first = put(store, 0, 10, max_wait=None)
    put(store, 5, 100)
    assert score(store, first.id) == t_ms(35)  # counted from its own due, 10


def test_a_retry_waiting_starts_its_debounce_over(store, t_ms):
    """The job ran once and failed: its retry is a new wait, capped from its own due time
    (not from the first schedule's, long past: it would be due at once)."""
    from tests.test_store import fail

    first = put(store, 0, 0)
    claim(store, now=T0 + 1)
    fail(store, first.id, delay=60, now=T0 + 2)  # retry due at 62
    assert score(store, first.id) == t_ms(62)
    put(store, 100, 10)  # not 0 + 25 (past): counted from 62
    assert score(store, first.id) == t_ms(87)
    put(store, 101, 100)
    assert score(store, first.id) == t_ms(87)  # the first due kept: 62


# The API --------------------------------------------------------------------------------


@task(max_wait=timedelta(seconds=60))
def reindex(customer):
    t.CALLS.append(("reindex", customer))


def _due_ms(store, job) -> float:
    return score(store, job.id)


def test_schedule_debounces_up_to_max_wait(store):
    first = schedule(t.add, 1, 2, key=KEY, delay=30, max_wait=40)
    due0 = _due_ms(store, first)
    for _ in range(5):
        again = schedule(t.add, 1, 2, key=KEY, delay=30, max_wait=40)
        assert (again.outcome, again.id) == ("replaced", first.id)
    far = schedule(t.add, 1, 2, key=KEY, delay=3600, max_wait=40)
    assert far.id == first.id and _due_ms(store, first) == due0 + 40_000
    assert far.due_at.timestamp() == pytest.approx((due0 + 40_000) / 1000)


def test_schedule_many_debounces_up_to_max_wait_as_schedule_does(store):
    """schedule_many() sends a keyed call with max_wait through schedule.lua with its cap,
    in the order given: the same key replaced within one call is capped as schedule()'s."""
    first = schedule(t.add, 1, 2, key=KEY, delay=30, max_wait=40)
    due0 = _due_ms(store, first)
    jobs = schedule_many(
        t.add,
        [{"args": [1, 2], "delay": 60}, {"args": [1, 2], "delay": 20}, (3, 4)],
        key=KEY,
        delay=3600,  # the tuple's
        max_wait=40,
    )
    assert [(j.outcome, j.id) for j in jobs] == [("replaced", first.id)] * 3
    assert _due_ms(store, first) == due0 + 40_000  # capped: first due + max_wait
    assert jobs[-1].due_at.timestamp() == pytest.approx((due0 + 40_000) / 1000)
    assert store.client.hlen(store.key(Q, "jobs")) == 1


def test_schedule_many_with_max_wait_and_a_horizon_places_keyed_calls_one_by_one(store):
    from tests.conftest import more_settings

    first = schedule(t.add, 1, 2, key=KEY, delay=30, max_wait=40)
    due0 = _due_ms(store, first)
    with more_settings(store, HORIZON=86_400):
        (again,) = schedule_many(t.add, [(1, 2)], key=KEY, delay=3600, max_wait=40)
    assert (again.outcome, again.id) == ("replaced", first.id)
    assert _due_ms(store, first) == due0 + 40_000


def test_the_task_default_applies_to_keyed_replacing_calls_only(store):
    first = reindex.schedule(42, key=KEY, delay=10)
    due0 = _due_ms(store, first)
    reindex.schedule(42, key=KEY, delay=3600)
    assert _due_ms(store, first) == due0 + 60_000
    kept = reindex.schedule(42, key=KEY, delay=1, on_conflict="keep")
    assert kept.outcome == "kept"  # keep: no debounce, no error
    assert reindex.schedule(43, delay=5).outcome == "created"  # no key: nothing to cap
    assert reindex.call(42).schedule(key=KEY, delay=7200).id == first.id
    assert _due_ms(store, first) == due0 + 60_000


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"max_wait": 10}, ValueError, "needs key="),
        ({"max_wait": 10, "key": KEY, "on_conflict": "keep"}, ValueError, "'keep'"),
        ({"max_wait": -1, "key": KEY}, ValueError, "-1"),
        ({"max_wait": 0, "key": KEY}, ValueError, "got 0"),
        ({"max_wait": timedelta(seconds=-5), "key": KEY}, ValueError, "days=-1"),
        ({"max_wait": float("inf"), "key": KEY}, ValueError, "inf"),
        ({"max_wait": "60", "key": KEY}, TypeError, "'60'"),
        ({"max_wait": True, "key": KEY}, TypeError, "True"),
    ],
)
def test_bad_max_waits_are_refused_naming_the_value(store, options, error, named):
    with pytest.raises(error, match="max_wait=") as raised:
        schedule(t.add, 1, 2, **options)
    assert named in str(raised.value)
    assert store.client.hlen(store.key(Q, "jobs")) == 0


def test_task_max_wait_is_checked_when_the_decorator_is_written():
    with pytest.raises(TypeError, match=r"@task\(max_wait=\.\.\.\).*'soon'"):
        task(max_wait="soon")(lambda: None)


def test_the_ways_in_that_cannot_carry_max_wait_refuse_it(store, db):
    """(The outbox carries it: tests/test_outbox_debounce.py.)"""
    with pytest.raises(TypeError, match="a chain step takes the options"):  # no key there
        t.add.call(1, 2).then(t.add.call(3, 4), max_wait=10).schedule()
    assert store.client.hlen(store.key(Q, "jobs")) == 0


@pytest.mark.parametrize("redis_client", ["real"], indirect=True)  # the async API: a server
def test_aschedule_takes_max_wait(store):
    from django_delayq import aschedule

    first = asyncio.run(aschedule(t.add, 1, 2, key=KEY, delay=10, max_wait=20))
    due0 = _due_ms(store, first)
    again = asyncio.run(aschedule(t.add, 1, 2, key=KEY, delay=3600, max_wait=20))
    assert again.id == first.id and _due_ms(store, first) == due0 + 20_000


def test_a_debounced_job_runs_once_and_its_key_is_clean_after(store):
    from django_delayq.worker.dispatch import Worker

    schedule(t.remember, "a", key=KEY, max_wait=60)
    schedule(t.remember, "b", key=KEY, max_wait=60)  # replaces "a", due now
    assert Worker(["default"], burst=True).run() == 0
    assert [c[0][0] for c in t.CALLS] == ["b"]
    assert store.client.hlen(store.key(Q, "keys")) == 0  # the key and its first due gone
