"""django-delayq benchmarks: speed, latency, memory and scale against a real Redis.

Usage (from the repository root, with django-delayq installed)::

    python benchmarks/run.py                 # every figure, about 5 minutes
    python benchmarks/run.py --quick         # tiny sizes, one run each: a smoke test
    python benchmarks/run.py --only drain,lateness_idle --runs 5

Environment and options:

- ``REDIS_URL`` (default ``redis://127.0.0.1:6379/15``): the Redis that throughput and
  lateness are measured on. Only keys under the benchmark's prefix (``--prefix``,
  default ``delayq-bench``) are written and deleted; nothing is flushed.
- Memory and claim-cost figures need a Redis with nothing else in it (``INFO
  used_memory`` must not see other clients' keys, and a million jobs should not land in
  a shared server): the script starts its own ``redis-server`` (``--redis-server``,
  default the one on ``PATH``) on a free 127.0.0.1 port, with persistence off, and stops
  it at the end. Without one those figures are reported as not measured.
- ``--json PATH`` (default ``benchmarks/results/latest.json``, git-ignored).

Every figure is the median of several runs, and each run also measures a raw redis-py
baseline for the same work, so the ratio column holds on a noisy machine (the ratio is
the median of the per-run ratios). Workers are real ``python -m django delayq_worker``
processes at concurrency 1 with the default verbosity 1 (a log line per job start and
finish), logging to a file; the task is a no-op ``@task`` that goes through the
registry, signals and logging like a user's.

Figures (targets from issue 5):

============================  ====================================================
schedule_one                  ``task.schedule()``, one call per job, 20k jobs due in
                              1 h, vs one raw EVALSHA per job (>= 70 %)
schedule_many                 ``schedule_many()`` of 20k jobs vs pipelined raw ZADD
                              (>= 40,000 jobs/s and >= 50 %)
drain_1                       20k due jobs, one ``delayq_worker --burst`` process,
                              from its first claim to its last ack (>= 3,000 jobs/s);
                              baseline: a raw one-round-trip-per-job loop
drain_2                       the same with 2 processes (>= 1.6x drain_1)
lateness_idle_p50/p99         500 jobs spread over 5 s (each scheduled 100 ms ahead),
                              one idle worker: task start minus due time (<= 2 /
                              10 ms); baseline: ``Event.wait()`` overshoot (the OS)
lateness_load_p99             1,000 jobs/s due for 10 s, 2 workers (<= 50 ms)
memory_per_job                100k pending jobs with a 20-byte payload, ``INFO
                              used_memory`` delta / 100k (<= 250 bytes); baseline:
                              the same ids and records with raw ZADD + HSET
claim_cost_ratio              claim+ack round trip with 1M pending vs 1k (<= 1.5)
============================  ====================================================
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUEUE = "default"
RAW_SCHEDULE = """
local t = redis.call('TIME')
local due = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], due, ARGV[1])
return 1
"""
# One round trip per job: delete the previous job, take the next due one with its record.
RAW_TAKE = """
if ARGV[1] ~= '' then redis.call('HDEL', KEYS[2], ARGV[1]) end
local t = redis.call('TIME')
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t[1] .. '.' .. t[2], 'LIMIT', 0, 1)
if not ids[1] then return {} end
redis.call('ZREM', KEYS[1], ids[1])
return {ids[1], redis.call('HGET', KEYS[2], ids[1])}
"""

SIZES = {
    "full": {
        "schedule": 20_000,
        "drain": 20_000,
        "idle_jobs": 500,
        "idle_seconds": 5.0,
        "load_rate": 1000,
        "load_seconds": 10.0,
        "memory": 100_000,
        "claim_small": 1_000,
        "claim_big": 1_000_000,
        "claim_cycles": 500,
        "runs": 5,
        "slow_runs": 3,
    },
    "quick": {
        "schedule": 300,
        "drain": 300,
        "idle_jobs": 20,
        "idle_seconds": 0.5,
        "load_rate": 200,
        "load_seconds": 0.5,
        "memory": 2_000,
        "claim_small": 200,
        "claim_big": 5_000,
        "claim_cycles": 50,
        "runs": 1,
        "slow_runs": 1,
    },
}


# -- set-up ---------------------------------------------------------------------------


def setup_django(prefix: str) -> None:
    os.environ["DELAYQ_BENCH_PREFIX"] = prefix
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()


def bench_store() -> Any:
    from django_delayq.connection import get_store

    return get_store()


def cleanup(client: Any, prefix: str) -> None:
    """Delete every key under ``prefix:`` (and nothing else)."""
    batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(batch), 500):
        client.delete(*batch[start : start + 500])


def pending_count(store: Any) -> int:
    return store.client.zcard(store.key(QUEUE, "pending"))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


# -- worker processes -------------------------------------------------------------------


class Workers:
    """``python -m django delayq_worker`` processes logging to files in ``workdir``."""

    def __init__(self, count: int, workdir: Path, *args: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        env["DELAYQ_BENCH_STAMPS"] = str(workdir)
        self.logs = [workdir / f"worker-{i}-{time.monotonic_ns()}.log" for i in range(count)]
        self.procs = []
        for log in self.logs:
            with open(log, "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "django",
                            "delayq_worker",
                            "--concurrency",
                            "1",
                            *args,
                        ],
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )

    def wait_started(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(" started: queues " in log.read_text() for log in self.logs):
                time.sleep(0.3)  # let the waker threads reach BLPOP
                return
            self.check_alive()
            time.sleep(0.02)
        raise RuntimeError("workers did not start: " + self.tail())

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() not in (None, 0):
                raise RuntimeError(f"worker exited with {proc.returncode}: " + self.tail())

    def running(self) -> bool:
        return any(proc.poll() is None for proc in self.procs)

    def wait(self, timeout: float = 120.0) -> None:
        for proc in self.procs:
            proc.wait(timeout)
        self.check_alive()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def tail(self) -> str:
        return "\n".join(log.read_text()[-2000:] for log in self.logs if log.exists())


# -- a dedicated redis-server for memory and scale ----------------------------------------


@contextlib.contextmanager
def dedicated_redis(binary: str | None) -> Iterator[Any]:
    """A fresh redis-server on a free loopback port (persistence off), or None."""
    import redis

    path = binary or shutil.which("redis-server")
    if not path:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="delayq-bench-redis-")
    proc = subprocess.Popen(
        [
            path,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"could not start {path} on port {port}") from None
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def store_on(client: Any, prefix: str) -> Iterator[Any]:
    """Make the API (schedule_many, get_store) use ``client`` while inside."""
    from django.test import override_settings

    from django_delayq import connection

    kwargs = client.connection_pool.connection_kwargs
    url = f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
    with override_settings(DELAYQ={"REDIS_URL": url, "PREFIX": prefix}):
        try:
            yield connection.get_store()
        finally:
            connection.reset()
    connection.reset()


# -- figures -------------------------------------------------------------------------


def figure(
    name: str,
    label: str,
    values: list[float],
    baselines: list[float],
    unit: str,
    target: str,
    met: Callable[[float, float], bool],
    ratio_kind: str = "value/baseline",
    note: str = "",
) -> dict[str, Any]:
    value, baseline = median(values), median(baselines) if baselines else None
    ratios = [v / b for v, b in zip(values, baselines, strict=False) if b]
    ratio = median(ratios) if ratios else None
    return {
        "name": name,
        "label": label,
        "value": value,
        "baseline": baseline,
        "ratio": ratio,
        "ratio_kind": ratio_kind,
        "unit": unit,
        "target": target,
        "met": bool(met(value, ratio if ratio is not None else float("nan"))),
        "runs": values,
        "baseline_runs": baselines,
        "note": note,
    }


def bench_schedule_one(store: Any, prefix: str, n: int, runs: int) -> dict[str, Any]:
    from benchmarks.tasks import noop
    from django_delayq.job import encode_record

    client = store.client
    raw = client.register_script(RAW_SCHEDULE)
    raw_keys = [f"{prefix}:raw:{{b}}:pending", f"{prefix}:raw:{{b}}:jobs"]
    record = encode_record(noop.name, [0], {})
    values, baselines = [], []
    for run in range(runs):
        cleanup(client, prefix)
        raw(keys=raw_keys, args=["warm", record, 3600])  # load the script
        with Timer() as t_raw:
            for i in range(n):
                raw(keys=raw_keys, args=[f"{run:04d}{i:022d}", record, 3600])
        cleanup(client, prefix)
        noop.schedule(-1, delay=3600)
        with Timer() as t_api:
            for i in range(n):
                noop.schedule(i, delay=3600)
        assert pending_count(store) == n + 1
        baselines.append(n / t_raw.seconds)
        values.append(n / t_api.seconds)
    cleanup(client, prefix)
    return figure(
        "schedule_one",
        f"schedule() jobs/s, one call per job ({n:,} due in 1 h)",
        values,
        baselines,
        "jobs/s",
        ">= 70% of raw one-EVALSHA-per-job",
        lambda v, r: r >= 0.70,
        note="raw: redis-py register_script (TIME + HSET + ZADD), one EVALSHA per job",
    )


def bench_schedule_many(store: Any, prefix: str, n: int, runs: int) -> dict[str, Any]:
    from benchmarks.tasks import noop
    from django_delayq import schedule_many
    from django_delayq.api import BULK_CHUNK

    client = store.client
    raw_key = f"{prefix}:raw:{{b}}:pending"
    values, baselines = [], []
    for run in range(runs):
        cleanup(client, prefix)
        ids = [f"{run:04d}{i:022d}" for i in range(n)]
        due = time.time() + 3600
        with Timer() as t_raw:
            for start in range(0, n, BULK_CHUNK):
                pipe = client.pipeline(transaction=False)
                for job_id in ids[start : start + BULK_CHUNK]:
                    pipe.zadd(raw_key, {job_id: due})
                pipe.execute()
        cleanup(client, prefix)
        calls = [(i,) for i in range(n)]
        noop.schedule(-1, delay=3600)
        with Timer() as t_api:
            schedule_many(noop, calls, delay=3600)
        assert pending_count(store) == n + 1
        baselines.append(n / t_raw.seconds)
        values.append(n / t_api.seconds)
    cleanup(client, prefix)
    return figure(
        "schedule_many",
        f"schedule_many() jobs/s ({n:,} jobs, batches of {BULK_CHUNK:,})",
        values,
        baselines,
        "jobs/s",
        ">= 40,000 jobs/s and >= 50% of pipelined raw ZADD",
        lambda v, r: v >= 40_000 and r >= 0.50,
        note=f"raw: one ZADD per job, pipelined, one round trip per {BULK_CHUNK:,}",
    )


def raw_drain(client: Any, prefix: str, n: int) -> float:
    """Jobs/s of the simplest correct loop: one round trip per job (take the next due
    job and its record, deleting the previous one), json.loads, call the function."""
    from benchmarks.tasks import noop
    from django_delayq.job import encode_record

    take = client.register_script(RAW_TAKE)
    keys = [f"{prefix}:raw:{{b}}:pending", f"{prefix}:raw:{{b}}:jobs"]
    record = encode_record(noop.name, [0], {})
    now = time.time() - 60
    for start in range(0, n, 10_000):
        ids = [f"{i:026d}" for i in range(start, min(n, start + 10_000))]
        client.pipeline(transaction=False).zadd(keys[0], dict.fromkeys(ids, now)).hset(
            keys[1], mapping=dict.fromkeys(ids, record)
        ).execute()
    done, previous = 0, ""
    with Timer() as t:
        while True:
            reply = take(keys=keys, args=[previous])
            if not reply:
                break
            previous = reply[0]
            fields = json.loads(reply[1])
            noop.func(*fields[1:])  # a format-2 record: [task, *args]
            done += 1
    assert done == n, (done, n)
    client.delete(*keys)
    return n / t.seconds


def drain_with_workers(store: Any, n: int, processes: int, workdir: Path) -> float:
    """Jobs/s from the first claim to the last ack, ``processes`` burst workers."""
    from benchmarks.tasks import noop
    from django_delayq import schedule_many

    schedule_many(noop, [(i,) for i in range(n)])
    pending, running = store.key(QUEUE, "pending"), store.key(QUEUE, "running")
    workers = Workers(processes, workdir, "--burst")
    first = None
    try:
        while True:
            left, busy = (
                store.client.pipeline(transaction=False).zcard(pending).zcard(running).execute()
            )
            now = time.perf_counter()
            if first is None and (left < n or busy):
                first = now
            if left == 0 and busy == 0 and first is not None:
                end = now
                break
            if not workers.running():
                workers.check_alive()
                raise RuntimeError(f"workers exited with {left} pending, {busy} running")
            time.sleep(0.003)
        workers.wait()
    finally:
        workers.stop()
    dead = store.client.zcard(store.key(QUEUE, "dead"))
    assert dead == 0, f"{dead} jobs dead-lettered: {workers.tail()}"
    return n / (end - first)


def bench_drain(store: Any, prefix: str, n: int, runs: int, workdir: Path) -> list[dict]:
    one, two, raw = [], [], []
    for _ in range(runs):
        cleanup(store.client, prefix)
        raw.append(raw_drain(store.client, prefix, n))
        cleanup(store.client, prefix)
        one.append(drain_with_workers(store, n, 1, workdir))
        cleanup(store.client, prefix)
        two.append(drain_with_workers(store, n, 2, workdir))
    cleanup(store.client, prefix)
    return [
        figure(
            "drain_1",
            f"drain jobs/s, 1 worker process, concurrency 1 ({n:,} due, no-op)",
            one,
            raw,
            "jobs/s",
            ">= 3,000 jobs/s",
            lambda v, r: v >= 3000,
            note="log: verbosity 1 to a file; raw: one EVALSHA round trip per job, in process",
        ),
        figure(
            "drain_2",
            "drain jobs/s, 2 worker processes",
            two,
            one,
            "jobs/s",
            ">= 1.6x one process",
            lambda v, r: r >= 1.6,
            ratio_kind="2 processes / 1",
            note="baseline: drain_1 of the same run",
        ),
    ]


def read_stamps(workdir: Path) -> dict[int, float]:
    stamps: dict[int, float] = {}
    for path in workdir.glob("*.txt"):
        for line in path.read_text().splitlines():
            n, started = line.split()
            stamps[int(n)] = float(started)
        path.unlink()
    return stamps


def wait_stamps(workdir: Path, count: int, workers: Workers, timeout: float) -> dict[int, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = sum(len(p.read_text().splitlines()) for p in workdir.glob("*.txt"))
        if lines >= count:
            break
        workers.check_alive()
        time.sleep(0.05)
    return read_stamps(workdir)


def os_floor(samples: int, spacing: float) -> list[float]:
    """Overshoot of threading.Event.wait() until a deadline: this machine's timer noise."""
    event = threading.Event()
    late = []
    for _ in range(samples):
        due = time.time() + spacing
        event.wait(max(0.0, due - time.time()))
        late.append(time.time() - due)
    return late


