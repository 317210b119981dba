"""Expiry (issue 36 item 2): ``schedule(..., expires=...)`` and ``@task(expires=...)``. A job
not started by its expiry (the claim's Redis clock) is never run: lua/expire.lua ends it
"expired", kept as a finished job, counted in the stats, the history and its batch. On
fakeredis and the real server (``store`` fixture); workers in process (burst mode, their
clock injected: no sleeps)."""

from __future__ import annotations

import subprocess
import sys
import time
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from django_delayq import batch, get_batch, get_job, schedule, schedule_many, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import (
    EXPIRY_WIDTH,
    JobSpec,
    decode_record,
    encode_job,
    expires_of,
    head_fields,
)
from django_delayq.storage.expiry import expire_op
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.test_store import T0, Q, claim
from tests.testapp import tasks as t

ROOT = Path(__file__).resolve().parent.parent
RELEASE_0_7 = "2b5d190"  # the 0.7.0 main (tests/reliability/test_batch_outbox_edges.py)
KEEP = (3_600_000, 10_000)
RUNS: list[tuple] = []


@task(retry_backoff=100, max_retries=3)
def fails_then_waits(tag):
    """Fails its first attempt; its retry is due 100-125 s later."""
    from django_delayq import current_job

    RUNS.append((tag, current_job().attempts))
    if current_job().attempts == 1:
        raise ValueError("first attempt")


@task(expires=timedelta(minutes=5))
def short_lived(tag):
    RUNS.append((tag, 0))


@pytest.fixture(autouse=True)
def _clear():
    RUNS.clear()
    t.CALLS.clear()
    yield
    RUNS.clear()


def burst(offset: float = 0.0, queues=("default",)) -> Worker:
    """A burst worker whose clock (the claim's now) is ``offset`` seconds ahead."""
    worker = Worker(list(queues), burst=True, clock=lambda: time.time() + offset)
    assert worker.run() == 0
    return worker


# The record -----------------------------------------------------------------------------


def test_the_expiry_travels_at_the_end_of_the_record_and_leaves_flags_and_info_alone():
    plain = encode_job(JobSpec("shop.tasks.x", [1, "a"], {"k": 2}))
    spec = JobSpec("shop.tasks.x", [1, "a"], {"k": 2}, expires_ms=1_800_000_123_456)
    encoded = encode_job(spec)
    assert (
        encoded.data.startswith(b"0kx\n")
        and len(encoded.data) == len(plain.data) + 1 + EXPIRY_WIDTH
    )
    assert encoded.data[-EXPIRY_WIDTH:].strip() == b""  # JSON whitespace only
    # What scripts and acks see is the plain job's: claim_plain.lua still takes its ack.
    assert (encoded.flags, encoded.info, encoded.plain) == (plain.flags, plain.info, plain.plain)
    fields = decode_record(encoded.data)
    assert fields.expires_at == 1_800_000_123_456 and fields.flags == ""
    assert (fields.task, fields.args, fields.kwargs) == ("shop.tasks.x", [1, "a"], {"k": 2})
    assert expires_of(encoded.data) == 1_800_000_123_456 and expires_of(plain.data) is None
    assert decode_record(plain.data).expires_at is None
    for ms in (0, 1, 2**48 - 1):  # the whole range round-trips
        assert expires_of(encode_job(JobSpec("a.b", [], {}, expires_ms=ms)).data) == ms
    # A kept record cut to its header and task line has lost it: no expiry, no error.
    assert head_fields(encoded.data[: encoded.data.index(b"\n", 4) + 1]).expires_at is None


def _old_decoder():
    found = subprocess.run(
        ["git", "show", f"{RELEASE_0_7}:django_delayq/jobs/record.py"],
        cwd=ROOT,
        capture_output=True,
    )
    if found.returncode != 0:  # a shallow clone, or no git checkout at all
        pytest.skip(f"this checkout has no commit {RELEASE_0_7} (0.7.0)")
    module = types.ModuleType("record_0_7")
    sys.modules["record_0_7"] = module  # its dataclasses look their module up
    exec(compile(found.stdout, "record_0_7.py", "exec"), module.__dict__)
    return module.decode_record


KEYED = ("shop.tasks.x", [1], {"a": 2}, "order:42", 3, 5)


