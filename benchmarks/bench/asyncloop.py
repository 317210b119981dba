"""The worker's event loop (issue 21): ``async_sleep`` drains task 4 (``async_sleep_io``,
``await asyncio.sleep(0.1)``) with one worker at ``--async-concurrency 200`` and
``--concurrency 1``, not --burst, on the dedicated redis-server: jobs/s against the ideal
2,000 jobs/s (200 slots x 10 jobs/s each), and the worker's CPU per 1,000 jobs (from
"started" to the last job done, as for the other real tasks: bench/real.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import figure, median

ASYNC_CONCURRENCY = 200
ASYNC_SLEEP = 0.1  # seconds each job awaits
ASYNC_IDEAL = ASYNC_CONCURRENCY / ASYNC_SLEEP  # jobs/s


def bench_async_sleep(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    from benchmarks.tasks import async_sleep_io

    from .real import drain_runs

    n = size["async_sleep"]
    rates, cpus, note = drain_runs(
        own,
        prefix,
        async_sleep_io,
        n,
        runs,
        workdir,
        env,
        concurrency=1,
        extra=("--async-concurrency", str(ASYNC_CONCURRENCY)),
    )
    return [
        figure(
            "async_sleep_drain",
            f"drain jobs/s, task 4 (await asyncio.sleep(0.1)), 1 worker, "
            f"--async-concurrency {ASYNC_CONCURRENCY} ({n:,})",
            rates,
            [ASYNC_IDEAL] * len(rates),
            "jobs/s",
            f">= 80% of {ASYNC_IDEAL:,.0f} jobs/s",
            lambda v, r: r >= 0.80,
            ratio_kind="of the ideal",
            note=f"baseline: the ideal, {ASYNC_CONCURRENCY} slots x {1 / ASYNC_SLEEP:g} jobs/s",
        ),
        figure(
            "async_sleep_cpu",
            f"worker CPU s per 1,000 jobs, task 4, --async-concurrency {ASYNC_CONCURRENCY}",
            cpus,
            [],
            "cpu_s",
            "<= 0.2 CPU s per 1,000 jobs",
            lambda v, r: v <= 0.2,
            note=note + f"; median {median(cpus):.3f}",
        ),
    ]
