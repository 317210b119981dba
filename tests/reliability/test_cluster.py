"""Scenario 8: a real 3-master Redis Cluster (``redis-cli --cluster create``), configured
with ``DELAYQ = {"REDIS_URL": ..., "CLUSTER": True}``; several queues on different nodes."""

from __future__ import annotations

import signal
import time

import pytest
import redis
from django.test import override_settings

from django_delayq import cancel, get_job, schedule_many
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import decode_record, encode_record
from django_delayq.storage import connection as dq_connection
from django_delayq.storage.connection import get_store
from tests.reliability.harness import runs, wait_until, worker_env
from tests.reliability.tasks import explode, mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]


def queues_on_each_node(cluster, prefix: str) -> list[str]:
    """One queue name per cluster node (its keys' hash tag lands in that node's slots)."""
    chosen: dict[int, str] = {}
    for i in range(200):
        name = f"q{i}"
        chosen.setdefault(cluster.node_of(f"{prefix}:{{{name}}}:pending"), name)
        if len(chosen) == len(cluster.nodes):
            return [chosen[node] for node in sorted(chosen)]
    raise AssertionError("could not place a queue on every node")


def test_cluster_schedule_claim_ack_fail_recover_and_listing(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    cluster = servers.cluster(3)
    queues = queues_on_each_node(cluster, prefix)
    per_queue, visibility = 300, 2
    delayq = {
        "REDIS_URL": cluster.url,
        "CLUSTER": True,
        "PREFIX": prefix,
        "RETRY_BACKOFF": 0,
        "QUEUES": queues,
        "VISIBILITY_TIMEOUT": visibility,
    }
    with override_settings(DELAYQ=delayq):
        store = get_store()
        assert store.cluster and isinstance(store.client, redis.RedisCluster)
        began = time.monotonic()
        for queue in queues:
            calls = [{"args": [tag, f"{queue}/{i}"], "delay": i / 200} for i in range(per_queue)]
            schedule_many(mark, calls, queue=queue)
            # unique keys: replaced, kept, cancelled
            first = mark.schedule(tag, "never", key=f"k-{queue}", delay=5, queue=queue)
            kept = mark.schedule(tag, f"{queue}/keyed", key=f"k-{queue}", delay=1, queue=queue)
            assert (kept.outcome, kept.id) == ("replaced", first.id)
            again = mark.schedule(tag, "never", key=f"k-{queue}", on_conflict="keep", queue=queue)
            assert (again.outcome, again.id) == ("kept", kept.id)
            doomed = mark.schedule(tag, "never", key=f"doomed-{queue}", delay=60, queue=queue)
            assert cancel(key=f"doomed-{queue}") and get_job(doomed.id) is None
            # failing on purpose: dead-lettered after 2 attempts
            explode.schedule(tag, f"{queue}/boom", queue=queue)
        for queue in queues:  # claimed and started by a worker that dies at once: recovered
            claim = store.claim(queue, 1, lease=visibility, token="ghost#1", instance="ghost")
            (ghosted,) = claim.jobs
            store.call(store.mark_op(queue, ghosted.id, claim.now + visibility))
            assert decode_record(ghosted.record).args == [tag, f"{queue}/0"]
        # django.tasks results (backends.py) live in the queue's slot too.
        for queue in queues:
            job_id = new_job_id()
            record = encode_record(mark.name, [tag, f"{queue}/with-result"], {})
            stored = store.schedule_with_result(queue, job_id, record, b"result", 60, delay=0)
            assert stored.outcome == "created"
            assert store.load_result(job_id) == b"result"
        assert store.queues() == sorted(queues)

        env = worker_env(
            runs_server.url,  # the cache's Redis: unused, DELAYQ_REDIS_URL wins
            runs_server.url,
            prefix,
            REDIS_URL=cluster.url,
            CLUSTER=1,
            VISIBILITY_TIMEOUT=visibility,
        )
        procs = [
            workers.start(env, "--queues", ",".join(queues), "--concurrency", "4", "-v", "0")
            for _ in range(2)
        ]
        wanted = {f"{q}/{i}" for q in queues for i in range(per_queue)}
        wanted |= {f"{q}/{kind}" for q in queues for kind in ("keyed", "with-result")}

        def finished() -> bool:
            return wanted <= set(runs(runs_client, tag))

        wait_until(finished, 60, "every job on every node to run")
        # An idle worker is woken on the job's own node (one BLPOP per queue on a cluster).
        time.sleep(0.5)
        woke = time.monotonic()
        mark.schedule(tag, "wake-up", queue=queues[-1])
        wait_until(lambda: "wake-up" in runs(runs_client, tag), 10, "the wake-up job")
        wake_latency = time.monotonic() - woke
        wait_until(
            lambda: all(store.counts(q, time.time())["dead"] == 1 for q in queues),
            30,
            "one dead job per queue",
        )
        elapsed = time.monotonic() - began
        for proc in procs:
            proc.signal(signal.SIGTERM)
        codes = [proc.wait(30) for proc in procs]

        for queue in queues:
            counts = store.counts(queue, time.time())
            (dead,) = store.page(queue, "dead", 0, 10)
            assert counts["pending"] == counts["running"] == 0, (queue, counts)
            job = get_job(dead.id)
            assert (
                job.status == "dead" and job.attempts == 2 and "fails on purpose" in job.last_error
            )
            assert store.requeue(queue, [dead.id]) == [1]
            assert store.page(queue, "pending", 0, 10)[0].id == dead.id
            assert cancel(dead.id)
        dq_connection.reset()
    output = workers.outputs(lines=5000)
    done = runs(runs_client, tag)
    values = {v for v in done if v != "wake-up"}
    report(
        scenario="8. Redis Cluster, 3 masters, 3 queues on 3 nodes",
        jobs=len(done),
        lost=len(wanted - values),
        duplicates=len(done) - len(set(done)),
        seconds=elapsed,
        wake_latency_ms=round(wake_latency * 1000),
    )
    assert codes == [0, 0], output
    assert "CROSSSLOT" not in output and "Traceback" not in output
    assert output.count("recovered from a lost worker") == len(queues)
    assert wanted <= values and "never" not in values
    assert len(done) == len(set(done))  # no crash, so each job ran once
