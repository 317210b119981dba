"""The driver of bench/recurring_scale.py: one variant in a process of its own, Django on
that variant's database (``python -m benchmarks.bench.recurring_driver VARIANT N MINUTES``).
It starts the worker (``delayq_worker --processes 2 --concurrency 4``), creates the
schedules, waits for the minute boundaries, reads the probe files and prints what it saw as
JSON (the last line of its output). See recurring_scale.py for what is measured."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import Workers, bench_store, nan, percentile, proc_cpu_seconds
from .processes import wait_children
from .recurring import _redis_cpu

PROBE = "benchmarks.tasks.occurrence_probe"
LEAD_S = 10.0  # M1 is the first minute boundary at least this long after T0
SAMPLE_S = 5.0  # the CPU window opens this long before M1
DRAIN_S = 40.0  # the most the drain of the last boundary is waited for
GRACE_S = 2.0  # runs are still read this long after the window (a late duplicate)
IDLE_S = 20.0  # the idle worker's own CPU is measured this long, before any schedule exists
CHILD = re.compile(rb"child (\d+) started, pid (\d+)")


class Probe:
    """The lines ``occurrence_probe`` wrote so far, read incrementally from the files."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.offsets = folder, {}
        self.runs: list[tuple[int, float, str]] = []
        self.fired: Counter[int] = Counter()

    def poll(self) -> None:
        for path in sorted(self.folder.glob("*.txt")):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
            self.offsets[path] = self.offsets.get(path, 0) + len(whole)
            for line in whole.decode().splitlines():
                fire, start, job_id = line.split()
                self.runs.append((int(fire), float(start), job_id))
                self.fired[int(fire)] += 1