def lateness_idle(store: Any, jobs: int, seconds: float, workdir: Path) -> list[float]:
    from benchmarks.tasks import stamp

    workers = Workers(1, workdir)
    due: dict[int, float] = {}
    try:
        workers.wait_started()
        spacing = seconds / jobs
        start = time.monotonic()
        for i in range(jobs):
            pause = start + i * spacing - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            due[i] = stamp.schedule(i, delay=0.1).due_at.timestamp()
        stamps = wait_stamps(workdir, jobs, workers, timeout=10)
    finally:
        workers.stop()
    assert len(stamps) == jobs, f"{len(stamps)} of {jobs} jobs ran: {workers.tail()}"
    return [stamps[i] - due[i] for i in range(jobs)]


def lateness_load(store: Any, rate: int, seconds: float, workdir: Path) -> list[float]:
    from benchmarks.tasks import stamp
    from django_delayq import schedule_many

    workers = Workers(2, workdir)
    total = int(rate * seconds)
    try:
        workers.wait_started()
        t0 = time.time() + 1.0 + total / 40_000  # after scheduling them all
        calls = [
            {"args": [i], "at": datetime.fromtimestamp(t0 + i / rate, tz=UTC)} for i in range(total)
        ]
        due = {i: job.due_at.timestamp() for i, job in enumerate(schedule_many(stamp, calls))}
        assert time.time() < t0, "scheduling took longer than planned"
        stamps = wait_stamps(workdir, total, workers, timeout=seconds + 30)
    finally:
        workers.stop()
    assert len(stamps) == total, f"{len(stamps)} of {total} jobs ran: {workers.tail()}"
    return [stamps[i] - due[i] for i in range(total)]


