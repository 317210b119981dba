"""What django-delayq's engine costs Redis, the worker and the producer, beside the bare seed
pattern, huey and plain redis-py, all in one run (issue 35).

Usage (from the repository root, with the project and its test extra installed)::

    python benchmarks/engine_cost.py                 # 3 rounds of 10,000 jobs: ~6 minutes
    python benchmarks/engine_cost.py --rounds 5 --jobs 20000
    python benchmarks/engine_cost.py --quick         # a smoke test: 1 round of 300 jobs
    python benchmarks/engine_cost.py --prototypes    # with the lean scripts' transitions
    python benchmarks/engine_cost.py --only transitions --baseline main   # and main's Lua

It starts its own ``redis-server`` (``--redis-server``, default the one on ``PATH``) on a free
127.0.0.1 port, persistence off, and measures in each round, the systems interleaved (the
order turns each round):

- a job's life, for each reply parser (hiredis when it is installed, and redis-py's own; a
  parser is forced in every process with ``DELAYQ_BENCH_PARSER``, so one installation runs
  both): the bare seed pattern (benchmarks/bench/seed.py: a ZADD round trip per job, one Lua
  claim of up to 100, a ZREM ack round trip per job, a task doing one RPUSH) and
  django-delayq (``schedule()`` of n plain jobs due now, one call each, then one real
  ``delayq_worker --burst`` process at concurrency 1 draining them, the task ``redis_push``:
  one RPUSH), with finished-job keeping and history at their defaults, and with both off.
  Per job: the redis-server process's CPU (/proc/<pid>/stat, both phases), the worker
  process's CPU, the drain's rate (first task start to last), and ``schedule()``'s rate
  against the seed's ZADD round trips;
- ``schedule_many()`` against pipelined ZADDs (chunks of BULK_CHUNK); a batch member's life
  (n jobs in one ``batch(on_complete=...)``) against the same jobs without a batch;
- the lateness of an idle worker (500 jobs over 5 s, each due 100 ms after it is
  scheduled), and the no-op drain of django-delayq against huey's, as benchmarks/compare.py
  runs them (the same adapters, this interpreter; huey must be installed).

Then, once: the same lives with every command in the slow log (commands sent per job, per
script and the commands inside it: benchmarks/bench/rediscpu.py), and Redis's microseconds
per transition from ``INFO commandstats`` with the inner commands' sum beside each script's
own time (benchmarks/bench/transitions.py). Every figure is the median of the rounds; each
ratio is the median of the per-round ratios. The table names the command that made it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PREFIX = "ec"
# lives: the seed pattern's and django-delayq's (and the prototypes'), every parser;
# extras: schedule_many, batch members, lateness; peers: huey; attribution: the logged lives
PARTS = ("lives", "extras", "peers", "attribution", "transitions")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per life")
    parser.add_argument("--quick", action="store_true", help="1 round of 300 jobs")
    parser.add_argument("--prototypes", action="store_true", help="the lean scripts too")
    parser.add_argument(
        "--baseline",
        metavar="GIT_REF",
        default=None,
        help="the transitions with that ref's Lua too, interleaved (bench/baseline.py)",
    )
    parser.add_argument("--no-peers", action="store_true", help="leave huey out")
    parser.add_argument("--only", default=",".join(PARTS), help=f"some of {','.join(PARTS)}")
    parser.add_argument("--redis-server", default=None)
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/engine_cost.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.jobs = 1, 300
    args.only = {part.strip() for part in args.only.split(",") if part.strip()}
    if args.no_peers:
        args.only.discard("peers")
    if args.only - set(PARTS):
        parser.error(f"--only: choose from {', '.join(PARTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    # A SIGTERM unwinds like Ctrl-C: the worker stopped, the redis-server ended.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    from benchmarks.bench import common

    with common.dedicated_redis(args.redis_server) as own:
        if own is None:
            raise SystemExit("engine_cost: no redis-server on PATH (or --redis-server)")
        os.environ["REDIS_URL"] = common.url_of(own)
        common.setup_django(PREFIX)
        workdir = Path(tempfile.mkdtemp(prefix="delayq-engine-cost-"))
        try:
            result = measure(own, args, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    result["command"] = " ".join(["python benchmarks/engine_cost.py", *argv])
    print(report(result))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"(JSON: {out})")
    return 0


def parsers() -> list[str]:
    return (["hiredis"] if importlib.util.find_spec("hiredis") else []) + ["python"]


def measure(own: Any, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import redis

    from benchmarks.bench import life
    from benchmarks.bench.report import environment

    n, started = args.jobs, time.monotonic()
    pid = life.redis_pid(own)
    port = own.connection_pool.connection_kwargs["port"]
    # One database per parser (django-redis keeps a pool per URL).
    dbs = {
        p: redis.Redis(host="127.0.0.1", port=port, db=i, client_name="delayq-bench-admin")
        for i, p in enumerate(parsers())
    }
    load = os.getloadavg()[0]
    default = parsers()[0]
    runs: dict[str, list[dict[str, Any]]] = {}
    peers: dict[str, list[float]] = {"delayq": [], "huey": []}
    late: list[float] = []
    problems: list[str] = []

    def add(name: str, value: dict[str, Any]) -> None:
        runs.setdefault(name, []).append(value)

    for round_ in range(args.rounds):
        progress(started, f"round {round_ + 1} of {args.rounds}")
        lives = [
            ("seed", lambda c, p: life.seed_life(c, pid, PREFIX, n, p, False)),
            ("keep", lambda c, p: life.delayq_life(c, pid, PREFIX, n, workdir, p, True, False)),
            ("off", lambda c, p: life.delayq_life(c, pid, PREFIX, n, workdir, p, False, False)),
        ]
        if args.prototypes:
            from benchmarks.prototypes.engine.life import proto_life
            from django_delayq.storage.finished import keep_setting

            lives += [
                ("proto_keep", lambda c, p: proto_life(c, pid, PREFIX, n, p, keep_setting())),
                ("proto_off", lambda c, p: proto_life(c, pid, PREFIX, n, p, (0, 0))),
            ]
        turn = round_ % len(lives)
        for parser in parsers() if "lives" in args.only else ():
            for name, run in lives[turn:] + lives[:turn]:
                progress(started, f"  {name} life, {parser} parser")
                add(f"{name}/{parser}", run(dbs[parser], parser))
        client = dbs[default]
        if "extras" in args.only:
            progress(started, "  schedule_many, batch members")
            add("pipelined", {"rate": pipelined_rate(client, n)})
            add("many", life.many_life(client, pid, PREFIX, n, workdir, default, False))
            add("batch", life.many_life(client, pid, PREFIX, n, workdir, default, True))
            progress(started, "  lateness of an idle worker")
            late.append(idle_lateness(client, workdir, default))
        if "peers" in args.only:
            progress(started, "  no-op drain beside huey")
            try:
                for system, rate in peer_drains(port, n, workdir).items():
                    peers[system].append(rate)
            except Exception as exc:  # huey missing or failing: say so, keep the rest
                problems.append(f"huey drain not measured: {type(exc).__name__}: {exc}")
    attribution, transitions, producer = {}, [], []
    if "attribution" in args.only:
        progress(started, "attribution (every command in the slow log)")
        attribution = {
            name: life.seed_life(dbs[default], pid, PREFIX, n, default, True)
            if name == "seed"
            else life.delayq_life(
                dbs[default], pid, PREFIX, n, workdir, default, name == "keep", True
            )
            for name in ("seed", "keep", "off")
        }
        for name, in_batch in (("many", False), ("batch", True)):
            attribution[name] = life.many_life(
                dbs[default], pid, PREFIX, n, workdir, default, in_batch, True
            )
    if "transitions" in args.only:
        progress(started, "transitions")
        transitions = transition_rows(dbs[default], default, args)
    if args.prototypes and "transitions" in args.only:
        from benchmarks.prototypes.engine.life import producer_costs

        producer = producer_costs(dbs[default], PREFIX, default, min(n, 5000))
    for client in dbs.values():
        client.flushdb()
    env = environment(own)
    env["seconds"] = round(time.monotonic() - started, 1)
    env["load_average"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return {
        "environment": env,
        "jobs": n,
        "rounds": args.rounds,
        "parsers": parsers(),
        "figures": [
            f for f in figures(runs, peers, late, n, default, args.prototypes) if f["runs"]
        ],
        "runs": runs,
        "attribution": attribution,
        "transitions": transitions,
        "producer": producer,
        "not_measured": problems,
    }


def progress(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {text}", file=sys.stderr, flush=True)


def pipelined_rate(client: Any, n: int) -> float:
    from benchmarks.bench import seed
    from django_delayq.scheduling.api import BULK_CHUNK

    client.flushdb()
    started = time.perf_counter()
    seed.pipelined(client, "seed:{q}:pending", n, BULK_CHUNK, int(time.time() * 1000))
    rate = n / (time.perf_counter() - started)
    client.flushdb()
    return rate


def idle_lateness(client: Any, workdir: Path, parser: str) -> float:
    """p99 (ms) of 500 ``redis_push`` jobs over 5 s for one idle worker (bench/latency.py)."""
    from benchmarks.bench import life
    from benchmarks.bench.common import percentile
    from benchmarks.bench.latency import lateness_idle, pushed_stamps
    from benchmarks.tasks import redis_push

    client.flushdb()
    url = life.url_of(client, client.connection_pool.connection_kwargs.get("db", 0))
    env = life.delayq_env(url, PREFIX, parser, keep=True)
    with life.api_on(url, PREFIX, parser) as store:
        late = lateness_idle(store, 500, 5.0, workdir, redis_push, pushed_stamps(client), env)
    client.flushdb()
    return percentile(late, 99) * 1000


def peer_drains(port: int, n: int, workdir: Path) -> dict[str, float]:
    """compare.py's drain (n jobs stored while the worker idles, all due at one moment) of
    django-delayq and huey, in this interpreter's environment."""
    from benchmarks import compare

    venv = Path(sys.prefix)
    url = f"redis://127.0.0.1:{port}/0"
    redis = compare.Resp(port)
    size = {"drain": n, "drain_cap": 30.0}
    out = {}
    try:
        for name, system in (("delayq", "django-delayq"), ("huey", "huey")):
            peer = compare.System(system, venv, url, workdir)
            rate = compare.bench_rate(peer, redis, {"rate": 1000, "rate_runs": 1})
            out[name] = compare.bench_drain(peer, redis, size, rate)["drain"]
        redis("FLUSHALL")
    finally:
        redis.close()
    return out


