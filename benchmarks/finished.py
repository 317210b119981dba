"""Keeping finished jobs (issue 28): a worker's drain with FINISHED_MAX_* on and off, and the
Redis bytes a kept job costs.

Usage (from the repository root; starts a redis-server of its own on a free loopback port)::

    python benchmarks/finished.py                      # 5 rounds of 3,000 jobs, on and off
    python benchmarks/finished.py --jobs 10000 --rounds 3

Each round schedules ``--jobs`` no-op jobs (``schedule_many``, not measured) and drains them
with an in-process burst Worker (runner threads, as ``delayq_worker --burst``), keeping
finished jobs ("on": the defaults, 1 h and 10,000 per queue) or not ("off":
FINISHED_MAX_COUNT=0); the two alternate so a busy machine weighs on both alike. Figures,
medians over the rounds: jobs/s (wall clock), this process's CPU per job, and the
redis-server's CPU per job (INFO cpu, its own process: what keeping costs Redis). Then
the memory: ``MEMORY USAGE`` of the queue's ``finished`` and ``kept`` keys divided by the
jobs kept, for the no-op job (one integer argument) and for a job with about 300 bytes of
arguments. The count bound is raised to hold every job of the memory rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PAYLOAD = {"customer": 4242, "email": "someone@example.com", "note": "x" * 200, "items": [1, 2]}


def _settings(keep: bool, count: int = 10_000) -> Any:
    from django.conf import settings
    from django.test import override_settings

    delayq = dict(getattr(settings, "DELAYQ", {}))
    delayq["FINISHED_MAX_COUNT"] = count if keep else 0
    return override_settings(DELAYQ=delayq)


def _round(store: Any, own: Any, jobs: int, keep: bool, payload: bool = False) -> dict[str, float]:
    """Schedule ``jobs`` (not measured), then drain them: figures of the drain."""
    from benchmarks.bench import common, rediscpu
    from benchmarks.tasks import noop
    from django_delayq import schedule_many
    from django_delayq.worker.dispatch import Worker

    common.cleanup(own, store.prefix)
    with _settings(keep, max(jobs, 10_000)):
        args = [((i, PAYLOAD) if payload else (i,)) for i in range(jobs)]
        schedule_many(noop, args)
        redis_cpu = rediscpu.process_cpu(own)
        wall, cpu = time.perf_counter(), time.process_time()
        assert Worker(["default"], burst=True).run() == 0
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        redis_cpu = rediscpu.process_cpu(own) - redis_cpu
    kept = store.finished.count("default")
    memory = sum(
        own.memory_usage(store.key("default", kind), samples=0) or 0
        for kind in ("finished", "kept")
    )
    return {
        "drain jobs/s": jobs / wall,
        "worker CPU us/job": cpu / jobs * 1e6,
        "Redis CPU us/job": redis_cpu / jobs * 1e6,
        "kept": kept,
        "bytes/kept job": memory / kept if kept else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix", default="delayq-bench-finished")
    args = parser.parse_args(argv)
    from benchmarks.bench import common

    with common.django_on_own_redis(args.prefix) as found:
        if found is None:
            print("no redis-server found")
            return 1
        own, store = found
        results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        _round(store, own, min(args.jobs, 300), True)  # warm-up: scripts loaded, imports done
        for _ in range(args.rounds):
            for mode in results:
                results[mode].append(_round(store, own, args.jobs, mode == "on"))
        sized = _round(store, own, args.jobs, True, payload=True)
        import django_delayq

        print(f"django_delayq from {Path(django_delayq.__file__).parent}, {args.jobs:,} jobs")
        print(f"{'figure (median)':24} {'off':>10} {'on':>10}     on/off")
        for figure in ("drain jobs/s", "worker CPU us/job", "Redis CPU us/job"):
            m = {k: statistics.median(r[figure] for r in v) for k, v in results.items()}
            print(f"{figure:24} {m['off']:10.1f} {m['on']:10.1f}  {m['on'] / m['off']:9.2f}")
        small = statistics.median(r["bytes/kept job"] for r in results["on"])
        print(
            f"\nRedis bytes per kept job: {small:,.0f} (no-op job, one int argument), "
            f"{sized['bytes/kept job']:,.0f} (about 300 bytes of arguments)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