def bench_lateness(store: Any, prefix: str, size: dict, runs: int, workdir: Path) -> list[dict]:
    idle50, idle99, load99, floor50, floor99 = [], [], [], [], []
    for _ in range(runs):
        cleanup(store.client, prefix)
        late = lateness_idle(store, size["idle_jobs"], size["idle_seconds"], workdir)
        idle50.append(percentile(late, 50) * 1000)
        idle99.append(percentile(late, 99) * 1000)
        floor = os_floor(max(size["idle_jobs"] // 2, 10), 0.01)
        floor50.append(percentile(floor, 50) * 1000)
        floor99.append(percentile(floor, 99) * 1000)
        cleanup(store.client, prefix)
        late = lateness_load(store, size["load_rate"], size["load_seconds"], workdir)
        load99.append(percentile(late, 99) * 1000)
    cleanup(store.client, prefix)
    what = f"{size['idle_jobs']} jobs over {size['idle_seconds']:g} s, 1 idle worker"
    note = "start of the task function minus due_at; baseline: Event.wait() overshoot"
    load = f"{size['load_rate']:,} jobs/s due for {size['load_seconds']:g} s, 2 workers"
    return [
        figure(
            "lateness_idle_p50",
            f"lateness p50 ({what})",
            idle50,
            floor50,
            "ms",
            "<= 2 ms",
            lambda v, r: v <= 2.0,
            note=note,
        ),
        figure(
            "lateness_idle_p99",
            f"lateness p99 ({what})",
            idle99,
            floor99,
            "ms",
            "<= 10 ms",
            lambda v, r: v <= 10.0,
            note=note,
        ),
        figure(
            "lateness_load_p99",
            f"lateness p99 under load ({load})",
            load99,
            floor99,
            "ms",
            "<= 50 ms",
            lambda v, r: v <= 50.0,
            note=note,
        ),
    ]


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def bench_memory(client: Any, n: int, runs: int) -> dict[str, Any]:
    from benchmarks.tasks import noop
    from django_delayq import schedule_many

    payload = "x" * 16  # the JSON arguments ["xxxxxxxxxxxxxxxx"] are 20 bytes
    values, baselines = [], []
    for _ in range(runs):
        client.flushdb()
        with store_on(client, "delayq") as store:
            noop.schedule("warm", queue="warmup")  # scripts loaded, queue registry created
            before = used_memory(client)
            jobs = schedule_many(noop, [(payload,)] * n, delay=3600)
            values.append((used_memory(client) - before) / n)
            records = client.hmget(store.key(QUEUE, "jobs"), [j.id for j in jobs[:1]])
            # baseline: the same ids and records, written with raw ZADD + HSET
            before = used_memory(client)
            due = time.time() + 3600
            for start in range(0, n, 10_000):
                ids = [j.id for j in jobs[start : start + 10_000]]
                client.pipeline(transaction=False).zadd(
                    "raw:pending", dict.fromkeys(ids, due)
                ).hset("raw:jobs", mapping=dict.fromkeys(ids, records[0])).execute()
            baselines.append((used_memory(client) - before) / n)
    client.flushdb()
    return figure(
        "memory_per_job",
        f"Redis memory per pending job ({n:,} jobs, 20-byte payload)",
        values,
        baselines,
        "bytes",
        "<= 250 bytes/job",
        lambda v, r: v <= 250,
        note=f"INFO used_memory delta on a dedicated redis-server; record {len(records[0])} "
        "bytes; raw: same ids and records via ZADD + HSET",
    )


def fill_queue(client: Any, store: Any, queue: str, due_now: int, later: int) -> None:
    """Raw-fill a queue: ``due_now`` jobs due a minute ago, ``later`` due in an hour."""
    from benchmarks.tasks import noop
    from django_delayq.job import encode_record

    pending, jobs = store.key(queue, "pending"), store.key(queue, "jobs")
    record = encode_record(noop.name, [0], {})
    now = time.time()
    total = due_now + later
    for start in range(0, total, 20_000):
        numbers = range(start, min(total, start + 20_000))
        ids = [f"01{i:024d}" for i in numbers]
        scores = {f"01{i:024d}": (now - 60 if i < due_now else now + 3600) for i in numbers}
        client.pipeline(transaction=False).zadd(pending, scores).hset(
            jobs, mapping=dict.fromkeys(ids, record)
        ).execute()


def refill_due(client: Any, store: Any, queue: str, count: int) -> None:
    from benchmarks.tasks import noop
    from django_delayq.job import encode_record

    record = encode_record(noop.name, [0], {})
    ids = [f"02{time.monotonic_ns() % 10**12:012d}{i:012d}" for i in range(count)]
    client.pipeline(transaction=False).zadd(
        store.key(queue, "pending"), dict.fromkeys(ids, time.time() - 60)
    ).hset(store.key(queue, "jobs"), mapping=dict.fromkeys(ids, record)).execute()


def claim_ack_cycle(store: Any, queue: str, cycles: int) -> float:
    """Seconds per round trip of the worker's exchange: ack the previous job and claim
    the next one, pipelined (what a concurrency-1 worker does per job)."""
    previous: list[tuple[str, str, None]] = []
    with Timer() as t:
        for i in range(cycles):
            ops = [store.ack_op(queue, previous)] if previous else []
            ops.append(store.claim_op(queue, 1, lease=60, token=f"t{i}", worker="bench"))
            claim = store.run(ops)[-1]
            previous = [(claim.jobs[0].id, f"t{i}", None)]
        store.run([store.ack_op(queue, previous)])
    return t.seconds / cycles


def bench_claim_cost(client: Any, size: dict, runs: int) -> dict[str, Any]:
    """Two queues in one server, one with ``claim_small`` pending jobs, one with
    ``claim_big``; rounds of claim+ack alternate between them (drift hits both)."""
    small, big, cycles = size["claim_small"], size["claim_big"], size["claim_cycles"]
    results: dict[str, list[float]] = {"small": [], "big": []}
    client.flushdb()
    with store_on(client, "delayq") as store:
        fill_queue(client, store, "small", due_now=small, later=0)
        fill_queue(client, store, "big", due_now=small, later=big - small)
        for _ in range(runs * 3):
            for queue in ("small", "big"):
                results[queue].append(claim_ack_cycle(store, queue, cycles) * 1e6)
                refill_due(client, store, queue, cycles)
    client.flushdb()
    return figure(
        "claim_cost_ratio",
        f"claim+ack round trip, {big:,} vs {small:,} pending",
        results["big"],
        results["small"],
        "us",
        "ratio <= 1.5",
        lambda v, r: r <= 1.5,
        ratio_kind=f"{big:,} / {small:,} pending",
        note=f"{small:,} due, the rest due in 1 h; ack + claim(1) pipelined, "
        f"rounds of {cycles} alternating between the two queues",
    )


# -- report ----------------------------------------------------------------------------


def fmt_value(value: Any, unit: str) -> str:
    if value is None or value != value:
        return "-"
    if unit == "jobs/s":
        return f"{value:,.0f} jobs/s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "us":
        return f"{value:.0f} us"
    if unit == "bytes":
        return f"{value:.0f} B"
    return f"{value:.3g}"


def table(figures: list[dict]) -> str:
    header = ("figure", "value", "baseline", "ratio", "target", "met")
    rows = [header]
    for f in figures:
        rows.append(
            (
                f["label"],
                fmt_value(f["value"], f["unit"]),
                fmt_value(f["baseline"], f["unit"]),
                "-" if f["ratio"] is None else f"{f['ratio']:.2f}",
                f["target"],
                "yes" if f["met"] else "NO",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    line = "  ".join("=" * w for w in widths)
    out = [line, "  ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows[1:]]
    out.append(line)
    return "\n".join(out)


def environment(redis_client: Any) -> dict[str, Any]:
    import django
    import redis

    info = redis_client.info("server")
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "redis_py": redis.__version__,
        "redis_server": info.get("redis_version"),
        "platform": platform.platform(),
    }


ALL = ("schedule_one", "schedule_many", "drain", "lateness", "memory", "claim_cost")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each")
    parser.add_argument("--runs", type=int, default=None, help="runs per fast figure")
    parser.add_argument("--only", default=",".join(ALL), help=f"comma-separated: {','.join(ALL)}")
    parser.add_argument("--prefix", default="delayq-bench", help="key prefix (deleted first)")
    parser.add_argument("--redis-server", default=None, help="redis-server binary for memory/scale")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "latest.json"))
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(only) - set(ALL)
    if unknown:
        parser.error(f"unknown figure group {sorted(unknown)[0]!r}: choose from {', '.join(ALL)}")

    setup_django(args.prefix)
    size = SIZES["quick" if args.quick else "full"]
    runs = args.runs or size["runs"]
    slow = args.runs or size["slow_runs"]
    store = bench_store()
    store.client.ping()
    cleanup(store.client, args.prefix)
    figures: list[dict] = []
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))

    def progress(name: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {name}...", file=sys.stderr, flush=True)

    try:
        if "schedule_one" in only:
            progress("schedule_one")
            figures.append(bench_schedule_one(store, args.prefix, size["schedule"], runs))
        if "schedule_many" in only:
            progress("schedule_many")
            figures.append(bench_schedule_many(store, args.prefix, size["schedule"], runs))
        if "drain" in only:
            progress("drain")
            figures += bench_drain(store, args.prefix, size["drain"], slow, workdir)
        if "lateness" in only:
            progress("lateness")
            figures += bench_lateness(store, args.prefix, size, slow, workdir)
        if "memory" in only or "claim_cost" in only:
            with dedicated_redis(args.redis_server) as own:
                if own is None:
                    print(
                        "no redis-server found: memory and claim cost not measured", file=sys.stderr
                    )
                else:
                    if "memory" in only:
                        progress("memory")
                        figures.append(bench_memory(own, size["memory"], slow))
                    if "claim_cost" in only:
                        progress("claim_cost")
                        figures.append(bench_claim_cost(own, size, slow))
    finally:
        cleanup(store.client, args.prefix)
        shutil.rmtree(workdir, ignore_errors=True)

    env = environment(store.client)
    env["seconds"] = round(time.monotonic() - started, 1)
    print(table(figures))
    print(
        f"{env['date']}, {env['cpus']} cores, Python {env['python']}, Django {env['django']}, "
        f"Redis {env['redis_server']}, {env['seconds']} s{' (--quick)' if args.quick else ''}"
    )
    result = {
        "environment": env,
        "command": " ".join(
            ["python benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "quick": args.quick,
        "figures": figures,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
