"""Lateness figures: how long after its due time a job's task function starts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import Workers, cleanup, figure, median, percentile, store_on

# How the started-at times of the tasks are collected: f(count, workers, timeout).
Collect = Callable[[int, Workers, float], dict[int, float]]


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


def file_stamps(workdir: Path) -> Collect:
    """Start times written by the ``stamp`` task to files in ``workdir``."""
    return lambda count, workers, timeout: wait_stamps(workdir, count, workers, timeout)


def pushed_stamps(client: Any) -> Collect:
    """Start times pushed by the ``redis_push`` task to its list in ``client``."""
    from benchmarks.tasks import pushed_key

    def collect(count: int, workers: Workers, timeout: float) -> dict[int, float]:
        key = pushed_key()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and client.llen(key) < count:
            workers.check_alive()
            time.sleep(0.05)
        return parse_pushed(client.lrange(key, 0, -1))

    return collect


def parse_pushed(values: list[bytes]) -> dict[int, float]:
    stamps: dict[int, float] = {}
    for value in values:
        n, started = value.split()
        stamps[int(n)] = float(started)
    return stamps


def lateness_idle(
    store: Any,
    jobs: int,
    seconds: float,
    workdir: Path,
    task: Any = None,
    collect: Collect | None = None,
    env: dict[str, str] | None = None,
) -> list[float]:
    """``jobs`` jobs of ``task`` (default ``stamp``), one every ``seconds / jobs``, each
    due 100 ms after it is scheduled, for one idle worker: start minus due, in seconds."""
    from benchmarks.tasks import stamp

    task = task or stamp
    collect = collect or file_stamps(workdir)
    workers = Workers(1, workdir, env=env)
    due: dict[int, float] = {}
    try:
        workers.wait_started()
        spacing = seconds / jobs
        start = time.monotonic()
        for i in range(jobs):
            pause = start + i * spacing - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            due[i] = task.schedule(i, delay=0.1).due_at.timestamp()
        stamps = collect(jobs, workers, 10)
    finally:
        workers.stop()
    assert len(stamps) == jobs, f"{len(stamps)} of {jobs} jobs ran: {workers.tail()}"
    return [stamps[i] - due[i] for i in range(jobs)]


def lateness_load(
    store: Any,
    rate: int,
    seconds: float,
    workdir: Path,
    task: Any = None,
    collect: Collect | None = None,
    env: dict[str, str] | None = None,
) -> list[float]:
    """``rate`` jobs/s of ``task`` (default ``stamp``) due for ``seconds``, scheduled
    ahead with schedule_many, two workers: start minus due, in seconds."""
    from benchmarks.tasks import stamp
    from django_delayq import schedule_many

    task = task or stamp
    collect = collect or file_stamps(workdir)
    workers = Workers(2, workdir, env=env)
    total = int(rate * seconds)
    try:
        workers.wait_started()
        # After scheduling them all, with room for a busy machine (this was 1 s +
        # total / 40,000, which a loaded 2-core machine overran).
        t0 = time.time() + 2.0 + total / 5_000
        calls = [
            {"args": [i], "at": datetime.fromtimestamp(t0 + i / rate, tz=UTC)} for i in range(total)
        ]
        due = {i: job.due_at.timestamp() for i, job in enumerate(schedule_many(task, calls))}
        assert time.time() < t0, "scheduling took longer than planned"
        stamps = collect(total, workers, seconds + 30)
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


def bench_lateness_push(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    """The lateness figures again with task 1 (``redis_push``: one RPUSH on its own
    client) instead of ``stamp``, on the dedicated redis-server ``own``."""
    from benchmarks.tasks import redis_push

    idle99, load99, floor99, idle50, load50 = [], [], [], [], []
    collect = pushed_stamps(own)
    for _ in range(runs):
        with store_on(own, prefix) as store:
            own.flushdb()
            late = lateness_idle(
                store, size["idle_jobs"], size["idle_seconds"], workdir, redis_push, collect, env
            )
            idle50.append(percentile(late, 50) * 1000)
            idle99.append(percentile(late, 99) * 1000)
            floor = os_floor(max(size["idle_jobs"] // 2, 10), 0.01)
            floor99.append(percentile(floor, 99) * 1000)
            own.flushdb()
            late = lateness_load(
                store, size["load_rate"], size["load_seconds"], workdir, redis_push, collect, env
            )
            load50.append(percentile(late, 50) * 1000)
            load99.append(percentile(late, 99) * 1000)
    own.flushdb()
    what = f"{size['idle_jobs']} jobs over {size['idle_seconds']:g} s, 1 idle worker"
    load = f"{size['load_rate']:,} jobs/s due for {size['load_seconds']:g} s, 2 workers"
    note = (
        "task 1 (redis_push); start of the task minus due_at; baseline: Event.wait() "
        "overshoot; dedicated redis-server; p50 {:.2f} ms"
    )
    return [
        figure(
            "lateness_push_idle_p99",
            f"lateness p99, task 1 ({what})",
            idle99,
            floor99,
            "ms",
            "<= 5 ms",
            lambda v, r: v <= 5.0,
            note=note.format(median(idle50)),
        ),
        figure(
            "lateness_push_load_p99",
            f"lateness p99 under load of task 1 ({load})",
            load99,
            floor99,
            "ms",
            "<= 20 ms",
            lambda v, r: v <= 20.0,
            note=note.format(median(load50)),
        ),
    ]
