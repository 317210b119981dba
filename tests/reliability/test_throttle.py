"""Throttle windows (issue 36 item 3) with a real worker process and a real Redis: the ack
of a keyed job with ``unique_for=`` opens its key's window exactly once, also when the
acknowledging round trip's reply is lost (faults.py's proxy) and the worker sends it again;
while it holds, a schedule with the key stores nothing and answers "throttled"."""

from __future__ import annotations

import signal

import pytest

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, carries_acks, drop_reply
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

WINDOW_MS = 3_600_000


@pytest.mark.parametrize("drops", [0, 2])
def test_a_lost_ack_reply_opens_each_window_once(
    drops, servers, runs_server, runs_client, workers, prefix, tag, report
):
    jobs = 20
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    with FaultProxy(data.port) as proxy, installed(store):
        ids = [
            schedule(mark, tag, str(i), key=f"k{i}", unique_for=WINDOW_MS / 1000, max_retries=0).id
            for i in range(jobs)
        ]
        lost = proxy.add_rule(carries_acks, drop_reply(), times=drops) if drops else None
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2)
        worker = workers.start(env, name="throttler")
        if lost is not None:
            wait_until(lambda: lost.applied == drops, 30, f"{drops} lost acknowledging replies")

        def settled() -> bool:
            state = sizes(store)
            return state["pending"] == 0 == state["running"] and len(runs(runs_client, tag)) >= jobs

        wait_until(settled, 30, "the queue to drain")
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
        again = [schedule(mark, tag, f"again-{i}", key=f"k{i}") for i in range(jobs)]
    done = runs(runs_client, tag)
    report(
        scenario=f"throttle: windows after lost ack replies ({drops})",
        jobs=jobs,
        lost=len({str(i) for i in range(jobs)} - set(done)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == sorted(str(i) for i in range(jobs)), "a job ran twice, or never"
    assert [(j.outcome, j.id) for j in again] == [("throttled", i) for i in ids]
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    keys = store.key("default", "keys")
    assert store.client.zcard(store.key("default", "throttled")) == jobs
    with installed(store):
        for i, job_id in enumerate(ids):
            held, ends = store.client.hget(keys, f"\0tk{i}".encode()).decode().split("|")
            finished = get_job(job_id, finished=True)
            assert held == job_id and finished.status == "succeeded"
            # opened by the ack that acknowledged it, not again by a re-send (a later end)
            assert int(ends) == round(finished.finished_at.timestamp() * 1000) + WINDOW_MS
    assert code == 0, worker.output()