@pytest.mark.parametrize(
    ("spec", "flags"),
    [
        (JobSpec("shop.tasks.x", [1, "a"], {"k": 2}, expires_ms=1_800_000_123_456), "x"),
        (JobSpec("shop.tasks.x", [], {}, "order:42", 3, 10, expires_ms=2**48 - 1), "x"),
        (JobSpec("shop.tasks.x", [[1], {"a": None}], {}, tombstone=True, expires_ms=0), "x"),
        (JobSpec(*KEYED, tombstone=True, debounced=True), "d"),  # max_wait=
        (JobSpec(*KEYED, window_ms=60_000, expires_ms=2**40), "wx"),  # unique_for=, expires=
        (JobSpec(*KEYED, tombstone=True, held=True), "h"),  # unique_until="end"
    ],
)
def test_a_0_7_worker_decodes_a_record_with_0_8_s_options_as_the_same_call(spec, flags):
    """A rolling deploy: 0.7.0's decoder (its code, from git) reads the task, arguments,
    key and priority a new producer wrote with an expiry (flag 'x', a whitespace trailer),
    max_wait ('d'), unique_for ('w', a trailer before the expiry's) or unique_until="end"
    ('h'), and keeps the flags it does not know: it runs such a job as any job before
    these options existed (what its scripts then do of each flag: upgrading.rst)."""
    old = _old_decoder()(encode_job(spec).data)
    assert (old.task, old.args, old.kwargs, old.key, old.priority) == (
        spec.task,
        spec.args,
        spec.kwargs,
        spec.key,
        spec.priority,
    )
    assert old.max_retries == spec.max_retries
    assert set(flags) <= set(old.flags)


# Validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expires", "error", "named"),
    [
        (-1, ValueError, "-1"),
        (0, ValueError, "0"),
        (timedelta(seconds=-5), ValueError, "days=-1"),
        (float("nan"), ValueError, "nan"),
        (datetime(2030, 1, 1), ValueError, "naive"),
        (datetime(2300, 1, 1, tzinfo=UTC), ValueError, "2300"),
        ("60", TypeError, "'60'"),
        (True, TypeError, "True"),
    ],
)
def test_bad_expiries_are_refused_naming_the_value(store, expires, error, named):
    with pytest.raises(error, match="expires=") as raised:
        schedule(t.add, 1, 2, expires=expires)
    assert named in str(raised.value)
    with pytest.raises(error, match=r"expires="):
        schedule_many(t.add, [(1, 2)], expires=expires)
    with pytest.raises(error, match=r"expires="):
        schedule_many(t.add, [{"args": (1, 2), "expires": expires}])
    assert store.fetch(Q, "x") is None


def test_task_expires_is_checked_when_the_decorator_is_written():
    with pytest.raises(TypeError, match=r"@task\(expires=\.\.\.\).*'soon'"):
        task(expires="soon")(lambda: None)
    with pytest.raises(TypeError, match="did you mean 'expires'"):
        task(ttl=5)


# Scheduling ---------------------------------------------------------------------------


def test_schedule_stores_an_absolute_expiry_counted_from_the_call(store):
    before = time.time()
    job = schedule(t.add, 1, 2, delay=600, expires=60)  # expires before it is due: allowed
    after = time.time()
    assert before + 60 - 0.001 <= job.expires_at.timestamp() <= after + 60  # whole ms
    read = get_job(job.id)
    assert read.expires_at == job.expires_at and read.status == "pending"
    at = timezone.now() + timedelta(hours=1)
    assert schedule(t.add, 1, 2, expires=at).expires_at.timestamp() == pytest.approx(
        at.timestamp(), abs=0.001
    )
    assert schedule(t.add, 1, 2).expires_at is None  # a plain job: none
    assert get_job(schedule(short_lived, "x").id).expires_at is not None  # the task's default
    assert short_lived.schedule("y", expires=None).expires_at is not None  # None: the default


def test_schedule_many_shares_one_moment_and_takes_per_call_expiries(store):
    jobs = schedule_many(
        t.add, [(1, 2), (3, 4), {"args": (5, 6), "expires": 3600}, {"args": (7, 8)}], expires=60
    )
    shared = {job.expires_at for job in (jobs[0], jobs[1], jobs[3])}
    assert len(shared) == 1
    assert jobs[2].expires_at - jobs[0].expires_at == pytest.approx(
        timedelta(seconds=3540), abs=timedelta(milliseconds=5)
    )
    assert [get_job(job.id).expires_at for job in jobs] == [job.expires_at for job in jobs]


