"""A queue's history (issue 28): a worker's drain with DELAYQ["HISTORY"] on and off, and the
Redis bytes one queue's 72 hours of history cost.

Usage (from the repository root; starts a redis-server of its own on a free loopback port)::

    python benchmarks/history.py                      # 5 rounds of 3,000 jobs, on and off
    python benchmarks/history.py --jobs 10000 --rounds 3

Each round schedules ``--jobs`` no-op jobs (``schedule_many``, not measured) and drains them
with an in-process burst Worker (runner threads, as ``delayq_worker --burst``), history on
(the default) or off; the two alternate so a busy machine weighs on both alike. Figures,
medians over the rounds: jobs/s (wall clock), this process's CPU per job, the redis-server's
CPU per job (INFO cpu of its own process).

Then the memory: every minute of 75 hours (the kept 72, the hour being written and the 2
hours of margin before a key expires) flushed as workers flush it, for three kinds of queue,
and the ``MEMORY USAGE`` of the queue's hour keys added up: "quiet" (a few jobs a minute, 2
lateness buckets used), "busy" (hundreds of jobs, some failures, 8 buckets), "worst" (every
kind every minute and 40 buckets: lateness spread over 10 doublings each minute).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HOURS = 75  # KEEP_HOURS + the current hour + MARGIN_HOURS


def _settings(on: bool) -> Any:
    from django.conf import settings
    from django.test import override_settings

    return override_settings(DELAYQ={**getattr(settings, "DELAYQ", {}), "HISTORY": on})


def _round(store: Any, own: Any, jobs: int, on: bool) -> dict[str, float]:
    """Schedule ``jobs`` (not measured), then drain them: figures of the drain."""
    from benchmarks.bench import common, rediscpu
    from benchmarks.tasks import noop
    from django_delayq import schedule_many
    from django_delayq.worker.dispatch import Worker

    common.cleanup(own, store.prefix)
    with _settings(on):
        schedule_many(noop, [(i,) for i in range(jobs)])
        redis_cpu = rediscpu.process_cpu(own)
        wall, cpu = time.perf_counter(), time.process_time()
        assert Worker(["default"], burst=True).run() == 0
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        redis_cpu = rediscpu.process_cpu(own) - redis_cpu
    done = sum(p.done for p in store.history.points("default", time.time(), minutes=10))
    assert done == (jobs if on else 0), (done, jobs, on)
    return {
        "drain jobs/s": jobs / wall,
        "worker CPU us/job": cpu / jobs * 1e6,
        "Redis CPU us/job": redis_cpu / jobs * 1e6,
    }


def _minute(kind: str, rng: random.Random) -> dict[str, int]:
    """One minute's counts of a queue of ``kind``."""
    if kind == "quiet":
        fields = {"d": rng.randint(1, 9)}
        first, buckets = 20, 2
    elif kind == "busy":
        fields = {"d": rng.randint(100, 900), "f": rng.randint(0, 20), "x": rng.randint(0, 2)}
        first, buckets = 18, 8
    else:
        fields = {"d": rng.randint(10_000, 99_999), "f": rng.randint(100, 999), "x": 99}
        first, buckets = 1, 40
    for b in range(first, first + buckets):
        fields[f"l{b}"] = rng.randint(1, 999)
    return {k: v for k, v in fields.items() if v}


def bytes_per_queue(store: Any, own: Any, kind: str) -> tuple[int, int, int, str]:
    """Every minute of HOURS hours flushed (one flush per hour, as many as workers would
    send): the bytes of the queue's hour keys, how many keys, their fields."""
    from benchmarks.bench import common

    common.cleanup(own, store.prefix)
    rng = random.Random(28)
    queue = f"hist-{kind}"
    now = int(time.time() // 60)
    first = now - HOURS * 60 + 1 + (now % 60)  # whole hours, the current one included
    for hour_start in range(first - first % 60, now + 1, 60):
        counts = {(queue, m): _minute(kind, rng) for m in range(hour_start, hour_start + 60)}
        store.history.flush(counts)
    keys = list(own.scan_iter(match=f"{store.prefix}:{{{queue}}}:history:*", count=1000))
    memory = sum(own.memory_usage(k, samples=0) or 0 for k in keys)
    fields = sum(own.hlen(k) for k in keys)
    encodings = sorted({own.object("encoding", k).decode() for k in keys})
    return memory, len(keys), fields, "/".join(encodings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix", default="delayq-bench-history")
    parser.add_argument("--memory-only", action="store_true")
    args = parser.parse_args(argv)
    from benchmarks.bench import common

    with common.django_on_own_redis(args.prefix) as found:
        if found is None:
            print("no redis-server found")
            return 1
        own, store = found
        import django_delayq

        print(f"django_delayq from {Path(django_delayq.__file__).parent}, {args.jobs:,} jobs")
        if not args.memory_only:
            results: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
            _round(store, own, min(args.jobs, 300), True)  # warm-up: scripts loaded
            for _ in range(args.rounds):
                for mode in results:
                    results[mode].append(_round(store, own, args.jobs, mode == "on"))
            print(f"{'figure (median)':24} {'off':>10} {'on':>10}     on/off")
            for figure in ("drain jobs/s", "worker CPU us/job", "Redis CPU us/job"):
                m = {k: statistics.median(r[figure] for r in v) for k, v in results.items()}
                print(f"{figure:24} {m['off']:10.1f} {m['on']:10.1f}  {m['on'] / m['off']:9.2f}")
        print(f"\n{'queue (75 h of minutes)':24} {'keys':>6} {'fields':>8} {'bytes':>11}  encoding")
        for kind in ("quiet", "busy", "worst"):
            memory, keys, fields, encoding = bytes_per_queue(store, own, kind)
            print(f"{kind:24} {keys:6} {fields:8,} {memory:11,}  {encoding}")
        common.cleanup(own, store.prefix)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
