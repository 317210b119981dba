"""Fair queues (issue 36, item 4): 10,000 due jobs of group "a", then one of group "b", and
one claim loop at concurrency 4 (each round trip acknowledges the 4 jobs it ran and claims 4
more, as a worker's claim does; the jobs do nothing): b's start latency (from its schedule to
the claim that leases it) over N runs, and the drain time of the 10,001 jobs, fair and not
(the runs interleaved, the order turning; the drain's ratio is the median of each run's
fair / not-fair ratio).

Usage (from the repository root)::

    python benchmarks/fairness.py [--runs 20] [--jobs 10000]
    python benchmarks/fairness.py --quick     # 3 runs

Starts its own redis-server (persistence off) on a free loopback port. Store-level: the
worker's Python around the claim is not measured, the Redis side of the turns is. One run of
10 jobs in each mode goes first, uncounted: the process's first claim imports, builds and
loads the scripts (about 50 ms), which a running worker did long before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench.common import dedicated_redis, setup_django  # noqa: E402

Q = "default"


def one_run(store, jobs: int, fair: bool, run: int) -> tuple[float, float]:
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.record import encode_record

    store.client.flushdb()
    store.control.publish_fair({Q: fair})
    record = encode_record("bench.fair", [1], {}, None, 3, "g", 0)
    for _ in range(jobs):
        store.schedule(Q, new_job_id(), record, group="a")
    scheduled = time.perf_counter()
    b = store.schedule(Q, new_job_id(), record, group="b").id
    latency, acks, n = None, [], 0
    while True:
        n += 1
        reply = store.claim(Q, 4, lease=60, token=f"t{run}.{n}", instance="w", acks=acks)
        if not reply.jobs and not acks:
            break
        if latency is None and any(j.id == b for j in reply.jobs):
            latency = time.perf_counter() - scheduled
        acks = [(j.id, f"t{run}.{n}", "g") for j in reply.jobs]
    return latency or float("nan"), time.perf_counter() - scheduled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--quick", action="store_true", help="3 runs")
    parser.add_argument("--redis-server", default=None)
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    with dedicated_redis(args.redis_server) as server:
        if server is None:
            print("no redis-server found")
            return 1
        setup_django("bench-fair")
        from django_delayq.storage.store import Store

        store = Store(server, "bench-fair")
        found: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for fair in (True, False):  # the process's first claim builds and loads the scripts
            one_run(store, 10, fair, -1)
        load = os.getloadavg()
        for run in range(runs):  # interleaved, the order turning, so a slow moment hits both
            for fair in (True, False) if run % 2 == 0 else (False, True):
                found[fair].append(one_run(store, args.jobs, fair, run))
    print(f"command: python benchmarks/fairness.py {' '.join(argv or sys.argv[1:])}".rstrip())
    after = os.getloadavg()
    print(f"load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after", end=" ")
    print(f"{after[0]:.2f} {after[1]:.2f} {after[2]:.2f}")
    for fair in (True, False):
        lat = sorted(r[0] * 1000 for r in found[fair])
        drain = statistics.median(r[1] for r in found[fair])
        p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
        print(
            f"fair={fair!s:5} runs={runs} jobs={args.jobs}+1: b starts p50 "
            f"{statistics.median(lat):.1f} ms, p99 {p99:.1f} ms; drain median {drain:.2f} s"
        )
    ratios = [f[1] / n[1] for f, n in zip(found[True], found[False], strict=True)]
    ratio = statistics.median(ratios)
    print(f"drain fair / not fair, median of the {runs} runs' ratios: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
