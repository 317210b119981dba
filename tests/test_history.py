"""A queue's history (storage/history.py, worker/history.py): per minute, jobs done, attempts
failed, jobs dead and lateness, kept 72 hours. The store on fakeredis and the real server
(``store`` fixture); a real burst worker for the counts it flushes."""

from __future__ import annotations

import time

import pytest

from django_delayq import schedule
from django_delayq.storage.history import (
    BAND,
    ERROR_BOUND,
    KEEP_HOURS,
    MARGIN_HOURS,
    SPAN,
    bucket_of,
    bucket_value,
    percentile,
)
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.execution import Attempt
from django_delayq.worker.history import HistoryCounts, HistoryFlush
from tests.conftest import more_settings
from tests.testapp import tasks as t

Q = "default"


def test_a_bucket_stands_for_its_values_within_the_stated_bound():
    for ms in (1, 1.5, 7, 100, 999, 60_000, 600_000, 3_600_000 * 30):
        value = bucket_value(bucket_of(ms))
        assert abs(value - ms) / ms <= ERROR_BOUND + 1e-9, ms
    assert bucket_of(0) == bucket_of(-50) == bucket_of(0.5) == 0
    assert bucket_of(10**15) == bucket_of(10**16)  # the last bucket holds everything later


def test_percentiles_read_the_rank_of_the_histogram():
    histogram = {bucket_of(10): 98, bucket_of(5000): 2}
    assert percentile(histogram, 0.5) == bucket_value(bucket_of(10))
    assert percentile(histogram, 0.99) == bucket_value(bucket_of(5000))
    assert percentile({}, 0.5) is None


