"""A rolling deploy of expiries (docs/howto/upgrading.rst): jobs a new producer stores with
``expires=`` (record flag 'x', the expiry as JSON whitespace at the record's end) are run by
a 0.7.0 worker, which knows no expiry, once each: never lost, never run twice, whether
their expiry is ahead or already past."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_delayq import schedule
from tests.reliability.harness import installed, runs, sizes
from tests.reliability.old_workers import old_0_7_worker, stop, wait_every_job_ran
from tests.reliability.tasks import mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

JOBS = 20


def test_jobs_with_an_expiry_run_once_on_a_0_7_worker(
    servers, runs_server, runs_client, prefix, tag, tmp_path, report
):
    _, store, old = old_0_7_worker(servers, runs_server, prefix, tmp_path)
    past = timezone.now() - timedelta(seconds=1)
    try:
        with installed(store):
            jobs = [schedule(mark, tag, f"ahead-{i}", expires=3600) for i in range(JOBS)]
            jobs += [schedule(mark, tag, f"past-{i}", expires=past) for i in range(JOBS)]
            jobs.append(schedule(mark, tag=tag, value="keywords", expires=60))  # flag 'k'
        assert all(job.expires_at is not None for job in jobs)
        wait_every_job_ran(store, runs_client, tag, len(jobs))
    finally:
        code = stop(old)
    done = runs(runs_client, tag)
    values = [f"ahead-{i}" for i in range(JOBS)] + [f"past-{i}" for i in range(JOBS)]
    values.append("keywords")
    report(
        scenario="upgrade: jobs with an expiry on a 0.7.0 worker",
        jobs=len(jobs),
        lost=len(set(values) - set(done)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == sorted(values), "a job ran twice, or never"
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert code == 0, (tmp_path / "o").read_text()
