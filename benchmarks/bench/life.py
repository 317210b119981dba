"""A job's whole life on a dedicated redis-server, for benchmarks/engine_cost.py: n jobs
scheduled one call each (or with schedule_many), then drained by one worker process at
concurrency 1, each doing one RPUSH; Redis's CPU (the redis-server process's utime + stime
from /proc/<pid>/stat) and ``INFO commandstats`` of each phase (reset between), the worker
process's CPU, and the drain's rate (first task start to last, from the start times the
task pushes).

The worker's start-up (connecting, loading scripts, registering) falls inside the drain
phase of Redis's figures for every system alike; the worker's own CPU is counted from its
first claim (the seed worker's own clock; delayq_worker's /proc times when it logged
"started") to the last job done.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import rediscpu, seed
from .common import QUEUE, ROOT, Timer, Workers
from .latency import parse_pushed

PARSERS = {
    "python": "redis._parsers.resp2._RESP2Parser",
    "hiredis": "redis._parsers.hiredis._HiredisParser",
}


def redis_pid(client: Any) -> int:
    return int(client.info("server")["process_id"])


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc (10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Phase:
    """Reset commandstats, then read what Redis did since: its process CPU and its stats
    (``logged``: every command in the slow log too, for the attribution)."""

    def __init__(self, client: Any, pid: int, logged: bool = False) -> None:
        self.client, self.pid, self.logged = client, pid, logged
        if logged:
            rediscpu.start_logging(client)
        self.info_cpu = rediscpu.reset(client)
        self.cpu = process_cpu(pid)

    def read(self, names: dict[str, str] | None = None) -> dict[str, Any]:
        cpu = process_cpu(self.pid) - self.cpu
        phase = rediscpu.read_phase(self.client, self.info_cpu, names or {}, self.logged)
        phase["proc_cpu_s"] = cpu
        if self.logged:
            rediscpu.stop_logging(self.client)
        return phase


def url_of(client: Any, db: int) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{db}"


@contextlib.contextmanager
def api_on(url: str, prefix: str, parser: str) -> Iterator[Any]:
    """schedule() and the Store of this process on ``url``, replies read by ``parser``
    (django-redis keeps one pool per URL: each parser has a database of its own)."""
    from django.test import override_settings

    from benchmarks import tasks
    from django_delayq.storage import connection

    caches = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"PARSER_CLASS": PARSERS[parser]},
        }
    }
    delayq = {"CACHE": "default", "PREFIX": prefix}
    with override_settings(CACHES=caches, DELAYQ=delayq, BENCH_PARSER_CLASS=PARSERS[parser]):
        connection.reset()
        tasks._push_client = None
        try:
            yield connection.get_store()
        finally:
            connection.reset()
            tasks._push_client = None


def pushed(client: Any, prefix: str) -> dict[int, float]:
    return parse_pushed(client.lrange(f"{prefix}:pushed", 0, -1))


def rate_of(stamps: dict[int, float]) -> float:
    return (len(stamps) - 1) / (max(stamps.values()) - min(stamps.values()))


def seed_life(client: Any, pid: int, prefix: str, n: int, parser: str, logged: bool) -> dict:
    """The seed pattern's life: n ZADD round trips, then its worker process drains."""
    from django.utils.module_loading import import_string

    own = client
    own.flushdb()
    url = url_of(own, own.connection_pool.connection_kwargs.get("db", 0))
    producer = type(own).from_url(url, parser_class=import_string(PARSERS[parser]))
    producer.ping()
    phase = Phase(own, pid, logged)
    with Timer() as timer:
        seed.schedule(producer, n)
    scheduled = phase.read()
    producer.close()
    argv = [sys.executable, "-m", "benchmarks.bench.seed", url, PARSERS[parser]]
    return own_worker_life(own, pid, prefix, n, argv, timer.seconds, scheduled, logged)


