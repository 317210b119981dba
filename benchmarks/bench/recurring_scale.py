"""Recurring schedules at scale (issue 25), with real ``delayq_worker --processes 2
--concurrency 4`` processes on the dedicated redis-server and a PostgreSQL database of
their own (a new one per variant), or with ``DELAYQ_BENCH_RECURRING_DB=sqlite`` an SQLite
file of their own (the ``db`` variant only, N 2,000 unless DELAYQ_BENCH_RECURRING_N says:
issue 35's SQLite case). Each variant runs in a driver process
(bench/recurring_driver.py, Django on that database)
that starts the worker, creates the schedules, waits for the minute boundaries and prints
what it saw as JSON.

- ``db``: the worker starts before any schedule exists, as a deployed one would. First N
  plain jobs (``schedule_many``, all due a few seconds ahead) are drained: the baseline of
  the CPU figures. Then N ``Schedule`` rows (cron ``* * * * *``) are created at once
  (``bulk_create``) at T0 and the worker runs through the boundaries M1 (the first at least
  10 s after T0), M2, M3 and the drain of M3 (until every schedule ran for M3, 40 s at most).
- ``settings``: the same N schedules in ``DELAYQ["SCHEDULES"]`` (benchmarks/settings.py,
  ``DELAYQ_BENCH_SETTINGS_SCHEDULES``), in the worker from its start; one boundary, M1 at
  least 10 s after the children are up.
- ``big``: N2 rows; in the driver one reconcile pass on first sight and one right after (a
  steady pass): wall time and the driver's CPU (``Reconciler(store).run_pass()``; the
  database server's own CPU is not counted), Redis ``used_memory`` after the first pass minus
  before / N2, ``pg_total_relation_size`` of the schedule and state tables / N2; then one
  worker and the lateness at one boundary (the first at least 5 s after it is up).

Every run is recorded by the task itself (``benchmarks.tasks.occurrence_probe``: fire time,
start, job id, a line per run in a per-process file). Per boundary: schedules fired,
runs started before their fire time (early), schedules that ran more than once for it
(twice), lateness (start minus fire time) p50 / p99 / max of each schedule's first run.

CPU per occurrence: user + system time of the supervisor and its children (/proc/<pid>/stat;
the children's pids from the supervisor's "child N started, pid P" lines) and Redis's
``used_cpu_sys + used_cpu_user``, read 5 s before M1 (start-up and the first pass are
behind) and when M3 is drained, divided by the occurrences that started in between; the
plain jobs' window runs from just before their due time to the last start. The
occurrences' window lasts minutes, the plain jobs' seconds, so the ``_net`` figures also
subtract what the worker and Redis spend idle in as many seconds (measured for IDLE_S
before any job or schedule exists: heartbeats, the relay's and the passes' looks, Redis's
own timers); what is left is what the occurrences and the schedules cost. Both run the
same probe task, so the ratio is the recurring machinery's share. The lateness has its
baseline in the same run too: the plain jobs' p99 (start minus their due time), against the
occurrences' p99 at the worst boundary (issue 35's target: at most 1.3x, as for the CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import pg
from .common import ROOT, figure, url_of, worker_env

RATIO_TARGET = 1.3  # issue 35: an occurrence at most 1.3x a plain job (CPU, lateness p99)
SQLITE_N = 2_000  # issue 35's SQLite case: 2,000 schedules

# -- run.py's side: a database per variant, the driver, the figures ------------------------


def bench_recurring_scale(own: Any, prefix: str, size: dict, workdir: Path) -> tuple:
    """The figures, and the details minutes_table() prints."""
    vendor = os.environ.get("DELAYQ_BENCH_RECURRING_DB", "postgresql")
    if vendor not in ("postgresql", "sqlite"):
        raise ValueError(f"DELAYQ_BENCH_RECURRING_DB={vendor!r}: use postgresql or sqlite")
    sqlite = vendor == "sqlite"
    default_n = min(SQLITE_N, size["recurring_scale"]) if sqlite else size["recurring_scale"]
    n = int(os.environ.get("DELAYQ_BENCH_RECURRING_N", default_n))
    big = 0 if sqlite else int(os.environ.get("DELAYQ_BENCH_RECURRING_BIG", size["recurring_big"]))
    env = {"REDIS_URL": url_of(own), "DELAYQ_BENCH_PREFIX": prefix}
    got: dict[str, Any] = {"n": n, "n2": big, "load_average": round(os.getloadavg()[0], 2)}
    got["database"] = vendor
    got["db"] = driver(own, workdir, env, "db", n, size["recurring_minutes"], vendor)
    if not sqlite:
        settings_env = {**env, "DELAYQ_BENCH_SETTINGS_SCHEDULES": str(n)}
        got["settings"] = driver(own, workdir, settings_env, "settings", n, 1, vendor)
    if big:
        got["big"] = driver(own, workdir, env, "big", big, 1, vendor)
    return [*db_figures(got), *big_figures(got)], got


@contextlib.contextmanager
def database(vendor: str, workdir: Path) -> Iterator[dict[str, str]]:
    """The environment of a new, empty database of ``vendor``: a PostgreSQL database
    (dropped on exit), or an SQLite file in ``workdir`` (one the worker processes share)."""
    if vendor == "sqlite":
        folder = tempfile.mkdtemp(prefix="sqlite-", dir=workdir)
        yield {"DELAYQ_BENCH_SQLITE": str(Path(folder) / "bench.sqlite3")}
        return
    with pg.postgres_database() as name:
        yield {"DELAYQ_BENCH_PG_DB": name}


def driver(
    own: Any, workdir: Path, env: dict, variant: str, n: int, minutes: int, vendor: str
) -> dict:
    """Run one variant's driver on a fresh Redis and a new database; what it printed."""
    own.flushdb()
    with database(vendor, workdir) as where:
        full = worker_env(workdir, {**env, **where})
        pg.migrate(ROOT, full)
        command = [sys.executable, "-m", "benchmarks.bench.recurring_driver", variant]
        proc = subprocess.Popen(
            [*command, str(n), str(minutes)],
            cwd=ROOT,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate(timeout=minutes * 60 + 300 + n / 200)
        finally:
            if proc.poll() is None:  # interrupted: the driver stops its workers first
                proc.terminate()
                proc.wait(60)
    if proc.returncode:
        raise RuntimeError(f"the {variant} driver failed: {err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def row(name: str, label: str, value: float, unit: str, **more: Any) -> dict[str, Any]:
    """A figure of this group: one run; ``baseline``, ``target``, ``met``, ``note``."""
    baseline = more.pop("baseline", None)
    target, met = more.pop("target", "-"), more.pop("met", None)
    values, baselines = [value], [] if baseline is None else [baseline]
    return figure(f"recurring_scale_{name}", label, values, baselines, unit, target, met, **more)


def exact(count: int, note: str) -> dict[str, Any]:
    """The target of a count that must be exactly ``count``."""
    return {"target": f"{count:,}", "met": lambda v, r: v == count, "note": note}


def per_occurrence(cost: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """The ratio and note of a CPU figure: occurrences against the plain jobs."""
    return {
        "ratio_kind": "occurrence / plain job",
        "note": f"{cost['runs']:,} occurrences in a window of {cost['seconds']:.0f} s; "
        f"baseline: {plain['runs']:,} plain jobs of the same task, due together, in "
        f"{plain['seconds']:.1f} s (their lateness p50 {plain['p50']:.0f} ms, p99 "
        f"{plain['p99']:.0f} ms; their Redis CPU includes schedule_many's)",
    }


def ratio_target(note: str) -> dict[str, Any]:
    """Issue 35's target of a figure against its plain-job baseline of the same run."""
    return {
        "target": f"<= {RATIO_TARGET}x",
        "met": lambda v, r: r <= RATIO_TARGET,
        "ratio_kind": "occurrence / plain job",
        "note": note,
    }


def db_figures(got: dict[str, Any]) -> list[dict]:
    n, db = got["n"], got["db"]
    rows, plain, cost = db["minutes"], db["plain"], db["cost"]
    where = got.get("database", "postgresql")
    note = f"{n:,} database schedules ({where}), cron * * * * *, at " + ", ".join(
        m["minute"] for m in rows
    )
    per = ratio_target(per_occurrence(cost, plain)["note"])
    late = ratio_target(
        f"{note}; baseline: {plain['runs']:,} plain jobs due together, start minus due time"
    )
    fewest = min(m["fired"] for m in rows)
    return [
        row("fired", f"N={n:,}: fired per minute, fewest", fewest, "count", **exact(n, note)),
        row("early", "runs before their fire time", sum(m["early"] for m in rows), "count",
            **exact(0, note)),
        row("twice", "schedules run twice for one minute", sum(m["twice"] for m in rows),
            "count", **exact(0, note)),
        *(row(f"late_{k}", f"lateness {k}, worst minute", max(m[k] for m in rows), "ms",
              note=note) for k in ("p50", "max")),
        row("late_p99", "lateness p99, worst minute", max(m["p99"] for m in rows), "ms",
            baseline=plain["p99"], **late),
        row("worker_cpu", "worker CPU per occurrence", cost["worker_us"], "us",
            baseline=plain["worker_us"], **per),
        row("redis_cpu", "Redis CPU per occurrence", cost["redis_us"], "us",
            baseline=plain["redis_us"], **per),
        *net_figures(db),
        *settings_figures(got),
    ]  # fmt: skip


def net_figures(db: dict[str, Any]) -> list[dict]:
    """The CPU figures less what the idle worker and Redis spend in as many seconds."""
    if "idle" not in db:
        return []
    idle, plain, cost = db["idle"], db["plain"], db["cost"]
    note = (
        f"less the idle worker's {idle['worker'] * 1000:.1f} ms and Redis's "
        f"{idle['redis'] * 1000:.1f} ms of CPU a second (measured {idle['seconds']:.0f} s "
        f"before any schedule existed) times the window's {cost['seconds']:.0f} s "
        f"(the plain jobs': {plain['seconds']:.1f} s)"
    )
    return [
        row("worker_cpu_net", "worker CPU per occurrence, less idle", cost["worker_net_us"],
            "us", baseline=plain["worker_net_us"], **ratio_target(note)),
        row("redis_cpu_net", "Redis CPU per occurrence, less idle", cost["redis_net_us"],
            "us", baseline=plain["redis_net_us"], **ratio_target(note)),
    ]  # fmt: skip


def settings_figures(got: dict[str, Any]) -> list[dict]:
    if "settings" not in got:
        return []
    n, cfg, plain = got["n"], got["settings"], got["db"]["plain"]
    per_cfg = per_occurrence(cfg["cost"], plain)
    m1 = cfg["minutes"][0]
    of_cfg = f"{n:,} DELAYQ['SCHEDULES'] entries, in the worker from its start, at {m1['minute']}"
    return [
        row("settings_fired", "settings schedules: fired", m1["fired"], "count",
            **exact(n, of_cfg)),
        row("settings_wrong", "settings: early + twice", m1["early"] + m1["twice"], "count",
            **exact(0, of_cfg)),
        row("settings_late_p99", "settings: lateness p99", m1["p99"], "ms", note=of_cfg),
        row("settings_worker_cpu", "settings: worker CPU per occurrence",
            cfg["cost"]["worker_us"], "us", baseline=plain["worker_us"], **per_cfg),
    ]  # fmt: skip


def big_figures(got: dict[str, Any]) -> list[dict]:
    if "big" not in got:
        return []
    n, big = got["n2"], got["big"]
    first, steady, m = big["first_pass"], big["steady_pass"], big["minutes"][0]
    note = f"N2={n:,} database schedules; in the driver process"
    tables = (
        f"{big['schedule_bytes']:.0f} B in django_delayq_schedule, "
        f"{big['state_bytes']:.0f} B in django_delayq_schedule_state (pg_total_relation_size)"
    )
    passes = (
        f"created {first['created']:,} occurrences then {steady['created']:,}; Redis CPU "
        f"{first['redis_cpu']:.2f} s then {steady['redis_cpu']:.2f} s; errors "
        f"{first['errors']} / {steady['errors']}; PostgreSQL's own CPU not counted"
    )
    at = (
        f"N2={n:,}, one --processes 2 worker, at {m['minute']}: fired {m['fired']:,}, early "
        f"{m['early']}, twice {m['twice']}, max {m['max']:.0f} ms; "
        f"{big['runs_before_m1']:,} runs of earlier minutes, {big['backlog_at_m1']:,} of them "
        "after it"
    )
    return [
        row("big_redis_bytes", "Redis memory per schedule", big["redis_bytes"], "bytes",
            note=f"{note}: used_memory after the first pass minus before"),
        row("big_db_bytes", "database bytes per schedule",
            big["schedule_bytes"] + big["state_bytes"], "bytes", note=tables),
        row("big_first_pass", "reconcile pass, first sight", first["seconds"], "s", note=passes),
        row("big_first_cpu", "reconcile pass, first sight: CPU", first["cpu"], "cpu_s",
            note=passes),
        row("big_steady_pass", "reconcile pass, steady", steady["seconds"], "s", note=passes),
        row("big_steady_cpu", "reconcile pass, steady: CPU", steady["cpu"], "cpu_s", note=passes),
        row("big_late_p50", "N2: lateness p50", m["p50"], "ms", note=at),
        row("big_late_p99", "N2: lateness p99", m["p99"], "ms", note=at),
    ]  # fmt: skip


def minutes_table(got: dict[str, Any], command: str) -> str:
    """One row per variant and minute boundary."""
    from .report import render

    rows = [("variant", "minute (UTC)", "fired", "early", "twice", "p50 ms", "p99 ms", "max ms")]
    plain = got["db"]["plain"]  # the baseline: N plain jobs due together, same workers
    times = tuple(f"{plain.get(k, float('nan')):.0f}" for k in ("p50", "p99", "max"))
    rows.append(("plain jobs", "(due together)", f"{plain['runs']:,}", "-", "-", *times))
    for variant in ("db", "settings", "big"):
        for m in got.get(variant, {}).get("minutes", []):
            n = got["n2"] if variant == "big" else got["n"]
            cells = (f"{m['fired']:,} / {n:,}", str(m["early"]), str(m["twice"]))
            times = tuple(f"{m[k]:.0f}" for k in ("p50", "p99", "max"))
            rows.append((variant, m["minute"], *cells, *times))
    return (
        f"\nRecurring schedules per minute boundary ({command}; N={got['n']:,}, "
        f"N2={got['n2']:,}, {got.get('database', 'postgresql')}, load average "
        f"{got['load_average']:g} at the start):\n" + render(rows)
    )
