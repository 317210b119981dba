"""A rolling deploy of fair queues (``DELAYQ["QUEUES"][q]["fair"]``, issue 36) beside a
0.7.0 worker (docs/howto/upgrading.rst, "From 0.7.0"): a 0.7.0 worker knows no turns and
claims a fair queue's jobs as it claims any queue's; a new worker claims them in turns. Two
of each share one fair queue, grouped and ungrouped jobs due over a few seconds: every job
runs exactly once, and none is left in any structure (no grouped job stranded where only
one version looks). Written against the public behaviour (schedule with group=, count the
runs), not the keys the turns are kept in."""

from __future__ import annotations

import json
import signal
from collections import Counter

import pytest

from django_delayq import schedule_many
from django_delayq.storage.store import Store
from tests.reliability.harness import (
    installed,
    runs,
    sizes,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.old_workers import wait_every_job_ran
from tests.reliability.tasks import mark_pid
from tests.reliability.test_batch_outbox_edges import RELEASE_0_7
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

FAIR = {"fair": {"fair": True}}
GROUPS, PER_GROUP, LOOSE = 4, 100, 60


def test_every_job_of_a_fair_queue_runs_once_beside_a_0_7_worker(
    servers, runs_server, runs_client, workers, prefix, tag, tmp_path, report
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, QUEUES=json.dumps(FAIR), MAX_SLEEP=1)
    tree = old_tree(tmp_path, RELEASE_0_7, "0.7.0")
    # 0.7.0 refuses the option (delayq.E013: unknown option 'fair'): an old worker keeps
    # its old settings while the new code and the new setting are deployed.
    old_env = worker_env(data.url, runs_server.url, prefix, MAX_SLEEP=1)
    old = start_old_worker(tree, old_env, tmp_path / "o", "fair")
    new = workers.start(env, "--concurrency", "2", "--queues", "fair", "-v", "0", name="new")
    wait_until(lambda: waiting_workers(data) >= 2, 60, "both workers up")
    jobs = [
        {"args": [tag, f"g{g}-{i}"], "group": f"g{g}", "delay": i / 40}
        for g in range(GROUPS)
        for i in range(PER_GROUP)
    ]
    jobs += [{"args": [tag, f"loose-{i}"], "delay": i / 20} for i in range(LOOSE)]
    try:
        with installed(store, QUEUES=FAIR):  # group= is accepted for a fair queue
            # Two lots: the first due at once (a backlog the claims take in turns), the
            # second due over the next few seconds, while both workers claim.
            schedule_many(mark_pid, [{**j, "delay": 0} for j in jobs[::2]], queue="fair")
            schedule_many(mark_pid, jobs[1::2], queue="fair")
        wait_every_job_ran(store, runs_client, tag, len(jobs), "fair", 120)
    finally:
        if old.poll() is None:
            old.send_signal(signal.SIGTERM)
        old_code = old.wait(30)
        new.signal(signal.SIGTERM)
        new_code = new.wait(30)
    done = [line.split() for line in runs(runs_client, tag)]
    counts = Counter(value for value, _ in done)
    by_worker = Counter("old" if int(pid) == old.pid else "new" for _, pid in done)
    report(
        scenario="upgrade: a fair queue shared by a 0.7.0 and a new worker",
        jobs=len(jobs),
        lost=len(jobs) - len(counts),
        duplicates=sum(n - 1 for n in counts.values()),
        by_old=by_worker["old"],
        by_new=by_worker["new"],
    )
    assert sorted(counts) == sorted(j["args"][1] for j in jobs), "a job never ran"
    assert set(counts.values()) == {1}, {v: n for v, n in counts.items() if n > 1}
    assert sizes(store, "fair") == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert (old_code, new_code) == (0, 0), ((tmp_path / "o").read_text(), new.output())


def test_a_0_7_worker_left_alone_on_a_fair_queue_runs_what_the_new_one_left(
    servers, runs_server, runs_client, workers, prefix, tag, tmp_path, report
):
    """A rollback, or the new workers stopped first: a new worker starts a backlog of a fair
    queue's grouped jobs (its claims sort them into turns) and is stopped (SIGTERM) part way;
    a 0.7.0 worker alone then runs every job left, each once (queue-control.rst: an older
    worker's sweep hands the waiting jobs back to pending)."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, QUEUES=json.dumps(FAIR), MAX_SLEEP=1)
    tree = old_tree(tmp_path, RELEASE_0_7, "0.7.0")
    jobs = [
        {"args": [tag, f"g{g}-{i}"], "group": f"g{g}"} for g in range(GROUPS) for i in range(500)
    ]
    with installed(store, QUEUES=FAIR):
        schedule_many(mark_pid, jobs, queue="fair")
    new = workers.start(env, "--concurrency", "1", "--queues", "fair", "-v", "0", name="new")
    wait_until(lambda: len(runs(runs_client, tag)) >= 20, 60, "the new worker's first runs")
    new.signal(signal.SIGTERM)
    assert new.wait(30) == 0, new.output()
    by_new = len(runs(runs_client, tag))
    old = start_old_worker(
        tree, worker_env(data.url, runs_server.url, prefix, MAX_SLEEP=1), tmp_path / "o", "fair"
    )
    try:
        wait_every_job_ran(store, runs_client, tag, len(jobs), "fair", 180)
    finally:
        old.send_signal(signal.SIGTERM)
        code = old.wait(30)
    counts = Counter(line.split()[0] for line in runs(runs_client, tag))
    report(
        scenario="upgrade: a 0.7.0 worker alone after a new one on a fair queue",
        jobs=len(jobs),
        lost=len(jobs) - len(counts),
        duplicates=sum(n - 1 for n in counts.values()),
        by_new=by_new,
    )
    assert by_new < len(jobs)  # the new worker left jobs behind (in their turns)
    assert sorted(counts) == sorted(j["args"][1] for j in jobs), "a job never ran"
    assert set(counts.values()) == {1}, {v: n for v, n in counts.items() if n > 1}
    assert sizes(store, "fair") == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert code == 0, (tmp_path / "o").read_text()
