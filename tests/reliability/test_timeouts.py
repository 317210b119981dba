"""``@task(timeout=...)`` in a real ``delayq_worker --processes 1 --concurrency 1``: a sync
task that hangs past its timeout fails with a TimeoutError, the child that was left with its
one runner thread hung recycles itself (the supervisor starts a new process, which ends the
hung thread), the job is retried in the new child, and dead-lettered after max_retries;
other jobs all run, once."""

from __future__ import annotations

import signal

import pytest

from django_delayq import get_job, schedule_many
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import hangs, mark_pid

pytestmark = pytest.mark.reliability


def test_a_hanging_task_is_timed_out_its_child_recycled_and_the_job_dead_lettered(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix)
    others = 30
    with installed(store):
        (hanging,) = schedule_many(hangs, [(tag, "hang")])
        schedule_many(mark_pid, [(tag, f"m{i}") for i in range(others)])
    sup = workers.start(env, "--processes", "1", "--concurrency", "1", name="hung")

    def settled() -> bool:
        state = sizes(store)
        done = len(runs(runs_client, tag)) >= others
        return done and state["dead"] == 1 and state["pending"] == state["running"] == 0

    wait_until(settled, 120, "the other jobs to run and the hanging one to be dead-lettered")
    sup.signal(signal.SIGTERM)
    code = sup.wait(60)
    output = sup.output()
    started = [v.split() for v in runs(runs_client, f"{tag}:started")]
    done = runs(runs_client, tag)
    report(
        scenario="timeouts: a hanging sync task under --processes 1 --concurrency 1",
        jobs=others + 1,
        kills=0,
        lost=others - len({v.split()[0] for v in done}),
        duplicates=len(done) - len({v.split()[0] for v in done}),
        processes=len({pid for _, pid, _ in started}),
    )
    assert code == 0, output
    # max_retries=2: three attempts, each in a new process (the one before recycled itself).
    assert [attempt for _, _, attempt in started] == ["1", "2", "3"], (started, output)
    assert len({pid for _, pid, _ in started}) == 3, (started, output)
    assert output.count("1 runner thread left in tasks past their timeout") >= 3, output
    # The first two children were replaced before attempts 2 and 3; the third may still be
    # making way when the test's SIGTERM arrives (then its exit is logged as a stop).
    assert output.count("recycled itself") >= 2, output
    # The other jobs ran once each; the hanging one never finished anywhere.
    assert sorted(v.split()[0] for v in done) == sorted(f"m{i}" for i in range(others))
    with installed(store):
        job = get_job(hanging.id)
    assert job.status == "dead" and job.attempts == 3, job
    assert [e["type"] for e in job.errors] == ["builtins.TimeoutError"] * 3
    assert "tests.reliability.tasks.hangs ran past its timeout of 1 s" in job.errors[0]["message"]
    assert "Stack of the runner thread at the timeout" in job.errors[0]["traceback"]
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 1, "records": 1}