def test_flushed_counts_come_back_per_minute_and_per_point(store):
    now = time.time()
    minute = int(now // 60)
    counts = {
        (Q, minute): {"d": 3, "f": 2, "x": 1, f"l{bucket_of(40)}": 4},
        (Q, minute - 1): {"d": 5, f"l{bucket_of(2000)}": 1},
        ("other", minute): {"d": 7},
    }
    left, error = store.history.flush(counts)
    assert left == {} and error is None
    points = store.history.points(Q, now, minutes=3)
    assert [p.minutes for p in points] == [1, 1, 1]
    assert points[-1].start == minute * 60
    assert (points[-1].done, points[-1].failed, points[-1].dead) == (3, 2, 1)
    assert points[-1].p50 == points[-1].p99 == bucket_value(bucket_of(40))
    assert (points[-2].done, points[-2].failed, points[-2].p50) == (
        5,
        0,
        bucket_value(bucket_of(2000)),
    )
    assert points[0].done == 0 and points[0].p50 is None
    # flushed again (a second worker): added, not replaced
    store.history.flush({(Q, minute): {"d": 1}})
    [wide] = store.history.points(Q, now, minutes=2, step=2)
    assert wide.minutes == 2 and wide.done == 3 + 1 + 5
    assert wide.p99 == bucket_value(bucket_of(2000))  # 5 samples: the 99th is the last
    assert store.history.points("other", now, minutes=1)[0].done == 7


def test_hour_keys_expire_after_the_kept_hours_and_garbage_is_skipped(store, redis_client):
    now = time.time()
    minute = int(now // 60)
    store.history.flush({(Q, minute): {"d": 1}})
    key = store.history_key(Q, minute - minute % SPAN)
    assert key.startswith(f"{store.prefix}:{{{Q}}}:")  # in the queue's slot
    ttl = redis_client.ttl(key)
    end_of_span = (minute - minute % SPAN + SPAN) * 60
    expected = end_of_span + (KEEP_HOURS + MARGIN_HOURS) * 3600 - now
    assert expected - 5 <= ttl <= expected + 1
    garbage = {
        "zz": 1,
        "7q": 3,
        "10d": 2,
        f"{minute % SPAN}l": 4,
        f"{(minute + 1) % SPAN}d": "x",
        "12345d": 9,
    }
    redis_client.hset(key, mapping=garbage)
    [point] = store.history.points(Q, now, minutes=1)
    assert point.done == 1 and point.lateness == {}
    # counts older than the kept hours expire at once: nothing is stored
    old = minute - (KEEP_HOURS + MARGIN_HOURS + 1) * 60
    store.history.flush({(Q, old): {"d": 1}})
    assert not redis_client.exists(store.history_key(Q, old - old % SPAN))


@pytest.mark.slow  # 80 hours of minutes written: started first
def test_the_size_is_bounded_by_the_hour_keys_of_72_hours(store, redis_client):
    """Every minute of 80 hours written: only the keys of the last KEEP_HOURS +
    MARGIN_HOURS hours (and the current span) live, each with at most SPAN * (fields used
    a minute) fields, each expiring within the kept hours and the margin."""
    now = time.time()
    minute = int(now // 60)
    counts = {(Q, minute - m): {"d": 9, "f": 1, "l10": 3, "l30": 1} for m in range(80 * 60)}
    store.history.flush(counts)
    keys = list(redis_client.scan_iter(match=f"{store.prefix}:{{{Q}}}:history:*"))
    assert len(keys) <= (KEEP_HOURS + MARGIN_HOURS) * 60 // SPAN + 1
    for key in keys:
        assert 0 < redis_client.ttl(key) <= (KEEP_HOURS + MARGIN_HOURS) * 3600 + SPAN * 60
        assert redis_client.hlen(key) <= SPAN * 4
    points = store.history.points(Q, now, minutes=KEEP_HOURS * 60 + 500, step=60)
    assert len(points) == KEEP_HOURS  # the window is capped at the kept hours
    assert sum(p.done for p in points) == 9 * KEEP_HOURS * 60


def test_the_claim_returns_each_job_s_due_time_from_pending_and_ranked(store):
    plain = t.add.schedule(1, 2, delay=-60)
    ranked = t.add.schedule(1, 2, delay=-30, priority=5)
    claim = store.claim(Q, 10, lease=30, token="w#1", instance="w")
    due = {c.id: c.due for c in claim.jobs}
    assert due == {plain.id: plain.due_at.timestamp(), ranked.id: ranked.due_at.timestamp()}
    again = store.claim(Q, 10, lease=30, token="w#1", instance="w")  # a re-send: not at hand
    assert {c.id: c.due for c in again.jobs} == {plain.id: None, ranked.id: None}


def test_a_failed_flush_keeps_its_counts_for_the_next(store):
    class Broken:
        class history:  # the store's subject
            @staticmethod
            def flush(counts):
                raise ConnectionError("down")

    counts = HistoryCounts(time.time)
    counts.add(Q, "d", 2)
    flush = HistoryFlush(Broken(), counts)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError):
        flush.flush()
    flush.store = store
    flush.flush()
    assert (
        store.history.points(Q, time.time(), minutes=2)[-1].done
        + store.history.points(Q, time.time(), minutes=2)[0].done
        == 2
    )


def test_a_burst_worker_flushes_what_happened_and_its_lateness(store, redis_client):
    """4 jobs done at once, 1 done after a failed attempt, 1 dead: all due 10 minutes ago
    (schedule() stores a past time as now: the scores are moved back, as if no worker ran
    for 10 minutes; the retry is due at its failure). Lateness: 6 attempts 600 s late (and
    the time the burst took), the retry's a little."""
    jobs = [t.add.schedule(i, 1) for i in range(4)]
    jobs.append(t.fails_first_attempt.schedule("h"))
    jobs.append(t.always_fails.schedule(max_retries=0, priority=3))  # a ranked one too
    past = int((time.time() - 600) * 1000)
    redis_client.zadd(store.key(Q, "pending"), {j.id: past for j in jobs[:5]}, xx=True)
    ranked = (100 - 3) * BAND + past
    assert redis_client.zadd(store.key(Q, "ranked"), {jobs[5].id: ranked}, xx=True, ch=True)
    worker = Worker([Q], burst=True)
    assert worker.run() == 0
    points = store.history.points(Q, time.time(), minutes=15)
    done, failed, dead = (sum(getattr(p, k) for p in points) for k in ("done", "failed", "dead"))
    assert (done, failed, dead) == (5, 2, 1)
    merged: dict[int, int] = {}
    for p in points:
        for bucket, count in p.lateness.items():
            merged[bucket] = merged.get(bucket, 0) + count
    assert sum(merged.values()) == 7  # every attempt's due time was known
    late = [b for b in merged if bucket_of(600_000) <= b <= bucket_of(660_000)]
    assert sum(merged[b] for b in late) == 6
    assert bucket_of(600_000) <= bucket_of(percentile(merged, 0.5)) <= bucket_of(660_000)
    assert bucket_of(percentile(merged, 0.99)) in late


def test_no_history_is_written_when_the_setting_is_off(store, redis_client):
    t.add.schedule(1, 2)
    with more_settings(store, HISTORY=False):
        assert Worker([Q], burst=True).run() == 0
    assert not list(redis_client.scan_iter(match=f"{store.prefix}:*history*"))
    assert sum(p.done for p in store.history.points(Q, time.time(), minutes=5)) == 0


def _overdue(store, redis_client, kind: str, seconds: float, priority: int = 0) -> str:
    """A pending job whose due time is moved ``seconds`` back (into ``kind``'s form)."""
    job = t.add.schedule(1, 2, priority=priority)
    due = int((store.server_time() - seconds) * 1000)
    if kind == "ranked":
        redis_client.zadd(store.key(Q, "ranked"), {job.id: (100 - priority) * BAND + due}, xx=True)
    elif kind == "parked":  # as claim.lua parks a job of a group at its limit
        redis_client.zrem(store.key(Q, "pending"), job.id)
        member = f"{t.add.name}\ng1\n{(100 - priority) * BAND + due:020d}\n{job.id}"
        redis_client.zadd(store.key(Q, "parked"), {member: 0})
    else:
        redis_client.zadd(store.key(Q, "pending"), {job.id: due}, xx=True)
    return job.id


@pytest.mark.parametrize("kind", ["pending", "ranked", "parked"])
def test_the_lag_is_the_wait_of_the_oldest_due_job_wherever_it_waits(store, redis_client, kind):
    """delayq_lag_seconds (monitoring/health.py): the oldest due job's wait, whether it is
    in pending, among the prioritised jobs or parked for its group's slot."""
    from django_delayq.monitoring.health import report

    _overdue(store, redis_client, "pending", 60)
    placed = store.server_time()  # read before the 600 s one is placed, as its due time is
    _overdue(store, redis_client, kind, 600, priority=0 if kind == "pending" else 5)
    [queue] = [q for q in report(store, [Q]).queues if q.queue == Q]
    assert 600 - 0.01 <= queue.lag <= store.server_time() - placed + 600 + 0.01


def test_recovery_counts_the_attempts_it_fails_and_the_jobs_it_dead_letters(store):
    """A worker that died holding two started jobs (one on its last attempt): the worker
    whose recovery settles them counts two failed attempts and one dead job."""
    t.always_fails.schedule(max_retries=0)
    t.always_fails.schedule(max_retries=3)
    claim = store.claim(Q, 2, lease=1, token="crashed#1", instance="crashed")
    for c in claim.jobs:
        store.call(store.mark_op(Q, c.id, claim.now + 1))
    worker = Worker([Q], clock=lambda: time.time() + 5)
    assert worker.parts.recovery.run_pass() == 2
    worker.parts.history.flush()
    [point] = store.history.points(Q, time.time(), minutes=1)
    assert (point.done, point.failed, point.dead) == (0, 2, 1)


def test_a_job_its_worker_hands_back_into_the_dead_letter_set_is_counted_dead(store):
    """A stopping worker's release.lua dead-letters a job whose unique key another pending
    job took meanwhile (Superseded): the worker counts it dead."""
    old = schedule(t.add, 1, 2, key="k")
    claim = store.claim(Q, 1, lease=60, token="w#1", instance="w")
    [claimed] = claim.jobs
    schedule(t.add, 3, 4, key="k", delay=60)  # the key is free while its job runs
    worker = Worker([Q])
    assert worker._release([Attempt(Q, old.id, "w#1", claimed.record, 1)], "stopping")
    assert store.fetch(Q, old.id).status == "dead"
    worker.parts.history.flush()
    [point] = store.history.points(Q, time.time(), minutes=1)
    assert (point.done, point.failed, point.dead) == (0, 0, 1)


def test_an_attempt_s_lateness_is_counted_in_the_minute_it_started():
    counts = HistoryCounts(lambda: 1_800_000_030.0)
    a = Attempt(Q, "a", "w#1", b"", 1, started=time.monotonic(), due=1_800_000_000.0)
    counts.settled([(a, "d", False)])
    [(where, fields)] = counts.take().items()
    assert where == (Q, 30_000_000) and fields == {"d": 1, f"l{bucket_of(30_000)}": 1}


def test_0_7_s_store_history_call_still_reads_the_points_with_a_warning(store):
    """store.history(queue, now) was a Store method until 0.8: it still answers, warning
    that it is store.history.points(...) now."""
    now = time.time()
    store.history.flush({(Q, int(now // 60)): {"d": 3}})
    with pytest.warns(DeprecationWarning, match=r"store\.history\.points\("):
        points = store.history(Q, now, minutes=1)
    assert [p.done for p in points] == [3]
