"""Scenario 6: producers and workers whose clocks are off by +/-30 s. Due times are
computed by the scripts from Redis's TIME, so only Redis's clock matters."""

from __future__ import annotations

import contextlib
import signal
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from django_delayq import get_job
from django_delayq.jobs import ids
from django_delayq.jobs.job import job_from_raw
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, wait_until, worker_env
from tests.reliability.tasks import explode, stamp

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

SKEW = 30.0


@contextlib.contextmanager
def skewed_clock(offset: float):
    """This process's wall clock (time.time, timezone.now) off by ``offset`` seconds.

    Job ids are monotonic per process: ids made at +30 s would make every later id of this
    test process 30 s ahead too (CI: a later test's admin cancel shown before the job's
    'Scheduled'), so the id generator's state is put back afterwards."""
    real_time, real_now = time.time, timezone.now
    last = ids._last_ms, ids._last_rand
    try:
        with (
            mock.patch.object(time, "time", lambda: real_time() + offset),
            mock.patch.object(timezone, "now", lambda: real_now() + timedelta(seconds=offset)),
        ):
            yield
    finally:
        with ids._id_lock:
            ids._last_ms, ids._last_rand = last


def test_skewed_producers_and_workers_run_jobs_on_redis_clock(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Producers at +30 s and -30 s schedule with ``delay=``: each job is due ``delay``
    seconds after Redis's now and runs then, on workers whose clocks are also +/-30 s off.
    An ``at=`` computed from a skewed clock is taken as the absolute instant it names."""
    delays = (1.0, 1.5, 2.0, 2.5)
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    redis_now = store.server_time
    env = worker_env(data.url, runs_server.url, prefix)
    procs = [
        workers.start(
            env, "--concurrency", "2", "-v", "0", name=f"skew{offset:+.0f}", clock_skew=offset
        )
        for offset in (SKEW, -SKEW)
    ]
    due: dict[str, float] = {}
    job_ids: dict[str, str] = {}
    with installed(store):
        began = time.monotonic()
        for offset in (SKEW, -SKEW):
            with skewed_clock(offset):
                before, skewed, after = redis_now(), time.time(), redis_now()
                assert before + offset - 0.01 <= skewed <= after + offset + 0.01
                for d in delays:
                    before = redis_now()
                    job = stamp.schedule(tag, f"{offset:+.0f}/{d}", delay=d)
                    job_ids[f"{offset:+.0f}/{d}"] = job.id
                    after = redis_now()
                    at = job.due_at.timestamp()
                    assert before + d - 0.01 <= at <= after + d + 0.01, (offset, d)
                    due[f"{offset:+.0f}/{d}"] = at
        exploded = [explode.schedule(tag, f"boom{n}", max_retries=1) for n in range(4)]
        # at= is absolute: "my now + 2 s" from a clock 30 s fast is 32 s from now.
        before = redis_now()
        with skewed_clock(SKEW):
            ahead = stamp.schedule(tag, "at-ahead", at=timezone.now() + timedelta(seconds=2))
        after = redis_now()
        assert before + SKEW + 2 - 0.01 <= ahead.due_at.timestamp() <= after + SKEW + 2 + 0.01

        wait_until(lambda: runs_client.llen(f"runs:{tag}") >= len(due), 30, "the delay= jobs")
        time.sleep(0.5)
        elapsed = time.monotonic() - began
        assert store.fetch("default", ahead.id).status == "pending"  # no worker ran it early
        wait_until(lambda: store.size("default", "dead") == 4, 30, "the failing jobs to die")
        dead = [store.fetch("default", job.id) for job in exploded]
        ids = {v: j for v, j in job_ids.items() if v in due}
        kept = {v: get_job(j, finished=True) for v, j in ids.items()}
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    ran = dict(line.split(" ") for line in runs(runs_client, tag))
    lateness = {value: float(ran[value]) - due[value] for value in due}
    report(
        scenario="6. clock skew: producers and workers at +/-30 s",
        jobs=len(due),
        lost=len(set(due) - set(ran)),
        seconds=elapsed,
        max_lateness_ms=round(max(lateness.values()) * 1000, 1),
        min_lateness_ms=round(min(lateness.values()) * 1000, 1),
    )
    assert codes == [0, 0], workers.outputs()
    assert set(ran) == set(due)  # and not "at-ahead"
    # Never early; late by far less than the skew (a worker going by its own clock would be
    # 30 s early or late), with room for a loaded 2-core machine (1.5 s was seen there).
    assert all(-0.01 <= late < SKEW / 3 for late in lateness.values()), lateness
    # The finished jobs' timelines are on Redis's clock too: each attempt started after its
    # due time and before it ended (a start on the worker's own clock would be 30 s off).
    for value, job in kept.items():
        started = job.last_attempt["started"]
        assert due[value] - 0.01 <= started <= job.finished_at.timestamp() + 0.01, (value, job)
    # And their errors: each failed attempt's time is before the job's death, on Redis's clock
    # (a worker's own clock would put one 30 s off: SKEW / 3 as above).
    for raw in dead:
        job = job_from_raw(raw, 1)
        assert len(job.errors) == 2, job.errors
        for error in job.errors:
            assert error["at"] <= job.died_at.timestamp() + 0.01, (error, job.died_at)
            assert job.died_at.timestamp() - error["at"] < SKEW / 3, (error, job.died_at)
