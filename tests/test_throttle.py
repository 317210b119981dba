"""Throttle windows (issue 36 item 3): ``schedule(..., key=k, unique_for=...)`` and
``@task(unique_for=...)``. Once a keyed job with the window (record flag 'w', the window in a
whitespace trailer) succeeded, a schedule with its key stores nothing until the window ends
and answers "throttled" with the finished job's id (Sidekiq Enterprise's unique_for, BullMQ's
throttle mode). acks.lua opens the window ("\\0t" + key in ``keys``, the key in ``throttled``);
schedule.lua checks it and sweeps ended ones. On fakeredis and the real server; times
injected (``now=``): structure, not wall clock."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from django.db import transaction

from django_delayq import schedule, schedule_many, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import JobSpec, decode_record, encode_job, expires_of
from tests.test_store import DEAD_OPTS, T0, Q, claim
from tests.testapp import tasks as t

KEY = "report:42"


def rec(window_ms: int | None = 60_000, args=(1, 2), key: str = KEY, retries=1, **kw) -> bytes:
    spec = JobSpec(
        "tests.testapp.tasks.add", list(args), {}, key, retries, window_ms=window_ms, **kw
    )
    return encode_job(spec).data


def put(store, now_offset: float, window_ms: int | None = 60_000, key: str = KEY, **kw):
    return store.schedule(
        Q, new_job_id(), rec(window_ms, key=key), delay=0, key=key, now=T0 + now_offset, **kw
    )


def run_ok(store, job_id: str, at: float, via_claim: bool = False, token: str = "w#1") -> None:
    """Claim ``job_id`` and acknowledge its success at T0 + ``at`` (on ack.lua, or riding
    on the next claim as a worker sends it)."""
    claimed = claim(store, now=T0 + at, token=token)
    assert [c.id for c in claimed.jobs] == [job_id]
    info = decode_record(claimed.jobs[0].record).info
    if via_claim:
        out = store.claim(
            Q,
            0,
            lease=30,
            token=token + "+",
            instance="w",
            now=T0 + at,
            acks=[(job_id, token, info)],
        )
        assert out.acked == [1]
    else:
        assert store.ack(Q, [(job_id, token, info)], now=T0 + at) == [1]


def window(store, key: str = KEY) -> bytes | None:
    return store.client.hget(store.key(Q, "keys"), b"\0t" + key.encode())


def swept(store) -> list:
    return store.client.zrange(store.key(Q, "throttled"), 0, -1, withscores=True)


# The record ---------------------------------------------------------------------------


def test_the_window_rides_in_a_trailer_that_keeps_the_call_and_the_expiry():
    data = rec(90_000, expires_ms=1_900_000_000_000)
    fields = decode_record(data)
    assert (fields.args, fields.window_ms, fields.expires_at) == ([1, 2], 90_000, 1_900_000_000_000)
    assert expires_of(data) == 1_900_000_000_000
    assert "w" in fields.flags and fields.info == f"w={KEY}"
    # the body is JSON whitespace after the arguments: 0.7.0's reader decodes the same call
    body = data.split(b"\n", 2)[2]
    assert json.loads(b"[" + body + b"]") == [1, 2]


# The script (store contract) ----------------------------------------------------------


@pytest.mark.parametrize("via_claim", [False, True])
def test_after_a_success_the_key_is_throttled_until_the_window_ends(store, via_claim):
    first = put(store, 0)
    run_ok(store, first.id, 1, via_claim)
    assert window(store) == f"{first.id}|{int((T0 + 61) * 1000)}".encode()
    for on_conflict in ("keep", "replace"):
        again = put(store, 30, on_conflict=on_conflict)
        assert (again.outcome, again.id) == ("throttled", first.id)
        assert again.due_at == pytest.approx(T0 + 61)
    assert store.client.hlen(store.key(Q, "jobs")) == 0  # nothing stored
    assert store.client.zcard(store.key(Q, "pending")) == 0
    later = put(store, 61)  # the window has ended: a new job, the window gone
    assert later.outcome == "created" and later.id != first.id
    assert window(store) is None and swept(store) == []


def test_a_key_without_a_window_schedules_as_before(store):
    first = put(store, 0, window_ms=None)
    run_ok(store, first.id, 1)
    assert window(store) is None
    assert put(store, 2).outcome == "created"


def test_a_window_throttles_a_schedule_without_unique_for(store):
    first = put(store, 0)
    run_ok(store, first.id, 1)
    assert put(store, 2, window_ms=None).outcome == "throttled"


def test_a_failed_job_sets_no_window_and_its_success_later_does(store):
    first = put(store, 0)
    claimed = claim(store, now=T0 + 1)
    error = {"type": "builtins.ValueError", "message": "boom", "traceback": "", "attempt": 1}
    store.fail(Q, first.id, "w#1", error, delay=0, default_max_retries=5, now=T0 + 1, **DEAD_OPTS)
    assert window(store) is None and swept(store) == []
    assert put(store, 2, on_conflict="keep").outcome == "kept"  # the retry holds the key
    claimed = claim(store, now=T0 + 3, token="w#3")
    info = decode_record(claimed.jobs[0].record).info
    assert store.ack(Q, [(first.id, "w#3", info)], now=T0 + 4) == [1]
    assert put(store, 5).outcome == "throttled"


def test_a_dead_or_cancelled_job_sets_no_window(store):
    first = store.schedule(Q, new_job_id(), rec(retries=0), delay=0, key=KEY, now=T0)
    claim(store, now=T0 + 1)
    error = {"type": "builtins.ValueError", "message": "boom", "traceback": "", "attempt": 1}
    store.fail(Q, first.id, "w#1", error, delay=0, default_max_retries=0, now=T0 + 1, **DEAD_OPTS)
    assert store.client.zscore(store.key(Q, "dead"), first.id) is not None
    second = put(store, 2)
    assert store.cancel(Q, second.id)
    assert window(store) is None and put(store, 3).outcome == "created"


def test_a_pending_job_of_the_key_is_handled_as_today(store):
    first = put(store, 0)
    run_ok(store, first.id, 1)
    store.client.hdel(store.key(Q, "keys"), b"\0t" + KEY.encode())  # no window
    second = put(store, 2)
    assert put(store, 3, on_conflict="keep").outcome == "kept"
    assert put(store, 3).outcome == "replaced"
    assert second.outcome == "created"


def test_a_lost_ack_reply_sent_again_opens_the_window_once(store):
    first = put(store, 0)
    claimed = claim(store, now=T0 + 1)
    info = decode_record(claimed.jobs[0].record).info
    op = store.ack_op(Q, [(first.id, "w#1", info)], now=T0 + 1)
    again = store.ack_op(Q, [(first.id, "w#1", info)], now=T0 + 9)
    assert store.run([op, again]) == [[1], [0]]
    assert window(store) == f"{first.id}|{int((T0 + 61) * 1000)}".encode()
    assert swept(store) == [(KEY.encode(), (T0 + 61) * 1000)]


def test_a_lost_schedule_reply_sent_again_answers_throttled_again(store):
    first = put(store, 0)
    run_ok(store, first.id, 1)
    job_id, record = new_job_id(), rec()
    op = store.schedule_op(Q, job_id, record, delay=0, key=KEY, now=T0 + 2)
    again = store.schedule_op(Q, job_id, record, delay=0, key=KEY, now=T0 + 3, relay=True)
    assert [(r.outcome, r.id) for r in store.run([op, again])] == [("throttled", first.id)] * 2


def test_ended_windows_of_keys_never_scheduled_again_are_swept(store):
    for i in range(12):
        job = put(store, 0, window_ms=1000, key=f"k{i}")
        run_ok(store, job.id, 0, token=f"w#{i}")
    assert len(swept(store)) == 12
    put(store, 5, key="other")  # one keyed schedule: at most 10 ended windows go
    assert len(swept(store)) == 2
    assert store.client.hlen(store.key(Q, "keys")) == 1 + 2  # "other" and two windows
    put(store, 6, key="another")
    assert swept(store) == [] and window(store, "k0") is None and window(store, "k11") is None


def test_the_relay_of_an_outbox_row_is_not_throttled(store):
    first = put(store, 0)
    run_ok(store, first.id, 1)
    relayed = store.schedule(
        Q, new_job_id(), rec(None), delay=0, key=KEY, now=T0 + 2, relay=True, adopt=True
    )
    assert relayed.outcome == "created"


# The API ------------------------------------------------------------------------------


@task(name="tests.test_throttle.report", unique_for=timedelta(minutes=5))
def report(n):
    return n


def stored_window(store, job) -> int | None:
    return decode_record(store.client.hget(store.key(Q, "jobs"), job.id)).window_ms


def test_every_way_in_carries_the_window(store):
    assert stored_window(store, schedule(t.add, 1, 2, key=KEY, unique_for=90)) == 90_000
    assert stored_window(store, report.schedule(1, key="r")) == 300_000
    assert stored_window(store, report.schedule(2)) is None  # the default: keyed calls only
    assert stored_window(store, t.add.call(1, 2).schedule(key="c", unique_for=2.5)) == 2500
    many = schedule_many(t.add, [{"args": (1, 2), "key": "m"}, (3, 4)], key="n", unique_for=9)
    assert [stored_window(store, j) for j in many] == [9000, 9000]


@pytest.mark.parametrize("redis_client", ["real"], indirect=True)  # the async API: a server
def test_aschedule_takes_unique_for(store):
    from django_delayq import aschedule

    job = asyncio.run(aschedule(t.add, 1, 2, key=KEY, unique_for=timedelta(seconds=30)))
    assert stored_window(store, job) == 30_000


@pytest.mark.parametrize(
    ("value", "error", "named"),
    [
        (0, ValueError, "got 0"),
        (-1, ValueError, "-1"),
        (float("nan"), ValueError, "nan"),
        (timedelta(seconds=-5), ValueError, "days=-1"),
        ("5", TypeError, "'5'"),
        (True, TypeError, "True"),
    ],
)
def test_bad_values_are_refused_naming_them(store, value, error, named):
    with pytest.raises(error, match="unique_for=") as raised:
        schedule(t.add, 1, 2, key=KEY, unique_for=value)
    assert named in str(raised.value)
    with pytest.raises(error, match=r"@task\(unique_for=\.\.\.\)"):
        task(unique_for=value)(lambda: None)
    assert store.client.hlen(store.key(Q, "jobs")) == 0


def test_the_ways_in_that_cannot_carry_unique_for_refuse_it(store, db):
    with pytest.raises(ValueError, match="unique_for=30 needs key="):
        schedule(t.add, 1, 2, unique_for=30)
    with transaction.atomic(), pytest.raises(ValueError, match="database outbox"):
        schedule(t.add, 1, 2, key=KEY, unique_for=30, on_commit=True)
    with pytest.raises(TypeError, match="a chain step takes the options"):  # no key there
        t.add.call(1, 2).then(t.add.call(3, 4), unique_for=10).schedule()
    assert store.client.hlen(store.key(Q, "jobs")) == 0


def test_a_worker_run_opens_the_window_and_a_failure_does_not(store):
    from django_delayq import get_job
    from django_delayq.worker.dispatch import Worker

    first = schedule(t.remember, "a", key=KEY, unique_for=3600)
    assert Worker(["default"], burst=True).run() == 0
    assert [c[0][0] for c in t.CALLS] == ["a"]
    again = schedule(t.remember, "b", key=KEY, unique_for=3600)
    assert (again.outcome, again.id, again.status) == ("throttled", first.id, "succeeded")
    assert store.client.hlen(store.key(Q, "jobs")) == 0  # nothing stored
    assert get_job(first.id, finished=True).status == "succeeded"
    failing = schedule(t.always_fails, key="f", unique_for=3600, max_retries=0)
    Worker(["default"], burst=True).run()
    assert store.client.zscore(store.key(Q, "dead"), failing.id) is not None
    assert window(store, "f") is None
    assert schedule(t.remember, "c", key="f").outcome == "created"


@pytest.mark.parametrize("redis_client", ["real"], indirect=True)
def test_a_tiny_window_ends_on_redis_clock_and_the_key_schedules_again(store):
    from django_delayq.worker.dispatch import Worker

    first = schedule(t.remember, "a", key=KEY, unique_for=0.05)
    Worker(["default"], burst=True).run()
    ends = int(window(store).split(b"|")[1])
    while True:  # structure: the next schedule comes after the window's end, on Redis's clock
        seconds, micros = store.client.time()
        if seconds * 1000 + micros // 1000 > ends:
            break
    again = schedule(t.remember, "b", key=KEY)
    assert again.outcome == "created" and again.id != first.id
    assert window(store) is None and swept(store) == []


@pytest.mark.django_db
def test_the_job_page_shows_unique_for_and_the_finished_job(store, admin_client):
    from django_delayq.worker.dispatch import Worker
    from tests.test_admin import text, url

    job = schedule(t.remember, "a", key="<b>k</b>", unique_for=90.5, delay=600)
    page = text(admin_client.get(url("detail", Q, job.id)))
    assert 'id="dq-job-unique-for"' in page and "90.5 s after it succeeds" in page
    assert "&lt;b&gt;k&lt;/b&gt;" in page and "<b>k</b>" not in page
    plain = schedule(t.remember, "p", key="p", delay=600)
    assert 'id="dq-job-unique-for"' not in text(admin_client.get(url("detail", Q, plain.id)))
    done = schedule(t.remember, "b", key="d", unique_for=60)
    Worker(["default"], burst=True).run()
    page = text(admin_client.get(url("detail", Q, done.id)))
    assert "<td>Succeeded</td>" in page and "60 s after it succeeds" in page
