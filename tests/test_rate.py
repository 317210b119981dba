"""Rate limits (issue 20): @task(rate="N/s|m|h") paces the claims of a task in claim.lua,
across workers; jobs over the limit stay pending, due when the limit allows them."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from django_delayq import task
from django_delayq.exceptions import DelayQError
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.scheduling.options import parse_rate
from django_delayq.storage import control
from django_delayq.worker.dispatch import Worker
from tests.test_store import T0, members
from tests.testapp import tasks as t

Q = "default"
LIMITED = "tests.limited"


def put(store, task_name=LIMITED, priority=0, now=T0):
    record = encode_record(task_name, [1], {}, None, 1, "", priority)
    return store.schedule(Q, new_job_id(), record, now=now).id


def claim(store, now, limit=10, token=None):
    token = token or f"w#{uuid.uuid4().hex[:6]}"
    return store.claim(Q, limit, lease=30, token=token, instance="w", now=now)


@pytest.mark.parametrize(
    ("rate", "parsed"), [("10/s", (10, 1000)), ("3/m", (3, 60_000)), ("1/h", (1, 3_600_000))]
)
def test_parse_rate(rate, parsed):
    assert parse_rate(rate) == parsed


@pytest.mark.parametrize("bad", ["10", "0/s", "x/s", "10/d", 10, "1.5/s", "-1/s"])
def test_bad_rates_are_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match=f"got {bad!r}"):
        parse_rate(bad)
    with pytest.raises(ValueError, match="rate="):

        @task(name=f"tests.bad_rate_{uuid.uuid4().hex}", rate=bad)
        def bad_task():
            pass


def test_claims_are_paced_and_the_rest_stay_pending(store):
    store.control.publish_rates([Q], {LIMITED: (4, 1000), "tests.free": None})
    limited = [put(store) for _ in range(10)]
    free = [put(store, "tests.free") for _ in range(3)]
    first = claim(store, T0)
    assert [j.id for j in first.jobs] == [limited[0]]  # one claim of it per 250 ms
    assert first.next_due == pytest.approx(T0)  # the free jobs are due: claim again now
    second = claim(store, T0)
    assert [j.id for j in second.jobs] == free  # the held-back jobs no longer block them
    assert second.next_due == pytest.approx(T0 + 0.25)
    assert set(limited[1:]) <= members(store, "pending")
    assert store.fetch(Q, limited[1]).score == pytest.approx(T0 + 0.25)  # due when allowed
    assert store.client.hget(store.key(Q, "state"), limited[1]) is None  # no attempt
    assert claim(store, T0 + 0.1).jobs == []
    # Over many claims, no window of one second holds more than 4 claims.
    times, now = [T0], T0
    while len(times) < 10:
        now += 0.05
        times += [now] * len(claim(store, now).jobs)
    for i in range(len(times) - 4):
        assert times[i + 4] - times[i] >= 1.0 - 1e-6
    assert store.totals(Q)["limited"] > 0


def test_a_prioritised_limited_job_keeps_its_priority(store):
    store.control.publish_rates([Q], {LIMITED: (1, 1000)})
    a, b = put(store, priority=5), put(store, priority=5)
    assert [j.id for j in claim(store, T0).jobs] == [a]
    raw = store.fetch(Q, b)
    assert raw.score == pytest.approx(T0 + 1)
    assert control.split_score(store.client.zscore(store.key(Q, "ranked"), b)) == (5, T0 + 1)
    assert [j.id for j in claim(store, T0 + 1).jobs] == [b]


def test_publish_drops_a_removed_limit(store):
    store.control.publish_rates([Q], {LIMITED: (1, 1000)})
    store.control.publish_rates([Q], {LIMITED: None})
    assert store.client.hget(store.key(Q, "control"), f"rate:{LIMITED}") is None
    ids = [put(store) for _ in range(3)]
    assert [j.id for j in claim(store, T0).jobs] == ids


def test_rate_across_three_workers(real_store):
    """rate="20/s", 100 jobs (5 s of them, issue 20's span), 3 workers x concurrency 4:
    every job runs once, and no window of one second holds more than 20 starts (each run
    records its start time)."""
    tag = f"rate-{uuid.uuid4().hex[:8]}"
    key = f"runs:{tag}"

    @task(name=f"tests.rated_{tag}", rate="20/s", retry_backoff=0)
    def rated(i):
        t.runs_client().rpush(key, f"{time.time():.6f}:{i}")

    workers = [Worker([Q], concurrency=4) for _ in range(3)]
    threads = [threading.Thread(target=w.run) for w in workers]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1)  # the workers are up and idle: the steady state the limit is about
        for i in range(100):
            rated.schedule(i)
        deadline = time.monotonic() + 20
        while t.runs_client().llen(key) < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        entries = [v.decode().split(":") for v in t.runs_client().lrange(key, 0, -1)]
        assert sorted(int(i) for _, i in entries) == list(range(100))  # all ran, each once
        starts = sorted(float(s) for s, _ in entries)
        # Claims are paced one per 50 ms (no burst): 100 jobs take about 5 s. The starts are
        # recorded by the task, a little after the claim that the limit paces, so allow 50 ms
        # of start jitter around each one-second window.
        spans = [starts[i + 20] - starts[i] for i in range(len(starts) - 20)]
        print(f"shortest span of 21 starts: {min(spans):.3f} s")
        assert min(spans) >= 0.95, spans
        assert starts[-1] - starts[0] >= 4.5
    finally:
        t.runs_client().delete(key)
        for worker in workers:
            worker.request_stop()
        for thread in threads:
            thread.join(15)


def test_the_worker_writes_limits_before_its_first_claim_and_again_after_a_failure(
    store, monkeypatch, caplog
):
    """The exchange writes the registered tasks' limits before it first claims; when Redis
    refuses the write it is logged and tried again before the next claim, not given up."""
    name = f"tests.paced_{uuid.uuid4().hex[:8]}"
    task(name=name, rate="5/s", concurrency=2)(lambda: None)
    worker = Worker([Q], concurrency=1)
    real = control.ControlStore.publish_rates
    calls = []

    def refused_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise DelayQError("refused")
        return real(*args, **kwargs)

    monkeypatch.setattr(control.ControlStore, "publish_rates", refused_once)
    key = store.key(Q, "control")
    worker.parts.exchange.run()
    assert store.client.hget(key, f"rate:{name}") is None
    assert "limits could not be written" in caplog.text
    worker.parts.exchange.run()
    assert store.client.hget(key, f"rate:{name}") == b"5/1000"
    assert store.client.hget(key, f"conc:{name}") == b"2"
    worker.parts.exchange.run()
    assert len(calls) == 2  # written once: not again at every claim


def test_a_rate_above_1000_per_second_is_not_capped_at_one_claim_a_millisecond(store):
    """Claim times are whole milliseconds: a claim takes the slots of its millisecond (at
    20,000/s, 20 of them), so the rate is not cut to 1000/s; any window of one second
    still holds at most the count plus one millisecond's worth."""
    store.control.publish_rates([Q], {LIMITED: (20_000, 1000)})
    jobs = [put(store) for _ in range(50)]
    first = claim(store, T0, limit=50)
    assert [j.id for j in first.jobs] == jobs[:20]  # the 20 slots of this millisecond
    assert first.next_due == pytest.approx(T0 + 0.001)
    assert claim(store, T0, limit=50).jobs == []  # this millisecond's slots are taken
    assert len(claim(store, T0 + 0.001, limit=50).jobs) == 20
    assert len(claim(store, T0 + 0.010, limit=50).jobs) == 10  # the rest (it never banks)


def test_a_rate_of_1000_per_second_or_less_stays_exact(store):
    store.control.publish_rates([Q], {LIMITED: (1000, 1000)})
    jobs = [put(store) for _ in range(5)]
    assert [j.id for j in claim(store, T0, limit=5).jobs] == jobs[:1]
    assert [j.id for j in claim(store, T0 + 0.001, limit=5).jobs] == jobs[1:2]