def test_a_job_beyond_the_horizon_keeps_its_expiry_in_its_outbox_row(store, db):
    from django_delayq.models import OutboxJob

    with more_settings(store, HORIZON=3600):
        job = schedule(t.add, 1, 2, delay=7200, expires=10_000)
        assert job.waits_in == "database"
        row = OutboxJob.objects.get(id=job.id)
        assert decode_record(bytes(row.record)).expires_at == int(job.expires_at.timestamp() * 1000)


# expire.lua ---------------------------------------------------------------------------


def _expiring(store, expires_ms: int, key: str | None = None, flags: str = "") -> str:
    spec = JobSpec("tests.testapp.tasks.add", [1, 2], {}, key, 1, expires_ms=expires_ms)
    data = encode_job(spec).data
    if flags:  # e.g. 'i': a tombstone when it ends
        data = data.replace(b"1x", b"1" + flags.encode() + b"x", 1)
    return store.schedule(Q, new_job_id(), data, key=key, now=T0).id


def test_expire_ends_a_claimed_job_once_keeps_it_and_counts_it(store, redis_client):
    job_id = _expiring(store, int(T0 * 1000) - 1, key="order:1", flags="i")
    other = _expiring(store, int(T0 * 1000) + 60_000)
    reply = claim(store, now=T0, token="w#1")
    assert {c.id for c in reply.jobs} == {job_id, other}
    op = expire_op(store, Q, [(job_id, "w#1", T0)], keep=KEEP, now=T0 + 1)
    assert store.call(op) == [1]
    assert store.call(op) == [0]  # sent again after a lost reply: gone, nothing changes
    assert store.fetch(Q, job_id) is None and get_job(job_id) is None
    kept = get_job(job_id, finished=True)
    assert kept.status == "expired" and kept.finished_at.timestamp() == T0 + 1
    assert kept.due_at.timestamp() == T0 and kept.attempts == 0
    assert kept.args == [1, 2] and kept.expires_at.timestamp() == T0 - 0.001
    assert store.totals(Q)["expired"] == 1
    assert redis_client.hget(store.key(Q, "keys"), "order:1") is None  # key released
    assert redis_client.zscore(store.key(Q, "done"), job_id) is not None  # flag 'i'
    # A lease it does not hold (another claim's token): -1, nothing changed.
    assert store.call(expire_op(store, Q, [(other, "w#2", None)], keep=KEEP, now=T0)) == [-1]
    assert store.fetch(Q, other) is not None and store.totals(Q)["expired"] == 1


def test_expire_with_keeping_off_keeps_nothing_and_still_counts(store, redis_client):
    job_id = _expiring(store, 0)
    claim(store, now=T0, token="w#1")
    assert store.call(expire_op(store, Q, [(job_id, "w#1", None)], keep=(0, 0), now=T0)) == [1]
    assert get_job(job_id, finished=True) is None
    assert not redis_client.exists(store.key(Q, "kept"))
    assert store.totals(Q)["expired"] == 1


# Workers ------------------------------------------------------------------------------


def test_a_job_claimed_after_its_expiry_never_runs_and_is_kept_as_expired(store):
    job = t.remember.schedule("late", expires=60)
    in_time = t.remember.schedule("in time", expires=3600)
    t.remember.schedule("plain")
    burst(offset=120)  # the claim's clock: two minutes later
    assert sorted(t.CALLS) == [(("in time",), {}), (("plain",), {})]
    kept = get_job(job.id, finished=True)
    assert kept.status == "expired" and kept.attempts == 0
    assert get_job(in_time.id, finished=True).status == "succeeded"
    assert store.totals(Q)["expired"] == 1
    now = time.time() + 120
    assert sum(point.expired for point in store.history.points(Q, now, minutes=5)) == 1
    assert sum(point.done for point in store.history.points(Q, now, minutes=5)) == 2


def test_a_job_claimed_before_its_expiry_runs(store):
    t.remember.schedule("soon", expires=60)
    burst(offset=30)
    assert t.CALLS == [(("soon",), {})]
    assert store.totals(Q)["expired"] == 0


