"""django-delayq benchmarks: speed, latency, memory, scale and real tasks against Redis.

Usage (from the repository root, with django-delayq installed)::

    python benchmarks/run.py                 # every figure (not recurring_scale), ~10 min
    python benchmarks/run.py --quick         # tiny sizes, one run each: a smoke test
    python benchmarks/run.py --only drain,lateness --runs 5
    python benchmarks/run.py --python python3.13 --no-hiredis   # in a managed venv
    python benchmarks/run.py --matrix --quick                   # real tasks, 4 variants
    python benchmarks/run.py --compare benchmarks/baselines/2026-11-23.json

Environment and options:

- ``REDIS_URL`` (default ``redis://127.0.0.1:6379/15``): the Redis that the engine
  figures (schedule, drain, lateness) are measured on. Only keys under the benchmark's
  prefix (``--prefix``, default ``delayq-bench``) are written and deleted.
- Memory, claim cost and every real-task workload need a Redis with nothing else in it:
  the script starts its own ``redis-server`` (``--redis-server``, default the one on
  ``PATH``) on a free 127.0.0.1 port, persistence off, and stops it at the end (one for
  memory and claim cost, another for the real tasks). Without one those figures are
  reported as not measured.
- The ORM workload creates a PostgreSQL database ``delayq_bench_<random>`` on
  127.0.0.1:5432 (user postgres, needs psycopg), migrates it and drops it at the end,
  even on failure.
- ``--python X`` / ``--hiredis`` / ``--no-hiredis``: run everything (this script, its
  workers and baselines) in ``benchmarks/.venvs/py3.X`` (created on first use, the
  project installed editable), hiredis installed or uninstalled there. ``--matrix``
  runs the real-task workloads (or ``--only``) in {3.11, 3.13} x {hiredis, none} and
  prints one table. The parser in use (``redis.utils.HIREDIS_AVAILABLE``) is printed.
- ``--json PATH`` (default ``benchmarks/results/latest.json``, git-ignored).

Every figure is the median of several runs; where a baseline runs beside it in each run
(raw redis-py, a plain loop), the ratio column is the median of the per-run ratios, so it
holds on a noisy machine. Workers are real ``python -m django delayq_worker`` processes
with the default verbosity 1 (a log line per finished attempt), logging to a file;
tasks go through the registry, signals and logging like a user's.

Figures (targets from issues 5 and 11):

=======================  =========================================================
schedule_one             ``task.schedule()``, one call per job, 20k jobs due in 1 h,
                         vs one raw EVALSHA per job (>= 70 %)
schedule_vs_zadd         the same schedule() loop vs one plain ZADD round trip per
                         job, same run (>= 0.6)
aschedule_sequential     (issue 21) ``aschedule()``, 20k calls awaited one after the
                         other (no target); baseline: the schedule() loop, same run
aschedule_gather         the same 20k calls in one ``asyncio.gather`` (at most the
                         pool's 100 connections in flight; no target)
schedule_many            ``schedule_many()`` of 20k jobs vs pipelined raw ZADD
                         (>= 40,000 jobs/s and >= 50 %)
drain_1                  20k due no-op jobs, one ``delayq_worker --burst`` process,
                         first claim to last ack (>= 3,000 jobs/s); baseline: a raw
                         one-round-trip-per-job loop
drain_2                  the same with 2 processes (>= 1.6x drain_1)
drain_priority           (issue 20) drain_1 with every job prioritised (-10 / 10), with
                         every job's task rate-limited (1,000,000/s: never binding), and
                         with a queue concurrency limit of 1,000 (never reached), each vs
                         drain_1 of priority-0 jobs in the same run (no target); figures
                         drain_priority, drain_rate, drain_queue_limit
lateness_idle_p50/p99    500 jobs over 5 s (each due 100 ms ahead), one idle worker:
                         task start minus due time (<= 2 / 10 ms); baseline:
                         ``Event.wait()`` overshoot (the OS)
lateness_load_p99        1,000 jobs/s due for 10 s, 2 workers (<= 50 ms)
memory_per_job           100k pending jobs, 20-byte payload, ``INFO used_memory``
                         delta / 100k (<= 250 bytes); baseline: raw ZADD + HSET
claim_cost_ratio         claim+ack round trip with 1M pending vs 1k (<= 1.5)
upgrade                  ``delayq_upgrade`` of 20k jobs written as 0.1 wrote them (no
                         target); baseline: writing them, pipelined
push_drain               task 1 (one RPUSH on its own client), 5k due, one worker
                         (not --burst, like every real-task drain), concurrency 1
                         (>= 5,000 jobs/s); baseline: raw loop + RPUSH
push_drain_burst         the same drain by a --burst worker (no target)
push_cpu                 worker CPU s per 1,000 jobs of task 1 (no target)
redis_cpu_per_job        Redis's own time per job (commandstats, schedule phase +
                         drain phase) (<= 20 us); baseline: one plain ZADD
orm_drain / orm_cpu      task 2 (one ORM query on PostgreSQL, CONN_MAX_AGE=600), 3k,
                         concurrency 1 (>= 80 % of a plain loop of the same query)
sleep_drain / sleep_cpu  task 3 (sleep 10 ms), 4k, concurrency 8 (>= 90 % of 800/s,
                         <= 0.3 CPU s per 1,000 jobs)
async_sleep_drain/_cpu   (issue 21) task 4 (``await asyncio.sleep(0.1)``), 2k, one worker
                         at ``--async-concurrency 200`` (>= 80 % of 2,000/s, <= 0.2 CPU
                         s per 1,000 jobs)
idle_cpu                 a worker with nothing to do for 30 s (<= 0.1 CPU s)
lateness_push_idle_p99   the lateness figures with task 1 (<= 5 ms)
lateness_push_load_p99   1,000 jobs/s of task 1 due for 10 s, 2 workers (<= 20 ms)
processes_noop           (issue 21) the no-op drain by ``delayq_worker --processes 2``
                         vs ``--processes 1``, each child concurrency 1, not --burst,
                         the jobs scheduled once the children are up (no target; the
                         issue asks >= 1.8x); baseline: --processes 1, same run
processes_push           the same with task 1, 5k jobs
groups_*                 limits per group (bench/groups.py): 4,000 jobs of 10 ms over
                         1,000 keys at group_concurrency=1, 5 hot keys x 100 jobs due
                         first, one worker of 8 threads: drain jobs/s, share of the slots
                         busy, worker CPU s per 1,000 jobs, Redis us per job (no targets;
                         baseline: the same jobs without group=); groups_backlog_cold_s:
                         5 keys x 600 due first, 1,000 jobs of others behind: seconds
                         until those ended (baseline: 1,000 x 10 ms / 8 slots)
outbox_memory            (issue 12, PostgreSQL + a dedicated redis-server) Redis memory
                         growth with 100k jobs due in 7 days and HORIZON = 1 day
                         (constant, <= 64 KB); baseline: HORIZON off
outbox_relay             100k outbox rows relayed into Redis by relay passes
                         (>= 10,000 jobs/s); baseline: schedule_many() to Redis
recurring_*              (issue 19) N schedules every 60 s (full: 2,000; the issue's 10,000
                         with DELAYQ_BENCH_RECURRING_N=10000; bench/recurring.py): lateness
                         p50/p99, worker and Redis CPU per occurrence, Redis memory per
                         schedule (no targets)
recurring_scale_*        (issue 25; only with ``--only recurring_scale``: 10-15 minutes)
                         real ``delayq_worker --processes 2 --concurrency 4`` processes, a
                         PostgreSQL database of their own: N (10,000;
                         DELAYQ_BENCH_RECURRING_N; --quick 500) database schedules, cron
                         ``* * * * *``, created by bulk_create while the worker runs, for 3
                         minute boundaries (--quick 1): per boundary fired / early / twice /
                         lateness p50, p99, max; worker and Redis CPU per occurrence vs N
                         plain jobs of the same task; the same N from DELAYQ["SCHEDULES"]
                         (one boundary); N2 (100,000; DELAYQ_BENCH_RECURRING_BIG, 0 skips;
                         --quick 2,000) schedules: Redis and database bytes per schedule,
                         a first-sight and a steady reconcile pass (time, CPU), lateness at
                         one boundary (bench/recurring_scale.py; no targets but exactness)
batch_*                  10,000 no-op jobs in one ``batch(on_complete=...)`` vs the same
                         jobs without a batch, one worker each (a dedicated
                         redis-server): drain jobs/s, worker CPU s per 1,000 jobs, Redis
                         time in scripts and process CPU per job, schedule_many()
                         jobs/s; on_complete start after the last member's, p50 / p99
                         over 20 batches of 500 (bench/batches.py; no targets)
chain_*                  a chain (``Call.then``) of 1,000 no-op steps vs a chain made by
                         hand (each job schedules the next): wall time, worker CPU, Redis
                         time and process CPU per step (no targets)
outbox_schedule_us       ``schedule(on_commit=...)`` in its own transaction: INSERT,
                         COMMIT, fast path (no target); baseline: a plain schedule() in
                         the same transaction; outbox_insert_us: the part before COMMIT
=======================  =========================================================

Worker CPU comes from each worker process's own CPU time (``/proc/<pid>/stat``, what
its ``os.wait4`` rusage reports at exit) between its "started" log line and the last
job done, so neither start-up nor exit is counted per job; the idle worker's over 30 s
after start-up. See bench/real.py and
bench/rediscpu.py for how Redis's CPU is split per script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench import venvs  # noqa: E402 (standard library only)

ENGINE = (
    "schedule_one",
    "schedule_many",
    "drain",
    "drain_priority",
    "lateness",
    "memory",
    "claim_cost",
    "upgrade",
    "outbox",
    "aschedule",
    "recurring",
    "batch",
    "chain",
)
# Minutes of wall-clock time (it waits for minute boundaries): run only when asked for.
SLOW = ("recurring_scale",)
REAL = ("push", "orm", "sleep", "async_sleep", "idle", "lateness_push", "processes", "groups")
ALL = ENGINE + REAL + SLOW
MATRIX = ("push", "orm", "sleep", "idle")
RESULTS = ROOT / "benchmarks" / "results"
# Direction of "better" per unit, for --compare.
HIGHER_IS_BETTER = {"jobs/s"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run each")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure")
    parser.add_argument("--only", default=None, help=f"comma-separated: {','.join(ALL)}")
    parser.add_argument("--prefix", default="delayq-bench", help="key prefix (deleted first)")
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    parser.add_argument("--json", default=str(RESULTS / "latest.json"))
    parser.add_argument("--python", default=None, help="interpreter of a managed venv")
    hiredis = parser.add_mutually_exclusive_group()
    hiredis.add_argument("--hiredis", dest="hiredis", action="store_true", default=None)
    hiredis.add_argument("--no-hiredis", dest="hiredis", action="store_false")
    parser.add_argument("--matrix", action="store_true", help="real tasks in 4 variants")
    parser.add_argument(
        "--matrix-pythons", default="python3.11,python3.13", help="interpreters of --matrix"
    )
    parser.add_argument("--compare", default=None, help="a previous JSON result to compare to")
    args = parser.parse_args(argv)
    default = ",".join(MATRIX if args.matrix else ENGINE + REAL)
    args.only = [n.strip() for n in (args.only or default).split(",") if n.strip()]
    unknown = set(args.only) - set(ALL)
    if unknown:
        parser.error(f"unknown figure group {sorted(unknown)[0]!r}: choose from {', '.join(ALL)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    # A SIGTERM unwinds like Ctrl-C: workers stopped, database dropped, redis-server ended.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.matrix:
        return matrix(args, argv)
    if args.python or args.hiredis is not None:
        venvs.reexec(args.python, args.hiredis, argv)
    try:
        import django  # noqa: F401
        import redis  # noqa: F401
    except ImportError as exc:
        raise SystemExit(
            f"{exc.name} is not installed in {sys.executable}: install the project "
            "(pip install -e .), or pass --python python3.11 to use a managed venv"
        ) from None
    return measure(args, argv)


def measure(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks.bench import (
        asyncapi,
        asyncloop,
        common,
        engine,
        groups,
        latency,
        processes,
        real,
        rediscpu,
        report,
        scale,
    )

    only = args.only
    common.setup_django(args.prefix)
    size = common.SIZES["quick" if args.quick else "full"]
    runs = args.runs or size["runs"]
    slow = args.runs or size["slow_runs"]
    store = common.bench_store()
    store.client.ping()
    common.cleanup(store.client, args.prefix)
    figures: list[dict] = []
    problems: list[str] = []
    details: dict[str, Any] = {}
    started = time.monotonic()
    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))

    def progress(name: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {name}...", file=sys.stderr, flush=True)

    def attempt(name: str, work: Any) -> None:
        """Run one workload; a failure is reported (NOT MEASURED), not fatal to the rest
        of a ten-minute run."""
        progress(name)
        try:
            result = work()
        except Exception as exc:
            problems.append(f"{name} not measured: {type(exc).__name__}: {exc}")
            traceback.print_exc()  # where it failed, for whoever runs it
            print(problems[-1], file=sys.stderr, flush=True)
            return
        if isinstance(result, tuple):
            result, details[name] = result
        figures.extend(result)

    def on_own_redis(name: str, work: Any) -> None:
        """attempt() ``work(own)`` on a dedicated redis-server ``own``, started for it."""
        with common.dedicated_redis(args.redis_server) as own:
            if own is None:
                problems.append(f"no redis-server found: {name} not measured")
            else:
                attempt(name, lambda: work(own))

    try:
        p, d = args.prefix, workdir
        engine_work = {
            "schedule_one": lambda: engine.bench_schedule_one(store, p, size["schedule"], runs),
            "schedule_many": lambda: [engine.bench_schedule_many(store, p, size["schedule"], runs)],
            "drain": lambda: engine.bench_drain(store, p, size["drain"], slow, d),
            "drain_priority": lambda: engine.bench_drain_priority(store, p, size["drain"], slow, d),
            "lateness": lambda: latency.bench_lateness(store, p, size, slow, d),
            "upgrade": lambda: [engine.bench_upgrade(store, p, size["schedule"], runs)],
            "aschedule": lambda: asyncapi.bench_aschedule(store, p, size["schedule"], runs),
        }
        for name in (
            "schedule_one",
            "schedule_many",
            "drain",
            "drain_priority",
            "lateness",
            "upgrade",
            "aschedule",
        ):
            if name in only:
                attempt(name, engine_work[name])
                common.cleanup(store.client, p)
        if "memory" in only or "claim_cost" in only:
            with common.dedicated_redis(args.redis_server) as own:
                if own is None:
                    problems.append("no redis-server found: memory and claim cost not measured")
                else:
                    if "memory" in only:
                        attempt("memory", lambda: [scale.bench_memory(own, size["memory"], slow)])
                    if "claim_cost" in only:
                        attempt("claim_cost", lambda: [scale.bench_claim_cost(own, size, slow)])
        if "outbox" in only:
            from benchmarks.bench import outbox

            def outbox_figures(own: Any) -> list[dict]:
                with outbox.outbox_database():
                    return [
                        outbox.bench_memory(own, size["outbox_memory"], slow),
                        outbox.bench_relay(own, size["outbox_relay"], slow),
                        *outbox.bench_schedule_in_transaction(own, size["outbox_schedule"], slow),
                    ]

            on_own_redis("outbox", outbox_figures)
        if "recurring" in only:
            from benchmarks.bench import recurring

            n = int(os.environ.get("DELAYQ_BENCH_RECURRING_N", size["recurring"]))
            seconds = size["recurring_seconds"]
            on_own_redis("recurring", lambda own: recurring.bench_recurring(own, p, n, seconds))
        for name in ("batch", "chain"):
            if name in only:
                from benchmarks.bench import batches, real

                bench = {"batch": batches.bench_batch, "chain": batches.bench_chain}[name]

                def linked(own: Any, bench: Any = bench) -> list[dict]:
                    with real.redis_env(own, p) as env:
                        return bench(own, p, size, slow, d, env)

                on_own_redis(name, linked)
        if "recurring_scale" in only:
            from benchmarks.bench import recurring_scale

            on_own_redis(
                "recurring_scale",
                lambda own: recurring_scale.bench_recurring_scale(own, p, size, d),
            )
        if set(REAL) & set(only):
            with common.dedicated_redis(args.redis_server) as own:
                if own is None:
                    problems.append("no redis-server found: real-task workloads not measured")
                else:
                    with real.redis_env(own, args.prefix) as env:
                        work = {
                            "push": lambda: real.bench_push(own, p, size, slow, d, env),
                            "orm": lambda: real.bench_orm(own, p, size, slow, d, env),
                            "sleep": lambda: real.bench_sleep(own, p, size, slow, d, env),
                            "async_sleep": lambda: asyncloop.bench_async_sleep(
                                own, p, size, slow, d, env
                            ),
                            "idle": lambda: real.bench_idle(own, size, d, env),
                            "lateness_push": lambda: latency.bench_lateness_push(
                                own, p, size, slow, d, env
                            ),
                            "processes": lambda: processes.bench_processes(
                                own, p, size, slow, d, env
                            ),
                            "groups": lambda: groups.bench_groups(own, p, size, slow, d, env),
                        }
                        for name in REAL:
                            if name in only:
                                attempt(name, work[name])
    finally:
        common.cleanup(store.client, args.prefix)
        shutil.rmtree(workdir, ignore_errors=True)

    env = report.environment(store.client)
    env["seconds"] = round(time.monotonic() - started, 1)
    # Other processes share the cores: the 1-minute load average says how much.
    env["load_average"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    print(report.table(figures))
    print(report.notes(figures))
    if "push" in details:
        push = details["push"]
        n = push["n"]
        print(
            f"\nRedis time per job of task 1, one extra run with every command in the slow "
            f"log ({n:,} jobs; {push['attribution_per_job_usec']:.1f} us/job with logging "
            "on; the figure above comes from the runs with it off):"
        )
        print(rediscpu.breakdown_table(push["attribution"], n))
        print("\nINFO commandstats of that run, as Redis reports it:")
        print(rediscpu.commandstats_table(push["attribution"], n))
    if "recurring_scale" in details:
        from benchmarks.bench.recurring_scale import minutes_table

        command = " ".join(["python benchmarks/run.py", *argv])
        print(minutes_table(details["recurring_scale"], command))
    for problem in problems:
        print(f"NOT MEASURED: {problem}")
    missed = [f["name"] for f in figures if f["met"] is False]
    print(f"targets not met: {', '.join(missed) if missed else 'none'}")
    parser = "hiredis" if env["hiredis"] else "python (no hiredis)"
    print(
        f"{env['date']}, {env['cpus']} cores, Python {env['python']}, Django {env['django']}, "
        f"redis-py {env['redis_py']} with the {parser} parser, Redis {env['redis_server']}, "
        f"{env['seconds']} s{' (--quick)' if args.quick else ''}, load average "
        f"{env['load_average'][0]:g} at the start, {env['load_average'][1]:g} at the end"
    )
    result = {
        "environment": env,
        "command": " ".join(["python benchmarks/run.py", *argv]),
        "quick": args.quick,
        "figures": figures,
        "not_measured": problems,
        "details": details,
    }
    if args.compare:
        print(compare(json.loads(Path(args.compare).read_text()), figures))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


def compare(before: dict[str, Any], figures: list[dict]) -> str:
    """Each figure against the same one in a previous result: change and direction
    (a change within 10 % is called noise on this shared machine)."""
    from benchmarks.bench.report import fmt_value, render

    old = {f["name"]: f for f in before.get("figures", [])}
    rows = [("figure", "before", "now", "change", "verdict")]
    for f in figures:
        previous = old.get(f["name"])
        if previous is None or previous["value"] is None or f["value"] != f["value"]:
            continue
        if previous["value"] == 0:
            change = 0.0 if f["value"] == 0 else float("inf")
        else:
            change = f["value"] / previous["value"] - 1
        better = change > 0 if f["unit"] in HIGHER_IS_BETTER else change < 0
        verdict = "same (noise)" if abs(change) <= 0.10 else "better" if better else "WORSE"
        rows.append(
            (
                f["name"],
                fmt_value(previous["value"], f["unit"]),
                fmt_value(f["value"], f["unit"]),
                f"{change:+.0%}",
                verdict,
            )
        )
    date = before.get("environment", {}).get("date", "?")
    return f"\nCompared with {date} (every figure must be no worse than then):\n" + render(rows)


def matrix(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks.bench.report import matrix_table

    pythons = [p.strip() for p in args.matrix_pythons.split(",") if p.strip()]
    child = [a for a in argv if a != "--matrix"]
    if "--only" not in " ".join(child):
        child += ["--only", ",".join(args.only)]
    results = venvs.run_matrix(pythons, child, RESULTS)
    print("\nReal-task workloads per interpreter and parser (medians):")
    print(matrix_table(results))
    for label, result in results.items():
        for problem in result.get("not_measured", []) + (
            [result["error"]] if "error" in result else []
        ):
            print(f"NOT MEASURED ({label}): {problem}")
    out = Path(args.json if "--json" in " ".join(argv) else RESULTS / "matrix.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
