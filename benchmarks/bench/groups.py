"""Limits per group (``@task(group_concurrency=1)``, ``schedule(..., group=)``): how fast a
worker drains jobs spread over 1,000 keys when a few keys have a long backlog due first.

N jobs (full: 4,000; quick: 400) of a task that sleeps 10 ms, 1,000 keys at
group_concurrency=1: 5 hot keys hold 100 jobs each (quick: 10), scheduled first so they are
due first and the claim meets them first; the rest are spread round robin over the other
995 keys. One ``delayq_worker`` process (not --burst) with W = 8 threads drains them,
started once they are scheduled (a worker writes the tasks' limits before its first claim).

Figures (medians of the runs; the baseline is the same drain of the same task without a
group or limit, in the same run):

- groups_drain: jobs/s from the first start to the last end (the task's own stamps);
- groups_utilisation: the share of the W slots busy running a job over that span
  (sum of the jobs' run times / (W x span)); the note gives the best span the limit
  allows (max(N x 10 ms / W, a hot key's 100 x 10 ms one after the other));
- groups_cpu: the worker's CPU s per 1,000 jobs (from "started" to the last job);
- groups_redis_us: Redis's time per job in the scripts while the worker drains them
  (commandstats; the jobs are scheduled before the worker starts, their cost in the note);
- groups_backlog_cold_s: a harder case, 5 hot keys x 600 jobs (quick: 60) due first, then
  1,000 jobs (quick: 100) of the other keys: seconds from the first start until the last of
  those 1,000 ended, against the bound of all 8 slots on them (1,000 x 10 ms / 8). Every
  claim meets the hot keys' backlog first: parked, it costs each claim a bounded amount.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import rediscpu
from .common import QUEUE, Workers, figure, median, store_on

KEYS = 1_000
HOT = 5
SECONDS = 0.01
SLOTS = 8


def _spans(workdir: Path) -> list[tuple[int, float, float]]:
    out = []
    for path in workdir.glob("*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((int(parts[0]), float(parts[1]), float(parts[2])))
    return out


def _calls(n: int, hot_jobs: int, grouped: bool) -> list[dict[str, Any]]:
    calls = []
    for i in range(n):
        key = i % HOT if i < HOT * hot_jobs else HOT + i % (KEYS - HOT)
        call: dict[str, Any] = {"args": [i, SECONDS]}
        if grouped:
            call["group"] = f"k{key}"
        calls.append(call)
    return calls


def drain(
    own: Any, prefix: str, n: int, hot_jobs: int, grouped: bool, workdir: Path, env: dict
) -> dict[str, float]:
    """One drain: rate, utilisation, worker CPU s / 1,000 jobs, Redis us / job."""
    from benchmarks.tasks import grouped_io, plain_io
    from django_delayq import schedule_many

    own.flushdb()
    for path in workdir.glob("*.txt"):
        path.unlink()
    with store_on(own, prefix) as store:
        names = rediscpu.script_names(store)
        before = rediscpu.reset(own)
        schedule_many(grouped_io if grouped else plain_io, _calls(n, hot_jobs, grouped))
        scheduled = rediscpu.read_phase(own, before, names, logged=False)
        before = rediscpu.reset(own)
        # The worker writes the limits before its first claim (worker/limits.py).
        workers = Workers(1, workdir, concurrency=SLOTS, env=env)
        try:
            workers.wait_sampled()
            keys = [store.key(QUEUE, k) for k in ("pending", "running", "parked")]
            deadline = time.monotonic() + 120 + n / 20
            while time.monotonic() < deadline:
                pipe = own.pipeline(transaction=False)
                for key in keys:
                    pipe.zcard(key)
                if not any(pipe.execute()):
                    break
                workers.check_alive()
                time.sleep(0.005)
            workers.sample_end()
            phase = rediscpu.read_phase(own, before, names, logged=False)
        finally:
            workers.stop()
        workers.check_alive()
    spans = _spans(workdir)
    assert len(spans) == n, f"{len(spans)} of {n} ran: " + workers.tail()
    first, last = min(s for _, s, _ in spans), max(e for _, _, e in spans)
    busy = sum(e - s for _, s, e in spans)
    return {
        # when the last job of a cold key (not one of the HOT) ended, from the first start
        "cold_end": max(e for i, _, e in spans if i >= HOT * hot_jobs) - first,
        "rate": n / (last - first),
        "utilisation": busy / (SLOTS * (last - first)),
        "cpu": workers.work_cpu_seconds() / n * 1000,
        "redis_us": rediscpu.per_job_usec(phase, n),
        "schedule_us": rediscpu.per_job_usec(scheduled, n),
        "span": last - first,
    }


def bench_groups(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    n = size.get("groups", 4_000)
    hot_jobs = size.get("groups_hot", 100)
    backlog_hot, backlog_cold = size.get("groups_backlog", (600, 1_000))
    grouped: list[dict[str, float]] = []
    plain: list[dict[str, float]] = []
    backlog: list[dict[str, float]] = []
    for _ in range(runs):
        grouped.append(drain(own, prefix, n, hot_jobs, True, workdir, env))
        plain.append(drain(own, prefix, n, hot_jobs, False, workdir, env))
        total = HOT * backlog_hot + backlog_cold
        backlog.append(drain(own, prefix, total, backlog_hot, True, workdir, env))
    own.flushdb()
    cold_best = backlog_cold * SECONDS / SLOTS  # a bound: every slot on those jobs
    best = max(n * SECONDS / SLOTS, hot_jobs * SECONDS)
    what = (
        f"{n:,} jobs of 10 ms, {KEYS:,} keys at group_concurrency=1, {HOT} hot keys x "
        f"{hot_jobs} due first, {SLOTS} slots"
    )
    base = "baseline: the same jobs without group=, same run"

    def values(runs_: list[dict[str, float]], name: str) -> list[float]:
        return [r[name] for r in runs_]

    return [
        figure(
            "groups_drain",
            f"drain jobs/s ({what})",
            values(grouped, "rate"),
            values(plain, "rate"),
            "jobs/s",
            "(no target)",
            None,
            note=base,
        ),
        figure(
            "groups_utilisation",
            "share of the worker's slots busy over the drain",
            values(grouped, "utilisation"),
            values(plain, "utilisation"),
            "share",
            "(no target)",
            None,
            note=f"{base}; the best span the limit allows: {best:.2f} s, median span "
            f"{median(values(grouped, 'span')):.2f} s",
        ),
        figure(
            "groups_cpu",
            "worker CPU s per 1,000 jobs",
            values(grouped, "cpu"),
            values(plain, "cpu"),
            "cpu_s",
            "(no target)",
            None,
            note=base,
        ),
        figure(
            "groups_redis_us",
            "Redis time per job in the scripts",
            values(grouped, "redis_us"),
            values(plain, "redis_us"),
            "us",
            "(no target)",
            None,
            note=f"{base}; commandstats of the drain (script calls); scheduling them, per job: "
            f"{median(values(grouped, 'schedule_us')):.0f} us with group= (schedule.lua, one "
            f"call per job), {median(values(plain, 'schedule_us')):.0f} us without "
            "(schedule_many.lua)",
        ),
        figure(
            "groups_backlog_cold_s",
            f"{HOT} keys x {backlog_hot} due first, {backlog_cold:,} jobs of other keys behind "
            "them: seconds until the last of those ended",
            values(backlog, "cold_end"),
            [cold_best] * len(backlog),
            "s",
            "(no target)",
            None,
            note=f"baseline: a lower bound, every one of the {SLOTS} slots on those jobs "
            f"({backlog_cold:,} x 10 ms / {SLOTS}); that drain's Redis time per job: "
            f"{median(values(backlog, 'redis_us')):.0f} us, slots busy: "
            f"{median(values(backlog, 'utilisation')):.2f}",
        ),
    ]
