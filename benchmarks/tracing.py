"""Tracing's cost (issue 28): schedule() and a worker's drain with OpenTelemetry on and off,
measured in one process, the two alternating so a busy machine weighs on both alike.

Usage (from the repository root; tracing on needs ``opentelemetry-sdk``)::

    python benchmarks/tracing.py                    # off and on, 5 rounds of 3,000 jobs
    python benchmarks/tracing.py --off-only --tree /path/to/main   # another tree's code

Each round schedules ``--jobs`` no-op jobs one schedule() at a time, then drains them with
an in-process burst Worker (runner threads, as ``delayq_worker --burst``). "On" is an SDK
TracerProvider whose spans go through a ``BatchSpanProcessor`` (as in production) to an
exporter that drops them: the cost of making, linking and ending every span, without a
collector. Figures: jobs/s (wall clock, noisy on a shared machine) and this process's CPU
per job (``time.process_time``: every thread, far less sensitive to other processes);
Redis's own CPU is not in them. The median over the rounds; on/off is the ratio of medians.
Keys under ``--prefix`` (default ``delayq-bench-tracing``) on ``REDIS_URL`` are deleted
before and after.
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


def _tracer() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider.get_tracer("benchmarks")


def _round(jobs: int, tracer: Any) -> dict[str, float]:
    """One round: schedule ``jobs`` then drain them; wall and CPU seconds of each phase."""
    from benchmarks.tasks import noop
    from django_delayq.worker.dispatch import Worker

    try:
        from django_delayq.monitoring import tracing
    except ImportError:  # a tree without tracing: always off
        tracing = None
    if tracing is not None:
        tracing._tracer = tracer if tracer is not None else False
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(jobs):
        noop.schedule(i)
    scheduled = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    assert Worker(["default"], burst=True).run() == 0
    drained = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "schedule jobs/s": jobs / scheduled[0],
        "schedule CPU us/job": scheduled[1] / jobs * 1e6,
        "drain jobs/s": jobs / drained[0],
        "drain CPU us/job": drained[1] / jobs * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix", default="delayq-bench-tracing")
    parser.add_argument("--off-only", action="store_true")
    parser.add_argument("--tree", default=None, help="import django_delayq from this checkout")
    args = parser.parse_args(argv)
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    from benchmarks.bench import common

    common.setup_django(args.prefix)
    store = common.bench_store()
    common.cleanup(store.client, args.prefix)
    modes = {"off": None} if args.off_only else {"off": None, "on": _tracer()}
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    try:
        _round(min(args.jobs, 300), None)  # warm-up: scripts loaded, imports done
        for _ in range(args.rounds):
            for mode, tracer in modes.items():
                results[mode].append(_round(args.jobs, tracer))
    finally:
        common.cleanup(store.client, args.prefix)
    import django_delayq

    print(f"django_delayq from {Path(django_delayq.__file__).parent}")
    print(f"{'figure':24} " + " ".join(f"{mode:>10}" for mode in modes) + "     on/off")
    for figure in results["off"][0]:
        medians = {m: statistics.median(r[figure] for r in results[m]) for m in modes}
        line = f"{figure:24} " + " ".join(f"{medians[m]:10.1f}" for m in modes)
        if "on" in medians:
            line += f"  {medians['on'] / medians['off']:9.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