def transition_rows(client: Any, parser: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from benchmarks.bench import life, transitions
    from benchmarks.tasks import noop
    from django_delayq.storage.finished import keep_setting

    url = life.url_of(client, client.connection_pool.connection_kwargs.get("db", 0))
    rows = []
    with life.api_on(url, PREFIX, parser) as store, ExitStack() as stack:
        ctx = {"store": store, "task": noop, "client": client}
        cases = transitions.floor_cases()
        current = transitions.current_cases({"default": keep_setting(), "off": (0, 0)})
        if args.baseline:
            from benchmarks.bench import baseline
            from django_delayq.storage import calls, scripts

            old = stack.enter_context(baseline.baseline_cases(args.baseline, current))
            # Each case beside its baseline; a case of today's Lua puts today's scripts back.
            stack.callback(baseline.use, calls, store, scripts.script)
            now = baseline.now_cases(current, calls, scripts.script)
            # (a case whose script the ref lacks, such as reschedule before it, runs alone)
            then = {case.name: case for case in old}
            cases += [c for case in now for c in (case, then.get(case.name)) if c is not None]
        else:
            cases += current
        if args.prototypes:
            from benchmarks.prototypes import engine as prototypes

            cases += prototypes.cases()
        # Rounds interleaved (every case once, then again), so a change of load on a shared
        # machine falls on every case alike.
        measured: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            for case in cases:
                found = transitions.measure(client, case, ctx)
                measured.setdefault((case.group, case.name), []).append(found)
        for case in cases:
            found = measured[case.group, case.name]
            row = dict(found[0])
            for key in (
                "usec_per_call",
                "usec_per_job",
                "inner_usec_per_call",
                "lua_usec_per_call",
                "process_usec_per_call",
            ):
                row[key] = statistics.median(m[key] for m in found)
            rows.append(row)
    client.flushdb()
    return rows


def figures(
    runs: dict[str, list[dict]],
    peers: dict[str, list[float]],
    late: list[float],
    n: int,
    default: str,
    prototypes: bool = False,
) -> list[dict[str, Any]]:
    from benchmarks.bench.common import figure
    from benchmarks.bench.life import redis_us

    def values(name: str, key: str) -> list[float]:
        return [redis_us(r, n) if key == "redis" else r[key] for r in runs.get(name, [])]

    out = []
    for parser in parsers():
        seed = f"seed/{parser}"
        kinds = [("keep", 1.3), ("off", 1.15)]
        if prototypes:
            kinds += [("proto_keep", 1.3), ("proto_off", 1.15)]
        for keep, bound in kinds:
            name = f"{keep}/{parser}"
            what = (
                "keeping and history at defaults"
                if keep.endswith("keep")
                else "keeping, history off"
            )
            if keep.startswith("proto"):
                what = f"PROTOTYPE (lean scripts, lean loop), {what}"
            out.append(
                figure(
                    f"redis_life_{keep}_{parser}",
                    f"Redis CPU per job life, {what}, {parser}",
                    values(name, "redis"),
                    values(seed, "redis"),
                    "us",
                    f"<= {bound}x seed",
                    lambda v, r, bound=bound: r <= bound,
                    "delayq / seed",
                )
            )
            out.append(
                figure(
                    f"worker_cpu_{keep}_{parser}",
                    f"worker CPU per job, {what}, {parser}",
                    values(name, "worker_cpu_us"),
                    values(seed, "worker_cpu_us"),
                    "us",
                    "-",
                    None,
                    "delayq / seed",
                )
            )
            out.append(
                figure(
                    f"drain_{keep}_{parser}",
                    f"drain jobs/s, 1 worker, concurrency 1, {what}, {parser}",
                    values(name, "rate"),
                    values(seed, "rate"),
                    "jobs/s",
                    ">= 1.0x seed",
                    lambda v, r: r >= 1.0,
                    "delayq / seed",
                )
            )
        rates = [("schedule", "schedule()", "keep")]
        if prototypes:
            rates.append(("schedule_proto", "PROTOTYPE schedule_plain.lua, packed,", "proto_keep"))
        for name, what, life in rates:
            out.append(
                figure(
                    f"{name}_vs_zadd_{parser}",
                    f"{what} jobs/s vs a ZADD round trip per job, {parser}",
                    values(f"{life}/{parser}", "schedule_rate"),
                    values(seed, "schedule_rate"),
                    "jobs/s",
                    ">= 0.7x",
                    lambda v, r: r >= 0.7,
                )
            )
    out += [
        figure(
            "schedule_many_vs_pipelined",
            f"schedule_many() jobs/s vs pipelined ZADD, {default}",
            values("many", "schedule_rate"),
            values("pipelined", "rate"),
            "jobs/s",
            ">= 0.6x",
            lambda v, r: r >= 0.6,
        ),
        figure(
            "batch_member_redis",
            "Redis CPU per job life, batch members vs plain jobs",
            values("batch", "redis"),
            values("many", "redis"),
            "us",
            "<= 1.1x",
            lambda v, r: r <= 1.1,
            "batch / plain",
        ),
        figure(
            "batch_member_worker",
            "worker CPU per job, batch members vs plain jobs",
            values("batch", "worker_cpu_us"),
            values("many", "worker_cpu_us"),
            "us",
            "<= 1.1x",
            lambda v, r: r <= 1.1,
            "batch / plain",
        ),
        figure(
            "batch_member_drain",
            "drain jobs/s, batch members vs plain jobs",
            values("batch", "rate"),
            values("many", "rate"),
            "jobs/s",
            ">= 0.9x",
            lambda v, r: r >= 0.9,
            "batch / plain",
        ),
        figure(
            "lateness_idle_p99",
            "lateness p99, 500 jobs over 5 s, an idle worker",
            late,
            [],
            "ms",
            "<= 3 ms",
            lambda v, r: v <= 3.0,
        ),
    ]
    if peers["huey"]:
        out.append(
            figure(
                "drain_vs_huey",
                "no-op drain jobs/s (compare.py's), django-delayq vs huey",
                peers["delayq"],
                peers["huey"],
                "jobs/s",
                ">= 2x huey",
                lambda v, r: r >= 2.0,
                "delayq / huey",
            )
        )
    return out


def report(result: dict[str, Any]) -> str:
    from benchmarks.bench import rediscpu, transitions
    from benchmarks.bench.report import render, table

    n = result["jobs"]
    out = [table(result["figures"]) if result["figures"] else "", ""]
    if result["attribution"]:
        out.append("Commands per job over a life (INFO commandstats, the logged run; a script's")
        out.append("inner commands counted under their own names too), default parser:")
        out.append(commands_table(result["attribution"], n, render))
        out.append("")
        out.append("Where the time goes (the logged run: top-level commands, each script and")
        out.append("the commands it ran; the redis-server process CPU with logging on):")
        for name, life in result["attribution"].items():
            out.append(f"[{name}]")
            out.append(rediscpu.breakdown_table(life["phases"], n))
        out.append("")
    if result["transitions"]:
        out.append("Redis usec per transition (commandstats; inner: the commands the script")
        out.append("ran, cmds: how many; lua: the script's own time, its fixed cost included;")
        out.append("process: the server's CPU per call, reading and replying included):")
        out.append(transitions.table(result["transitions"]))
    if result["producer"]:
        out.append("")
        out.append("A producer's own Python per call (process_time) and wall time, one job a call:")
        rows = [("way", "CPU us/call", "wall us/call")]
        rows += [
            (r["way"], f"{r['cpu_us']:.1f}", f"{r['wall_us']:.1f}") for r in result["producer"]
        ]
        out.append(render(rows))
    for problem in result["not_measured"]:
        out.append(f"NOT MEASURED: {problem}")
    missed = [f["name"] for f in result["figures"] if f["met"] is False]
    env = result["environment"]
    out.append(f"targets not met: {', '.join(missed) if missed else 'none'}")
    out.append(
        f"{env['date']}, {env['cpus']} cores, Python {env['python']}, Django {env['django']}, "
        f"redis-py {env['redis_py']}, parsers {', '.join(result['parsers'])}, Redis "
        f"{env['redis_server']}, {n:,} jobs a life, {result['rounds']} rounds, "
        f"{env['seconds']} s, load average {env['load_average'][0]:g} at the start, "
        f"{env['load_average'][1]:g} at the end"
    )
    out.append(f"command: {result['command']}")
    return "\n".join(out)


def commands_table(attribution: dict[str, Any], n: int, render: Any) -> str:
    """Per command: calls per job of each life (commandstats of both phases), and the
    commands sent per job (top-level, from the slow log, every client but the task's)."""
    from benchmarks.bench.rediscpu import SETUP

    totals: dict[str, dict[str, dict[str, float]]] = {}
    for name, life in attribution.items():
        for phase in life["phases"].values():
            for command, row in phase["commandstats"].items():
                if command.split("|")[0] in SETUP:
                    continue
                cell = totals.setdefault(command, {}).setdefault(name, {"calls": 0, "usec": 0})
                cell["calls"] += row["calls"]
                cell["usec"] += row["usec"]
    names = list(attribution)
    rows = [("command", *(f"{name} calls/job, usec/call" for name in names))]
    order = sorted(totals, key=lambda c: -max(v["usec"] for v in totals[c].values()))
    for command in order:
        cells = []
        for name in names:
            cell = totals[command].get(name)
            cells.append(
                "-" if not cell else f"{cell['calls'] / n:.2f}, {cell['usec'] / cell['calls']:.1f}"
            )
        rows.append((command, *cells))
    sent = []
    for name in names:
        count = sum(
            row["calls"]
            for phase in attribution[name]["phases"].values()
            for command, row in phase["slowlog"]["delayq"].items()
            if command.split("|")[0] not in SETUP
        )
        sent.append(f"{count / n:.2f}")
    rows.append(("sent per job (top-level)", *sent))
    return render(rows)


if __name__ == "__main__":
    sys.exit(main())