def boundary_ms(after: float) -> int:
    """The first minute boundary at or after ``after`` (epoch seconds), in ms."""
    return -(-int(after * 1000) // 60_000) * 60_000


def wait_until(when: float, workers: Workers, probe: Probe, done: Any = None) -> None:
    while time.time() < when:
        workers.check_alive()
        probe.poll()
        if done is not None and done():
            return
        time.sleep(min(0.2, max(0.0, when - time.time())))


def process_tree(workers: Workers) -> list[int]:
    """The supervisor's pid and its children's (the newest of each slot), from its log."""
    slots = dict(CHILD.findall(workers.logs[0].read_bytes()))
    return [workers.procs[0].pid, *sorted(int(pid) for pid in slots.values())]


class Window:
    """Worker (every process of the tree) and Redis CPU seconds from now to close()."""

    def __init__(self, client: Any, workers: Workers) -> None:
        self.client, self.workers = client, workers
        self.pids = process_tree(workers)
        self.cpu = sum(proc_cpu_seconds(pid) for pid in self.pids)
        self.redis = _redis_cpu(client)
        self.start_ms = time.time() * 1000

    def seconds(self) -> tuple[float, float, float]:
        """(seconds since the window opened, worker CPU, Redis CPU seconds since)."""
        cpu = sum(proc_cpu_seconds(pid) for pid in self.pids) - self.cpu
        if process_tree(self.workers) != self.pids:
            raise RuntimeError("a worker process restarted in the window: " + self.workers.tail())
        return time.time() - self.start_ms / 1000, cpu, _redis_cpu(self.client) - self.redis

    def close(
        self, probe: Probe, occurrences: bool, idle: dict[str, float] | None = None
    ) -> dict[str, float]:
        """CPU per run of the window: as measured, and less what the idle worker (and
        the idle Redis server) spends in as many seconds (``idle``: their CPU per second)."""
        seconds, cpu, redis = self.seconds()
        end_ms = self.start_ms + seconds * 1000
        probe.poll()
        ran = sum(
            1
            for fire, start, _ in probe.runs
            if bool(fire) == occurrences and self.start_ms <= start <= end_ms
        )
        count = max(ran, 1)
        idle = idle or {"worker": 0.0, "redis": 0.0}
        return {
            "runs": ran,
            "seconds": seconds,
            "worker_us": cpu / count * 1e6,
            "redis_us": redis / count * 1e6,
            "worker_net_us": (cpu - idle["worker"] * seconds) / count * 1e6,
            "redis_net_us": (redis - idle["redis"] * seconds) / count * 1e6,
        }


def idle_phase(store: Any, workers: Workers, probe: Probe) -> dict[str, float]:
    """The worker's and the Redis server's CPU per second with nothing to do and no
    schedule (heartbeats, the relay's and the passes' looks, Redis's own timers): what a
    window pays for its seconds whatever runs in it."""
    window = Window(store.client, workers)
    wait_until(time.time() + IDLE_S, workers, probe)
    seconds, cpu, redis = window.seconds()
    return {"worker": cpu / seconds, "redis": redis / seconds, "seconds": seconds}


def per_minute(runs: list[tuple[int, float, str]], fire_ms: int) -> dict[str, Any]:
    from django_delayq.recurring.ids import parse_occurrence_id

    first: dict[int, float] = {}
    twice: set[int] = set()
    early = 0
    for fire, start, job_id in runs:
        if fire != fire_ms:
            continue
        parsed = parse_occurrence_id(job_id)
        schedule = parsed[1] if parsed else hash(job_id)
        early += start < fire
        if schedule in first:
            twice.add(schedule)
        first[schedule] = min(start, first.get(schedule, start))
    late = [start - fire_ms for start in first.values()]
    when = datetime.fromtimestamp(fire_ms / 1000, UTC).strftime("%H:%M")
    return {
        "minute": when,
        "fired": len(first),
        "early": early,
        "twice": len(twice),
        "p50": percentile(late, 50),
        "p99": percentile(late, 99),
        "max": max(late, default=nan()),
    }


def start_workers(store: Any, workdir: Path) -> tuple[Workers, Probe]:
    folder = Path(tempfile.mkdtemp(prefix="probe-", dir=workdir))
    workers = Workers(
        1, workdir, "--processes", "2", concurrency=4, env={"DELAYQ_BENCH_STAMPS": str(folder)}
    )
    wait_children(store, workers, 2)
    return workers, Probe(folder)


def plain_phase(
    store: Any, workers: Workers, probe: Probe, n: int, idle: dict[str, float]
) -> dict[str, Any]:
    """N plain probe jobs due together a few seconds ahead: CPU per job and lateness."""
    from benchmarks.tasks import occurrence_probe
    from django_delayq import schedule_many

    due = time.time() + 3 + n / 10_000
    at = datetime.fromtimestamp(due, UTC)
    # A plain job's Redis CPU counts its scheduling too (schedule_many, here), as an
    # occurrence's counts occur.lua, which stores it.
    before = _redis_cpu(store.client)
    schedule_many(occurrence_probe, [(i,) for i in range(n)], at=at)
    scheduling = _redis_cpu(store.client) - before
    wait_until(due - 0.3, workers, probe)
    window = Window(store.client, workers)
    wait_until(due + DRAIN_S + n / 500, workers, probe, done=lambda: probe.fired[0] >= n)
    cost = window.close(probe, occurrences=False, idle=idle)
    cost["redis_us"] += scheduling / n * 1e6
    cost["redis_net_us"] += scheduling / n * 1e6
    late = [start - due * 1000 for fire, start, _ in probe.runs if fire == 0]
    return {
        **cost,
        "p50": percentile(late, 50),
        "p99": percentile(late, 99),
        "max": max(late, default=nan()),
    }


def minutes_phase(
    store: Any,
    workers: Workers,
    probe: Probe,
    n: int,
    first_ms: int,
    minutes: int,
    drain: float,
    idle: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Run through ``minutes`` boundaries from ``first_ms`` and the drain of the last."""
    marks = [first_ms + 60_000 * i for i in range(minutes)]
    wait_until(first_ms / 1000 - SAMPLE_S, workers, probe)
    window = Window(store.client, workers)
    last = marks[-1]
    wait_until(last / 1000 + drain, workers, probe, done=lambda: probe.fired[last] >= n)
    cost = window.close(probe, occurrences=True, idle=idle)
    wait_until(time.time() + GRACE_S, workers, probe)
    before = [start for fire, start, _ in probe.runs if 0 < fire < first_ms]
    return {
        "minutes": [per_minute(probe.runs, mark) for mark in marks],
        "cost": cost,
        "runs_before_m1": len(before),  # occurrences of earlier boundaries (T0's minute)
        "backlog_at_m1": sum(1 for start in before if start >= first_ms),  # still running
    }


def db_variant(n: int, minutes: int, workdir: Path) -> dict[str, Any]:
    from django_delayq.models import Schedule

    store = bench_store()
    workers, probe = start_workers(store, workdir)
    try:
        idle = idle_phase(store, workers, probe)
        plain = plain_phase(store, workers, probe, n, idle)
        Schedule.objects.bulk_create(
            Schedule(name=f"db{i}", task=PROBE, cron="* * * * *") for i in range(n)
        )
        t0 = time.time()
        first = boundary_ms(t0 + LEAD_S)
        got = minutes_phase(store, workers, probe, n, first, minutes, DRAIN_S, idle)
    finally:
        workers.stop()
    return {**got, "plain": plain, "idle": idle}


def settings_variant(n: int, minutes: int, workdir: Path) -> dict[str, Any]:
    store = bench_store()
    workers, probe = start_workers(store, workdir)
    try:
        first = boundary_ms(time.time() + LEAD_S)
        return minutes_phase(store, workers, probe, n, first, minutes, DRAIN_S)
    finally:
        workers.stop()


def timed_pass(reconciler: Any) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    redis = _redis_cpu(reconciler.store.client)
    started = time.perf_counter()
    result = reconciler.run_pass()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": seconds,
        "cpu": after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime,
        "redis_cpu": _redis_cpu(reconciler.store.client) - redis,
        "created": result.created,
        "errors": len(result.errors),
    }


def big_variant(n: int, minutes: int, workdir: Path) -> dict[str, Any]:
    from django.db import connection

    from django_delayq.models import Schedule
    from django_delayq.recurring.reconcile import Reconciler

    store = bench_store()
    if time.time() % 60 > 15:  # start early in a minute: the passes end before its boundary
        time.sleep(boundary_ms(time.time()) / 1000 + 0.5 - time.time())
    Schedule.objects.bulk_create(
        (Schedule(name=f"big{i}", task=PROBE, cron="* * * * *") for i in range(n)),
        batch_size=5000,
    )
    memory = store.client.info("memory")["used_memory"]
    reconciler = Reconciler(store)
    first = timed_pass(reconciler)
    memory = store.client.info("memory")["used_memory"] - memory
    steady = timed_pass(reconciler)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_total_relation_size('django_delayq_schedule'),"
            " pg_total_relation_size('django_delayq_schedule_state')"
        )
        tables = cursor.fetchone()
    connection.close()  # no session of ours left open while the worker runs
    workers, probe = start_workers(store, workdir)
    try:
        first_ms = boundary_ms(time.time() + SAMPLE_S)
        got = minutes_phase(store, workers, probe, n, first_ms, minutes, DRAIN_S + n / 1000)
    finally:
        workers.stop()
    sizes = {"redis_bytes": memory / n, "schedule_bytes": tables[0] / n}
    sizes["state_bytes"] = tables[1] / n
    return {**got, **sizes, "first_pass": first, "steady_pass": steady}


def main() -> None:
    variant, n, minutes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # stop workers
    import django

    django.setup()
    run = {"db": db_variant, "settings": settings_variant, "big": big_variant}[variant]
    print(json.dumps(run(n, minutes, Path(os.environ["DELAYQ_BENCH_STAMPS"]))))


if __name__ == "__main__":
    main()
