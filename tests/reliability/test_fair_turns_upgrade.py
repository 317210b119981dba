"""A rolling deploy of fair queues (docs/howto/queue-control.rst): once a new worker published
``fair`` for a queue, a new producer puts each due job of a group straight into its group's
turn (``parked``) at its schedule. A 0.7.0 worker, which knows no turns, still runs every one
of them once: its sweep hands a group's waiting jobs back to pending (up to 100 every 50 ms)
and each acknowledgement of a grouped job hands one more of its group back."""

from __future__ import annotations

import pytest

from django_delayq import schedule
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, sizes, worker_env
from tests.reliability.old_workers import stop, wait_every_job_ran
from tests.reliability.tasks import mark
from tests.reliability.test_batch_outbox_edges import RELEASE_0_7
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

JOBS = 150  # over 3 groups: more than one sweep's 100 for each


def test_jobs_waiting_their_turn_run_once_on_a_0_7_worker(
    servers, runs_server, runs_client, prefix, tag, tmp_path, report
):
    data = servers.redis("data")
    with installed(Store(data.client(), prefix), QUEUES={"default": {"fair": True}}) as store:
        store.control.publish_fair({"default": True})  # as a new worker does first
        jobs = [schedule(mark, tag, f"f-{i}", group=f"g{i % 3}") for i in range(JOBS)]
        assert store.client.zcard(store.key("default", "parked")) == JOBS  # in their turns
        assert store.client.zcard(store.key("default", "pending")) == 0
    tree = old_tree(tmp_path, RELEASE_0_7, "0.7.0")
    env = worker_env(data.url, runs_server.url, prefix)
    old = start_old_worker(tree, env, tmp_path / "o", "default")
    try:
        wait_every_job_ran(store, runs_client, tag, len(jobs))
    finally:
        code = stop(old)
    done = runs(runs_client, tag)
    values = [f"f-{i}" for i in range(JOBS)]
    report(
        scenario="upgrade: jobs waiting their turn in a fair queue on a 0.7.0 worker",
        jobs=len(jobs),
        lost=len(set(values) - set(done)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == sorted(values), "a job ran twice, or never"
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert store.client.exists(store.key("default", "parked")) == 0
    assert code == 0, (tmp_path / "o").read_text()
