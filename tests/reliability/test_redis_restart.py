"""Scenario 3: Redis (appendonly yes, appendfsync always) restarted in the middle of a run,
once after SIGTERM and once after SIGKILL."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_delayq import ConnectionError as DelayQConnectionError
from django_delayq import schedule, schedule_many
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, command, drop_reply
from tests.reliability.harness import installed, runs, settled, sizes, wait_until, worker_env
from tests.reliability.tasks import mark

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]


class Producer(threading.Thread):
    """Schedules one job at a time until stopped; remembers which calls returned (the job
    is acknowledged by Redis) and which raised django_delayq.ConnectionError."""

    def __init__(self, tag: str) -> None:
        super().__init__(daemon=True)
        self.tag = tag
        self.acked: list[str] = []
        self.refused: list[str] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            value = f"p{i}"
            i += 1
            try:
                schedule(mark, self.tag, value)
            except DelayQConnectionError:
                self.refused.append(value)
            except BaseException as exc:  # anything else is a bug: the test reports it
                self.errors.append(exc)
            else:
                self.acked.append(value)
            self.stop.wait(0.01)


@pytest.mark.parametrize(("how", "visibility"), [("SIGTERM", 5), ("SIGKILL", 1)])
def test_redis_restart_mid_run(
    how, visibility, servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Workers survive the outage, reconnect with backoff, and every job whose schedule()
    returned runs; schedule() while Redis is down raises django_delayq.ConnectionError.
    With a 1 s visibility timeout the leases of the jobs running at the crash expire during
    the 2 s outage: they are recovered and run again (duplicates), never lost."""
    batch = 2000
    data = servers.redis("aof", aof=True)
    store = Store(redis.Redis.from_url(data.url), prefix)  # as DELAYQ["REDIS_URL"] makes it
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=visibility, MAX_SLEEP=1)
    procs = [workers.start(env, "--concurrency", "4", "-v", "0") for _ in range(2)]
    producer = Producer(tag)
    with installed(store):
        began = time.monotonic()
        scheduled = schedule_many(
            mark, [{"args": [tag, str(i)], "delay": i / 500} for i in range(batch)]
        )
        producer.start()
        try:
            wait_until(lambda: runs_client.llen(f"runs:{tag}") > batch // 4, 30, "the run to start")
            data.stop(getattr(signal, how))
            assert not data.running
            down = time.monotonic()
            with pytest.raises(DelayQConnectionError, match="Redis is unreachable"):
                schedule(mark, tag, "while-down")
            raised_after = time.monotonic() - down
            time.sleep(max(0.0, 2.0 - raised_after))
            data.start()
            outage = time.monotonic() - down
            time.sleep(2.0)  # the producer goes on against the restarted server
        finally:
            producer.stop.set()
            producer.join(30)

        expected = {str(i) for i in range(batch)} | set(producer.acked)

        def all_ran() -> bool:
            return expected <= set(runs(runs_client, tag))

        wait_until(all_ran, 60, "every acknowledged job to run")
        wait_until(
            lambda: settled(store),
            30,
            "nothing pending or running",
        )
        elapsed = time.monotonic() - began
    alive = [proc.alive() for proc in procs]
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    done = Counter(runs(runs_client, tag))
    output = workers.outputs(lines=200)
    report(
        scenario=f"3. Redis restart after {how} (AOF, fsync always, {visibility} s leases)",
        jobs=len(scheduled) + len(producer.acked),
        kills=1,
        lost=len(expected - set(done)),
        duplicates=sum(n - 1 for n in done.values()),
        seconds=elapsed,
        outage_seconds=round(outage, 1),
        refused_while_down=len(producer.refused) + 1,
        schedule_raised_after=round(raised_after, 2),
    )
    assert not producer.errors, producer.errors
    assert alive == [True, True] and codes == [0, 0], output
    assert expected <= set(done)
    assert "while-down" not in done  # refused, so never stored
    assert "Redis unreachable" in output and "reachable again after" in output
    assert sizes(store)["dead"] == 0


@pytest.mark.parametrize("retries", [0, 3])
def test_a_schedule_whose_reply_was_lost_is_not_reported_as_failed(retries, servers, prefix, tag):
    """Redis stores the job and the reply is lost: the same EVALSHA is sent again (by
    django-delayq, or by redis-py when the client retries). schedule() and schedule_many()
    return the stored jobs: no error for a stored job, no second copy."""
    data = servers.redis("aof", aof=True)
    with FaultProxy(data.port) as proxy:
        client = redis.Redis.from_url(proxy.url)
        if retries:
            client.set_retry(Retry(NoBackoff(), retries))
        store = Store(client, prefix)

        def lose_next_reply():  # of the next script call: the schedule's
            return proxy.add_rule(command(b"EVALSHA"), drop_reply())

        with installed(store):
            schedule(mark, tag, "warm-up", delay=60)  # loads the scripts
            lost = lose_next_reply()
            job = schedule(mark, tag, "one", delay=60)
            assert lost.applied == 1
            assert job.outcome == "created"
            lost = lose_next_reply()
            keyed = schedule(mark, tag, "keyed", delay=60, key=f"{tag}:k")
            assert lost.applied == 1 and keyed.outcome == "created"
            lost = lose_next_reply()
            many = schedule_many(mark, [(tag, str(i)) for i in range(5)], delay=60)
            assert lost.applied == 1 and [j.outcome for j in many] == ["created"] * 5
            assert sizes(store)["pending"] == 8 and sizes(store)["records"] == 8
