"""A rolling deploy of the plain schedule path: jobs that this release stores through
lua/schedule_plain.lua (schedule(), its plain jobs) are run by a 0.7.0 worker, which knows
only schedule.lua's jobs, once each: the stored bytes are the ones 0.7.0 wrote."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.storage.scripts import script
from tests.reliability.harness import installed, runs, sizes
from tests.reliability.old_workers import old_0_7_worker, stop, wait_every_job_ran
from tests.reliability.tasks import mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

JOBS = 40


def test_jobs_schedule_plain_stored_run_once_on_a_0_7_worker(
    servers, runs_server, runs_client, prefix, tag, tmp_path, report
):
    data, store, old = old_0_7_worker(servers, runs_server, prefix, tmp_path)
    try:
        with installed(store):
            jobs = [schedule(mark, tag, str(i), delay=i % 3) for i in range(JOBS)]
            jobs.append(schedule(mark, tag=tag, value="keywords"))  # flag 'k'
        # They went through schedule_plain.lua: this process never loaded schedule.lua
        # (the old worker loads only its own scripts, which schedule nothing).
        loaded = data.client().script_exists(script("schedule_plain").sha, script("schedule").sha)
        assert loaded == [True, False]
        assert {job.outcome for job in jobs} == {"created"}
        wait_every_job_ran(store, runs_client, tag, len(jobs))
    finally:
        code = stop(old)
    done, values = runs(runs_client, tag), [*map(str, range(JOBS)), "keywords"]
    report(
        scenario="upgrade: schedule_plain's jobs on a 0.7.0 worker",
        jobs=len(jobs),
        lost=len(set(values) - set(done)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == sorted(values), "a job ran twice, or never"
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert code == 0, (tmp_path / "o").read_text()