def test_a_retry_due_after_the_expiry_expires_when_it_is_claimed(store):
    job = fails_then_waits.schedule("r", expires=90)
    burst()  # attempt 1 fails; its retry is due in 100-125 s, after the expiry
    assert RUNS == [("r", 1)] and get_job(job.id).status == "pending"
    burst(offset=200)
    assert RUNS == [("r", 1)]  # never run again
    kept = get_job(job.id, finished=True)
    assert kept.status == "expired" and kept.attempts == 1
    assert [e["type"] for e in kept.errors] == ["builtins.ValueError"]


def test_an_expired_member_ends_its_batch_as_a_cancelled_one_does(store):
    """The batch counts it as ended ('expired'): 'complete' fires, 'success' does not (not
    every member succeeded), 'death' does not (it did not die)."""
    with batch(
        on_success=t.remember.call("success"),
        on_complete=t.remember.call("complete"),
        on_death=t.remember.call("death"),
    ) as b:
        t.remember.schedule("member", expires=60)
        t.remember.schedule("other")
    burst(offset=120)
    burst(offset=120)
    state = get_batch(b.id)
    assert (state.expired, state.succeeded, state.pending, state.done) == (1, 1, 0, True)
    assert sorted(call[0][0] for call in t.CALLS) == ["complete", "other"]


def test_a_lost_reply_of_expire_is_sent_again_and_answers_gone(store):
    """The worker's round trip was lost after Redis ran it: the re-send answers 0 (gone),
    the job stays expired, never run, counted once."""
    job = t.remember.schedule("lost", expires=60)
    claimed = claim(store, now=time.time() + 120, token="w#9")
    assert [c.id for c in claimed.jobs] == [job.id]
    op = expire_op(store, Q, [(job.id, "w#9", None)], now=time.time() + 120)
    assert store.run([op, op]) == [[1], [0]]
    burst(offset=120)
    assert t.CALLS == [] and get_job(job.id, finished=True).status == "expired"
    assert store.totals(Q)["expired"] == 1


# Admin ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_job_page_shows_the_expiry_and_the_expired_status(store, admin_client):
    from tests.test_admin import text, url

    pending = t.remember.schedule("waiting", delay=600, expires=3600)
    page = text(admin_client.get(url("detail", Q, pending.id)))
    assert 'id="dq-job-expires"' in page and "Expires at" in page
    plain = t.remember.schedule("plain", delay=600)
    assert 'id="dq-job-expires"' not in text(admin_client.get(url("detail", Q, plain.id)))
    late = t.remember.schedule("late", expires=60)
    burst(offset=120)
    page = text(admin_client.get(url("detail", Q, late.id)))
    assert "<td>Expired</td>" in page and "Expired, not run" in page


@pytest.mark.parametrize("redis_client", ["real"], indirect=True)  # the async API: a server
def test_aschedule_takes_expires(store):
    import asyncio

    from django_delayq import aschedule

    job = asyncio.run(aschedule(t.remember, "async", expires=timedelta(seconds=30)))
    assert job.expires_at is not None and get_job(job.id).expires_at == job.expires_at
    burst(offset=60)
    assert t.CALLS == [] and get_job(job.id, finished=True).status == "expired"


def test_the_worker_finds_the_flag_behind_the_longest_header(store):
    """max_retries of 9 digits and every flag: 'x' is the header's 17th byte."""
    from django_delayq.worker.expiry import sift

    spec = JobSpec(
        "tests.testapp.tasks.add",
        [1, 2],
        {"k": 1},
        None,
        10**9 - 1,
        tombstone=True,
        long_tombstone=True,
        undecided=True,
        grouped=True,
        linked=True,
        traced=True,
        expires_ms=int(T0 * 1000) - 1,
    )
    data = encode_job(spec).data
    assert data.index(b"x") == 16
    job_id = store.schedule(Q, new_job_id(), data, now=T0).id
    reply = claim(store, now=T0, token="w#1")
    from django_delayq.worker.execution import Attempt

    attempts = [Attempt(Q, c.id, "w#1", c.record, c.attempt, due=c.due) for c in reply.jobs]
    results = types.SimpleNamespace(history=None, forward=lambda ended: None)
    assert sift(store, results, Q, attempts, T0, KEEP) == []
    assert get_job(job_id, finished=True).status == "expired"
