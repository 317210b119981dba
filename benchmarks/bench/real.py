"""Real-task workloads (issue 11), each on the dedicated redis-server ``own``:

- ``push``: drain of task 1 (``redis_push``: one RPUSH on its own client), one process
  at concurrency 1: jobs/s, worker CPU per 1,000 jobs, and Redis's CPU per job from
  ``INFO commandstats`` for the schedule phase (``schedule()`` one call per job) and
  the drain phase (claim + ack + whatever else the worker sends), reset between;
- ``orm``: drain of task 2 (``orm_query``) against a throw-away PostgreSQL database,
  vs a plain loop doing the same query in the same interpreter;
- ``sleep``: drain of task 3 (``sleep_io``, 10 ms) at concurrency 8, vs the ideal 800/s;
- ``idle``: CPU of a worker with nothing to do.

Drains run a worker as production does, without ``--burst`` (it is stopped with SIGTERM
once the last job is acknowledged): a burst worker has no waker thread, and drains
task 1 several times faster than a normal one today (``push_drain_burst``).

Worker CPU per job: the worker process's user + system CPU time (every thread), read
from ``/proc/<pid>/stat`` (the kernel's accounting that ``os.wait4``'s rusage reports at
exit) when it logged "started" (before its first claim) and when the last job was done
(before it exits); the difference, divided by the jobs drained, leaves out start-up
(imports, Django: ~0.3 s) and interpreter exit (~0.1 s), which are not per-job costs.
The rusage from ``os.wait4`` is kept beside it (JSON) as a cross-check.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import pg, rediscpu
from .common import (
    QUEUE,
    ROOT,
    Timer,
    Workers,
    figure,
    median,
    proc_cpu_seconds,
    store_on,
    url_of,
    worker_env,
)
from .engine import raw_drain, timed_drain
from .latency import parse_pushed

SLEEP_IDEAL = 800.0  # jobs/s of 10 ms tasks on 8 threads


@contextlib.contextmanager
def redis_env(client: Any, prefix: str) -> Iterator[dict[str, str]]:
    """Point ``$REDIS_URL`` (read by the worker processes' settings and by
    ``redis_push``'s own client, here too) at ``client`` while inside."""
    from benchmarks import tasks

    previous = os.environ.get("REDIS_URL")
    os.environ["REDIS_URL"] = url_of(client)
    tasks._push_client = None
    try:
        yield {"REDIS_URL": url_of(client), "DELAYQ_BENCH_PREFIX": prefix}
    finally:
        if previous is None:
            os.environ.pop("REDIS_URL", None)
        else:
            os.environ["REDIS_URL"] = previous
        tasks._push_client = None


def per_thousand(workers: Workers, n: int) -> float:
    return workers.work_cpu_seconds() / n * 1000


def cpu_note(startup: list[float], totals: list[float]) -> str:
    return (
        f'/proc CPU from "started" to the last job done (CPU at start-up: median '
        f"{median(startup):.2f} s; whole process by wait4 rusage: {median(totals):.2f} s)"
    )


# -- task 1: one Redis round trip ------------------------------------------------------


def push_run(
    own: Any, prefix: str, n: int, workdir: Path, env: dict[str, str], logged: bool
) -> dict[str, Any]:
    """Schedule n ``redis_push`` jobs one call each, then drain them with one worker
    (not --burst), stopped once the last job is acknowledged; commandstats reset before
    each phase. Throughput comes from the start times the task pushes; the only other
    commands during the drain are the benchmark's LLEN / ZCARD every 3 ms (to see when
    the last job is done), which are not counted."""
    from benchmarks.tasks import pushed_key, redis_push

    own.flushdb()
    if logged:
        rediscpu.start_logging(own)
    try:
        with store_on(own, prefix) as store:
            redis_push.schedule(-1, queue="warmup", delay=3600)  # connect, load scripts
            names = rediscpu.script_names(store)
            before = rediscpu.reset(own)
            with Timer() as t_schedule:
                for i in range(n):
                    redis_push.schedule(i)
            schedule = rediscpu.read_phase(own, before, names, logged)
            before = rediscpu.reset(own)
            workers = Workers(1, workdir, env=env)
            try:
                workers.wait_sampled()
                deadline = time.monotonic() + 60 + n / 50
                running = store.key(QUEUE, "running")
                while time.monotonic() < deadline and (
                    own.llen(pushed_key()) < n or own.zcard(running)
                ):
                    workers.check_alive()
                    time.sleep(0.003)
                workers.sample_end()
                drain = rediscpu.read_phase(own, before, names, logged)
            finally:
                workers.stop()
            workers.check_alive()
            left = own.zcard(store.key(QUEUE, "pending")) + own.zcard(store.key(QUEUE, "dead"))
    finally:
        if logged:
            rediscpu.stop_logging(own)
    stamps = parse_pushed(own.lrange(pushed_key(), 0, -1))
    assert len(stamps) == n and left == 0, f"{len(stamps)} of {n} ran, {left} left: " + (
        workers.tail()
    )
    return {
        "rate": stamps_rate(stamps),
        "cpu": per_thousand(workers, n),
        "startup_cpu": workers.start_cpu[0],
        "total_cpu": workers.cpu_seconds()[0],
        "schedule_rate": n / t_schedule.seconds,
        "phases": {"schedule": schedule, "drain": drain},
    }


def stamps_rate(stamps: dict[int, float]) -> float:
    """Jobs/s from the first task start to the last."""
    return (len(stamps) - 1) / (max(stamps.values()) - min(stamps.values()))


def push_burst_rate(own: Any, prefix: str, n: int, workdir: Path, env: dict[str, str]) -> float:
    """The drain of task 1 by a ``--burst`` worker, as drain_1 runs (for comparison)."""
    from benchmarks.tasks import pushed_key, redis_push
    from django_delayq import schedule_many

    own.flushdb()
    with store_on(own, prefix):
        schedule_many(redis_push, [(i,) for i in range(n)])
        workers = Workers(1, workdir, "--burst", env=env)
        try:
            workers.wait(timeout=60 + n / 50)
        finally:
            workers.stop()
    stamps = parse_pushed(own.lrange(pushed_key(), 0, -1))
    assert len(stamps) == n, f"{len(stamps)} of {n} ran: {workers.tail()}"
    return stamps_rate(stamps)


def bench_push(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> tuple[list[dict], dict[str, Any]]:
    from benchmarks.tasks import redis_push

    n = size["push"]
    own.flushdb()
    startup: list[float] = []
    totals: list[float] = []
    rates, raws, cpus, raw_cpus, redis_us, process_us, zadd_us = [], [], [], [], [], [], []
    bursts: list[float] = []
    for _ in range(runs):
        own.flushdb()
        cpu = time.process_time()
        raws.append(raw_drain(own, prefix, n, redis_push))
        raw_cpus.append((time.process_time() - cpu) / n * 1000)
        result = push_run(own, prefix, n, workdir, env, logged=False)
        rates.append(result["rate"])
        cpus.append(result["cpu"])
        startup.append(result["startup_cpu"])
        totals.append(result["total_cpu"])
        phases = result["phases"].values()
        redis_us.append(sum(rediscpu.per_job_usec(p, n) for p in phases))
        process_us.append(sum(p["process_cpu_s"] for p in phases) * 1e6 / n)
        bursts.append(push_burst_rate(own, prefix, n, workdir, env))
        zadd_us.append(rediscpu.zadd_usec_per_call(own, f"{prefix}:zadd", min(n, 5000)))
    # One more run with every command logged, for the attribution (not in the medians).
    attribution = push_run(own, prefix, n, workdir, env, logged=True)
    own.flushdb()
    details = {
        "n": n,
        "startup_cpu_s": startup,
        "attribution": attribution["phases"],
        "attribution_per_job_usec": sum(
            rediscpu.per_job_usec(p, n) for p in attribution["phases"].values()
        ),
        "attribution_other_per_job_usec": sum(
            rediscpu.other_usec_per_job(p, n) for p in attribution["phases"].values()
        ),
        "redis_process_cpu_usec_per_job": process_us,
        "schedule_rate": result["schedule_rate"],
    }
    dedicated = "dedicated redis-server"
    # The start marks (ZADD), the queue registration (SADD) and the waker's BLPOP are part
    # of a job's life too: commandstats cannot tell them from the same commands inside the
    # scripts, so the logged run's per-job figure for them is added to every run's scripts.
    other = details["attribution_other_per_job_usec"]
    redis_all = [scripts + other for scripts in redis_us]
    return [
        figure(
            "push_drain",
            f"drain jobs/s, task 1 (one RPUSH), 1 worker, concurrency 1 ({n:,} due)",
            rates,
            raws,
            "jobs/s",
            ">= 5,000 jobs/s",
            lambda v, r: v >= 5000,
            note=f"a worker without --burst, stopped when done; first to last task start "
            f"(the task pushes its start time); raw: one "
            f"EVALSHA take + the task's RPUSH per job, in process; {dedicated}",
        ),
        figure(
            "push_drain_burst",
            "the same drain by a --burst worker (as drain_1 runs)",
            bursts,
            rates,
            "jobs/s",
            "-",
            None,
            ratio_kind="burst / normal worker",
            note="baseline: push_drain (a worker without --burst) of the same run",
        ),
        figure(
            "push_cpu",
            "worker CPU s per 1,000 jobs, task 1",
            cpus,
            raw_cpus,
            "cpu_s",
            "-",
            None,
            note=f"{cpu_note(startup, totals)}; baseline: the raw loop's CPU (it fills its "
            "queue too)",
        ),
        figure(
            "redis_cpu_per_job",
            "Redis CPU per job, schedule + claim + start + ack (commandstats)",
            redis_all,
            zadd_us,
            "us",
            "<= 20 us",
            lambda v, r: v <= 20.0,
            ratio_kind="per job / one ZADD",
            note=f"script calls (EVALSHA) of the schedule phase + the drain phase (reset "
            f"between), per job, {median(redis_us):.1f} us, plus delayq's other commands "
            f"(start marks, SADD, BLPOP: {other:.1f} us/job, from a run with every command "
            f"in the slow log); baseline: usec per call of a plain ZADD; redis-server "
            f"process CPU {median(process_us):.1f} us/job; {dedicated}",
        ),
    ], details


# -- task 2: one PostgreSQL query ----------------------------------------------------------


def bench_orm(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    from benchmarks.tasks import orm_query

    n = size["orm"]
    rates, loops, cpus, loop_cpus = [], [], [], []
    with pg.postgres_database() as name:
        env = {**env, "DELAYQ_BENCH_PG_DB": name, "DELAYQ_BENCH_CONN_MAX_AGE": "600"}
        pg.migrate(ROOT, worker_env(workdir, env))
        startup: list[float] = []
        totals: list[float] = []
        for _ in range(runs):
            loop = pg.baseline(ROOT, worker_env(workdir, env), n)
            loops.append(n / loop["seconds"])
            loop_cpus.append(loop["cpu"] / n * 1000)
            own.flushdb()
            with store_on(own, prefix) as store:
                rate, workers = timed_drain(store, orm_query, n, 1, workdir, env=env, burst=False)
            rates.append(rate)
            cpus.append(per_thousand(workers, n))
            startup.append(workers.start_cpu[0] or 0.0)
            totals.append(workers.cpu_seconds()[0])
    own.flushdb()
    note = "PostgreSQL 127.0.0.1:5432, CONN_MAX_AGE=600 (persistent connections, no health checks)"
    return [
        figure(
            "orm_drain",
            f"drain jobs/s, task 2 (one ORM query), 1 worker, concurrency 1 ({n:,})",
            rates,
            loops,
            "jobs/s",
            ">= 80% of the same queries in a loop",
            lambda v, r: r >= 0.80,
            note=f"{note}; baseline: a plain loop of the same query, same interpreter "
            "and settings, in a fresh process",
        ),
        figure(
            "orm_cpu",
            "worker CPU s per 1,000 jobs, task 2",
            cpus,
            loop_cpus,
            "cpu_s",
            "-",
            None,
            note=f"{cpu_note(startup, totals)}; baseline: the loop's own CPU",
        ),
    ]


def drain_runs(
    own: Any,
    prefix: str,
    task: Any,
    n: int,
    runs: int,
    workdir: Path,
    env: dict[str, str],
    *,
    concurrency: int,
    extra: tuple[str, ...] = (),
) -> tuple[list[float], list[float], str]:
    """``runs`` drains of ``n`` jobs of ``task`` by one worker process (not burst): the
    rates, the worker CPU s per 1,000 jobs, and the note on start-up CPU."""
    rates: list[float] = []
    cpus: list[float] = []
    startup: list[float] = []
    totals: list[float] = []
    for _ in range(runs):
        own.flushdb()
        with store_on(own, prefix) as store:
            rate, workers = timed_drain(
                store,
                task,
                n,
                1,
                workdir,
                concurrency=concurrency,
                env=env,
                burst=False,
                extra=extra,
            )
        rates.append(rate)
        cpus.append(per_thousand(workers, n))
        startup.append(workers.start_cpu[0] or 0.0)
        totals.append(workers.cpu_seconds()[0])
    own.flushdb()
    return rates, cpus, cpu_note(startup, totals)


# -- task 3: 10 ms of I/O at concurrency 8 ---------------------------------------------------


def bench_sleep(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    from benchmarks.tasks import sleep_io

    n = size["sleep"]
    rates, cpus, note = drain_runs(own, prefix, sleep_io, n, runs, workdir, env, concurrency=8)
    return [
        figure(
            "sleep_drain",
            f"drain jobs/s, task 3 (sleep 10 ms), 1 worker, concurrency 8 ({n:,})",
            rates,
            [SLEEP_IDEAL] * len(rates),
            "jobs/s",
            ">= 90% of 800 jobs/s",
            lambda v, r: r >= 0.90,
            ratio_kind="of the ideal",
            note="baseline: the ideal, 8 threads x 100 jobs/s",
        ),
        figure(
            "sleep_cpu",
            "worker CPU s per 1,000 jobs, task 3, concurrency 8",
            cpus,
            [],
            "cpu_s",
            "<= 0.3 CPU s per 1,000 jobs",
            lambda v, r: v <= 0.3,
            note=note,
        ),
    ]


# -- idle -----------------------------------------------------------------------------------


def bench_idle(own: Any, size: dict, workdir: Path, env: dict[str, str]) -> list[dict]:
    """A worker (concurrency 1, not burst) with an empty queue: its CPU over
    ``idle_worker_seconds``, read from /proc/<pid>/stat 1 s after it logged "started"
    and again at the end (start-up excluded by construction), scaled to 30 s."""
    seconds = size["idle_worker_seconds"]
    values, totals = [], []
    for _ in range(size["idle_worker_runs"]):
        own.flushdb()
        workers = Workers(1, workdir, env=env)
        try:
            workers.wait_started()
            time.sleep(1.0)
            pid = workers.procs[0].pid
            before = proc_cpu_seconds(pid)
            time.sleep(seconds)
            used = proc_cpu_seconds(pid) - before
            workers.check_alive()
        finally:
            workers.stop()
        values.append(used * 30 / seconds)
        totals += workers.cpu_seconds()
    return [
        figure(
            "idle_cpu",
            f"idle worker CPU s per 30 s (measured over {seconds:g} s)",
            values,
            [],
            "cpu_s",
            "<= 0.1 CPU s per 30 s",
            lambda v, r: v <= 0.1,
            note="/proc/<pid>/stat utime+stime (10 ms ticks), after start-up; whole process "
            f"with start-up and stop (wait4): {median(totals):.2f} s",
        )
    ]
