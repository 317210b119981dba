"""Tracing's cost (issue 28): schedule() and a worker's drain with OpenTelemetry on and off,
measured in one process, the two alternating so a busy machine weighs on both alike.

Usage (from the repository root; tracing on needs ``opentelemetry-sdk``)::

    python benchmarks/tracing.py                    # off and on, 5 rounds of 3,000 jobs
    python benchmarks/tracing.py --off-only --tree /path/to/main   # another tree's code
    python benchmarks/tracing.py --sampler off      # on: a provider whose sampler drops all
    python benchmarks/tracing.py --floor --attempt  # one span alone, then one attempt's span

Each round schedules ``--jobs`` no-op jobs one schedule() at a time, then drains them with
an in-process burst Worker (runner threads, as ``delayq_worker --burst``). "On" is an SDK
TracerProvider whose spans go through a ``BatchSpanProcessor`` (as in production) to an
exporter that drops them: the cost of making, linking and ending every span, without a
collector. Figures: jobs/s (wall clock, noisy on a shared machine) and this process's CPU
per job (``time.process_time``: every thread, far less sensitive to other processes);
Redis's own CPU is not in them. The median over the rounds; on/off is the ratio of medians.
Keys under ``--prefix`` (default ``delayq-bench-tracing``) on ``REDIS_URL`` are deleted
before and after. The in-memory database is migrated first (a job id that looks like a
recurring occurrence's, about 1 in 32,768, has its outcome written to the schedules' table).

``--sampler`` gives "on" a sampler: ``on`` (the SDK's default, every span recorded),
``off`` (``ALWAYS_OFF``: spans made, none recorded) or a ratio such as ``0.1``
(``TraceIdRatioBased``); each inside ``ParentBased``, as the SDK's environment variables
configure them.

``--floor`` and ``--attempt`` time spans alone, without Redis or a worker (CPU per span,
the median of ``--rounds`` rounds of ``--jobs``): ``--floor`` a bare SDK span (started and
ended, no attributes, no link), the least any span costs; ``--attempt`` one attempt's
``process`` span as the worker makes it (worker/traced.py: attributes, the link parsed from
a stored context, a context of its own per job, as schedule() writes them one at a time).
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


def _tracer(sampler: str = "on") -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_OFF,
        ALWAYS_ON,
        ParentBased,
        TraceIdRatioBased,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    root = {"on": ALWAYS_ON, "off": ALWAYS_OFF}.get(sampler)
    provider = TracerProvider(
        sampler=ParentBased(root if root is not None else TraceIdRatioBased(float(sampler)))
    )
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


def _spans(what: str, tracer: Any, jobs: int, rounds: int) -> tuple[float, float]:
    """CPU us per span of ``what`` ("floor" or "attempt"): the least and the median of
    ``rounds`` (the least is the one other processes disturbed least)."""
    import random

    from django_delayq.jobs.record import decode_record, encode_record
    from django_delayq.worker.execution import Attempt, Outcome
    from django_delayq.worker.traced import traced

    record = encode_record("benchmarks.tasks.noop", [1], {}, flags="t")
    fields = decode_record(record)
    times = []
    for _ in range(rounds):
        attempts = []
        for i in range(jobs):
            attempt = Attempt("default", f"J{i:025d}", "token", record, 1)
            ids = random.getrandbits(128), random.getrandbits(64)
            attempt.trace = b'{"traceparent":"00-%032x-%016x-01"}' % ids
            attempt.fields = fields
            attempts.append((attempt, Outcome(attempt, True)))
        cpu = time.process_time()
        if what == "floor":
            for _ in attempts:
                tracer.start_span("process default").end()
        else:
            for attempt, outcome in attempts:
                with traced(tracer, attempt) as ended:
                    ended(outcome)
        times.append((time.process_time() - cpu) / jobs * 1e6)
    return min(times), statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix", default="delayq-bench-tracing")
    parser.add_argument("--off-only", action="store_true")
    parser.add_argument("--tree", default=None, help="import django_delayq from this checkout")
    parser.add_argument("--sampler", default="on", help="on, off, or a ratio (0.1)")
    parser.add_argument("--floor", action="store_true", help="a bare SDK span's CPU only")
    parser.add_argument("--attempt", action="store_true", help="an attempt's span's CPU only")
    args = parser.parse_args(argv)
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    from benchmarks.bench import common

    common.setup_django(args.prefix)
    if args.floor or args.attempt:
        import django_delayq

        print(f"django_delayq from {Path(django_delayq.__file__).parent}")
        tracer = _tracer(args.sampler)
        for what in ("floor", "attempt"):
            if getattr(args, what):
                _spans(what, tracer, min(args.jobs, 300), 1)  # warm-up
                least, median = _spans(what, tracer, args.jobs, args.rounds)
                name = f"{what} CPU us/span, sampler {args.sampler}"
                print(f"{name}: least {least:.1f}, median {median:.1f}")
        return 0
    from django.core.management import call_command

    call_command("migrate", verbosity=0)  # the schedules' table (see above)
    store = common.bench_store()
    common.cleanup(store.client, args.prefix)
    modes = {"off": None} if args.off_only else {"off": None, "on": _tracer(args.sampler)}
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