def own_worker_life(
    own: Any,
    pid: int,
    prefix: str,
    n: int,
    argv: list[str],
    scheduling: float,
    scheduled: dict[str, Any],
    logged: bool = False,
) -> dict[str, Any]:
    """The drain by a worker of the benchmark's own (``argv``: the seed pattern's, the
    prototypes' lean loop), which prints ``ready``, drains, and prints its CPU seconds and
    the jobs it ran as JSON; the life's figures with the schedule phase before it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DELAYQ_BENCH_PREFIX": prefix}
    phase = Phase(own, pid, logged)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=120 + n / 100)
    drained = phase.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[2]} exited with {proc.returncode}: {out[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    stamps = pushed(own, prefix)
    assert len(stamps) == n == result["done"], (len(stamps), n, result)
    return {
        "schedule_rate": n / scheduling,
        "rate": rate_of(stamps),
        "worker_cpu_us": result["cpu_s"] / n * 1e6,
        "phases": {"schedule": scheduled, "drain": drained},
    }


def delayq_env(url: str, prefix: str, parser: str, keep: bool) -> dict[str, str]:
    env = {"REDIS_URL": url, "DELAYQ_BENCH_PREFIX": prefix, "DELAYQ_BENCH_PARSER": parser}
    if not keep:
        env.update(DELAYQ_BENCH_KEEP_FINISHED="0", DELAYQ_BENCH_HISTORY="0")
    return env


def drain(
    own: Any,
    store: Any,
    pid: int,
    n: int,
    workdir: Path,
    env: dict[str, str],
    logged: bool,
    settled: Any = None,
) -> tuple[dict[str, Any], Workers]:
    """One ``delayq_worker --burst`` process at concurrency 1 drains what is due: the
    drain phase's Redis figures and the exited worker (its CPU sampled at "started" and
    once the last job was done: ``settled()`` true, by default nothing pending or running
    and every task run)."""
    prefix = env["DELAYQ_BENCH_PREFIX"]
    running = store.key(QUEUE, "running")
    pending = store.key(QUEUE, "pending")

    def done() -> bool:
        if own.llen(f"{prefix}:pushed") < n:
            return False
        return own.zcard(running) == 0 and own.zcard(pending) == 0

    settled = settled or done
    phase = Phase(own, pid, logged)
    workers = Workers(1, workdir, "--burst", env=env)
    try:
        deadline = time.monotonic() + 120 + n / 100
        while True:
            workers.sample_started()
            if settled():
                workers.sample_end()
                break
            if time.monotonic() > deadline or not workers.running():
                workers.check_alive()
                raise RuntimeError(f"the drain did not end: {workers.tail()}")
            time.sleep(0.005)
        result = phase.read(rediscpu.script_names(store))
        workers.wait(60)
    finally:
        workers.stop()
    workers.check_alive()
    return result, workers


def delayq_life(
    own: Any,
    pid: int,
    prefix: str,
    n: int,
    workdir: Path,
    parser: str,
    keep: bool,
    logged: bool,
) -> dict[str, Any]:
    """schedule() of n plain jobs due now, one call each, then a burst worker drains them."""
    from benchmarks.tasks import redis_push

    own.flushdb()
    db = own.connection_pool.connection_kwargs.get("db", 0)
    url = url_of(own, db)
    with api_on(url, prefix, parser) as store:
        redis_push.schedule(-1, queue="warmup", delay=3600)  # connect, load the script
        names = rediscpu.script_names(store)
        phase = Phase(own, pid, logged)
        schedule = redis_push.schedule
        with Timer() as timer:
            for i in range(n):
                schedule(i)
        scheduled = phase.read(names)
        env = delayq_env(url, prefix, parser, keep)
        drained, workers = drain(own, store, pid, n, workdir, env, logged)
    stamps = pushed(own, prefix)
    assert len(stamps) == n, (len(stamps), n, workers.tail())
    return {
        "schedule_rate": n / timer.seconds,
        "rate": rate_of(stamps),
        "worker_cpu_us": workers.work_cpu_seconds() / n * 1e6,
        "phases": {"schedule": scheduled, "drain": drained},
    }


def many_life(
    own: Any,
    pid: int,
    prefix: str,
    n: int,
    workdir: Path,
    parser: str,
    in_batch: bool,
    logged: bool = False,
) -> dict[str, Any]:
    """schedule_many() of n plain jobs due now (in one ``batch(on_complete=noop)`` or not),
    then a burst worker drains them (and, for the batch, forwards every member's end and
    runs the on_complete)."""
    from benchmarks.bench.batches import _settled
    from benchmarks.tasks import noop, redis_push
    from django_delayq import batch, schedule_many

    own.flushdb()
    url = url_of(own, own.connection_pool.connection_kwargs.get("db", 0))
    with api_on(url, prefix, parser) as store:
        redis_push.schedule(-1, queue="warmup", delay=3600)
        names = rediscpu.script_names(store)
        phase = Phase(own, pid, logged)
        batch_key = None
        with Timer() as timer:
            if in_batch:
                with batch(on_complete=noop.call(-1)) as opened:
                    schedule_many(redis_push, [(i,) for i in range(n)])
                batch_key = store.batch_keys(opened.id)[0]
            else:
                schedule_many(redis_push, [(i,) for i in range(n)])
        scheduled = phase.read(names)
        env = delayq_env(url, prefix, parser, keep=True)

        def settled() -> bool:
            return own.llen(f"{prefix}:pushed") >= n and _settled(store, batch_key)

        drained, workers = drain(own, store, pid, n, workdir, env, logged, settled)
    stamps = pushed(own, prefix)
    assert len(stamps) == n, (len(stamps), n)
    return {
        "schedule_rate": n / timer.seconds,
        "rate": rate_of(stamps),
        "worker_cpu_us": workers.work_cpu_seconds() / n * 1e6,
        "phases": {"schedule": scheduled, "drain": drained},
    }


def redis_us(life: dict[str, Any], n: int) -> float:
    """Redis process CPU per job over the life's phases, in microseconds."""
    return sum(p["proc_cpu_s"] for p in life["phases"].values()) / n * 1e6
