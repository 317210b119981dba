"""A rolling deploy from 0.6.0 to 0.7: a 0.6.0 worker (git archive of its commit) beside new
ones on one queue. 0.6's scripts know nothing of finished jobs kept: its acks must go on
working, keep nothing, and leave nothing a new worker or reader trips on."""

from __future__ import annotations

import signal

import pytest

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, settled, sizes, wait_until, worker_env
from tests.reliability.tasks import mark
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker

pytestmark = pytest.mark.reliability

RELEASE_0_6 = "8d682a6"  # the last commit of 0.6.0


def test_a_0_6_worker_beside_0_7_ones_runs_jobs_once_and_keeps_none(
    servers, runs_server, runs_client, workers, prefix, tag, tmp_path
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    tree = old_tree(tmp_path, RELEASE_0_6, "0.6.0")
    old = start_old_worker(tree, env, tmp_path / "old.log", "default")
    new = None
    phases: dict[str, list[str]] = {}

    def drain(name: str, count: int) -> None:
        phases[name] = [schedule(mark, tag, f"{name}{i}").id for i in range(count)]
        total = sum(len(ids) for ids in phases.values())
        wait_until(lambda: len(runs(runs_client, tag)) >= total, 60, f"phase {name} to run")
        wait_until(lambda: settled(store), 30, "its acks")

    try:
        with installed(store):
            drain("old-only-", 30)  # acknowledged by the 0.6 worker alone
            new = workers.start(env, name="new")
            drain("both-", 60)
            old.send_signal(signal.SIGTERM)
            assert old.wait(30) == 0, (tmp_path / "old.log").read_text()
            drain("new-only-", 30)
            kept = {
                name: [get_job(job_id, finished=True) for job_id in ids]
                for name, ids in phases.items()
            }
    finally:
        if old.poll() is None:
            old.send_signal(signal.SIGTERM)
            old.wait(30)
        if new is not None:
            new.signal(signal.SIGTERM)
            assert new.wait(30) == 0, new.output()
    done = runs(runs_client, tag)
    assert sorted(done) == sorted(f"{n}{i}" for n, ids in phases.items() for i in range(len(ids)))
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert kept["old-only-"] == [None] * 30  # 0.6's ack keeps nothing, and breaks nothing
    for job in kept["both-"] + kept["new-only-"]:  # kept only by a 0.7 worker's ack
        assert job is None or (job.status == "succeeded" and job.last_attempt["worker"] == "new")
    assert all(job is not None for job in kept["new-only-"])
    assert store.finished.count("default") == sum(j is not None for js in kept.values() for j in js)
