"""Scenario 9: Redis Sentinel through django-redis's Sentinel client (one master, one
replica, one sentinel, all on loopback), with the master crashing (SIGKILL) mid-run and
the sentinel promoting the replica."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import pytest
from django.test import override_settings

from django_delayq import ConnectionError as DelayQConnectionError
from django_delayq import schedule, schedule_many
from django_delayq.storage import connection as dq_connection
from django_delayq.storage.connection import get_store
from tests.reliability.harness import HOST, runs, settled, sizes, wait_until, worker_env
from tests.reliability.tasks import mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]


def sentinel_cache(setup) -> dict:
    """The CACHES entry docs/howto/cluster.rst documents for Sentinel (django-redis)."""
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{setup.service}/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [(HOST, setup.sentinel.port)],
        },
    }


def replicated(master) -> bool:
    """True when the replica has acknowledged every write of the master."""
    with contextlib.closing(master.client()) as client:
        info = client.info("replication")
    replica = info.get("slave0") or {}
    return replica.get("offset") == info["master_repl_offset"]


class Producer(threading.Thread):
    """Schedules one job every 10 ms; can be held still for an instant."""

    def __init__(self, tag: str) -> None:
        super().__init__(daemon=True)
        self.tag = tag
        self.acked: list[str] = []
        self.refused = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.hold = threading.Lock()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            with self.hold:
                value = f"p{i}"
                i += 1
                try:
                    schedule(mark, self.tag, value)
                except DelayQConnectionError:
                    self.refused += 1
                except BaseException as exc:
                    self.errors.append(exc)
                else:
                    self.acked.append(value)
            self.stop.wait(0.01)


def test_sentinel_failover_during_a_run(
    servers, runs_server, runs_client, workers, prefix, tag, report, settings
):
    setup = servers.sentinel()
    batch, visibility = 1500, 3
    settings.CACHES = {**settings.CACHES, "sentinel": sentinel_cache(setup)}
    delayq = {"CACHE": "sentinel", "PREFIX": prefix, "RETRY_BACKOFF": 0}
    env = worker_env(
        runs_server.url,  # the default cache: unused, DELAYQ["CACHE"] is "sentinel"
        runs_server.url,
        prefix,
        SENTINELS=f"{HOST}:{setup.sentinel.port}",
        SENTINEL_SERVICE=setup.service,
        VISIBILITY_TIMEOUT=visibility,
        MAX_SLEEP=1,
    )
    producer = Producer(tag)
    with override_settings(DELAYQ=delayq):
        store = get_store()
        assert store.client.connection_pool.service_name == setup.service
        began = time.monotonic()
        calls = [{"args": [tag, str(i)], "delay": 1 + i / 300} for i in range(batch)]
        schedule_many(mark, calls)
        procs = [workers.start(env, "--concurrency", "4", "-v", "0") for _ in range(2)]
        producer.start()
        try:
            wait_until(lambda: runs_client.llen(f"runs:{tag}") > batch // 4, 30, "the run")
            with producer.hold:  # every acknowledged write has reached the replica
                # (a bound, not a timing: a loaded 2-core machine took over 10 s once)
                wait_until(lambda: replicated(setup.master), 30, "the replica to catch up")
                setup.master.stop(signal.SIGKILL)
            crashed = time.monotonic()
            wait_until(
                lambda: setup.master_port() == setup.replica.port, 30, "the sentinel's failover"
            )
            failover = time.monotonic() - crashed
            acked_at_failover = len(producer.acked)
            wait_until(
                lambda: len(producer.acked) > acked_at_failover + 20,
                30,
                "schedule() to work against the new master",
            )
        finally:
            producer.stop.set()
            producer.join(30)
        expected = {str(i) for i in range(batch)} | set(producer.acked)
        wait_until(lambda: expected <= set(runs(runs_client, tag)), 60, "every acked job to run")
        wait_until(lambda: settled(store), 30, "drained")
        elapsed = time.monotonic() - began
        dead = sizes(store)["dead"]
        dq_connection.reset()
    alive = [proc.alive() for proc in procs]
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    done = runs(runs_client, tag)
    report(
        scenario="9. Sentinel failover (master SIGKILLed, replica promoted)",
        jobs=len(expected),
        kills=1,
        lost=len(expected - set(done)),
        duplicates=len(done) - len(set(done)),
        seconds=elapsed,
        failover_seconds=round(failover, 1),
        refused_during_failover=producer.refused,
    )
    assert not producer.errors, producer.errors
    assert alive == [True, True] and codes == [0, 0], workers.outputs()
    assert expected <= set(done) and dead == 0
