"""A rolling deploy of throttle windows (docs/howto/upgrading.rst): keyed jobs a new producer
stores with ``unique_for=`` (record flag 'w', the window as JSON whitespace before the
expiry's at the record's end) are run by a 0.7.0 worker, which knows no window, once each:
never lost, never run twice; its ack opens no window, so the keys schedule again."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from tests.reliability.harness import installed, runs, sizes
from tests.reliability.old_workers import old_0_7_worker, stop, wait_every_job_ran
from tests.reliability.tasks import mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

JOBS = 20


def test_keyed_jobs_with_a_window_run_once_on_a_0_7_worker(
    servers, runs_server, runs_client, prefix, tag, tmp_path, report
):
    _, store, old = old_0_7_worker(servers, runs_server, prefix, tmp_path)
    values = [f"w-{i}" for i in range(JOBS)] + [f"wx-{i}" for i in range(JOBS)] + ["keywords"]
    try:
        with installed(store):
            jobs = [
                schedule(mark, tag, f"w-{i}", key=f"w{i}", unique_for=3600) for i in range(JOBS)
            ]
            jobs += [
                schedule(mark, tag, f"wx-{i}", key=f"x{i}", unique_for=60, expires=3600)
                for i in range(JOBS)
            ]
            jobs.append(schedule(mark, tag=tag, value="keywords", key="k", unique_for=60))
        assert all(job.outcome == "created" for job in jobs)
        wait_every_job_ran(store, runs_client, tag, len(jobs))
    finally:
        code = stop(old)
    done = runs(runs_client, tag)
    report(
        scenario="upgrade: keyed jobs with unique_for on a 0.7.0 worker",
        jobs=len(jobs),
        lost=len(set(values) - set(done)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == sorted(values), "a job ran twice, or never"
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert store.client.zcard(store.key("default", "throttled")) == 0  # 0.7.0 opens none
    with installed(store):
        assert schedule(mark, tag, "again", key="w0", unique_for=60).outcome == "created"
    assert code == 0, (tmp_path / "o").read_text()
