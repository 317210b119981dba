"""Run the reliability suite and print its results as a reStructuredText table.

    python benchmarks/reliability_table.py              # runs pytest tests/reliability
    python benchmarks/reliability_table.py --no-run     # only prints the last results
    python benchmarks/reliability_table.py -- -k chaos  # arguments after -- go to pytest

Every scenario of tests/reliability appends one JSON line to
benchmarks/results/reliability.jsonl (``DELAYQ_RELIABILITY_RESULTS`` overrides the path);
this script empties that file, runs the suite, and prints the table docs/guarantees.rst shows.
Needs redis-server and redis-cli (6.2+) on PATH; nothing touches 127.0.0.1:6379.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(
    os.environ.get(
        "DELAYQ_RELIABILITY_RESULTS", ROOT / "benchmarks" / "results" / "reliability.jsonl"
    )
)
STANDARD = ("scenario", "jobs", "kills", "lost", "duplicates", "seconds")
HIDDEN = {"test", "at", "cpus", "python", "slowest_command", "here", "fresh_store"}
NOTES: dict[str, Any] = {
    "exposed": "{} runs exposed by kills",
    "dead": "{} dead",
    "outage_seconds": "Redis down {} s",
    "refused_while_down": "{} schedule() refused while down",
    "schedule_raised_after": "raised after {} s",
    "processed_in_threads": "{} run by the 2 in-process workers",
    "recovered_after": "recovered {} s after the kill",
    "running_at_sigterm": "{} running at SIGTERM, all finished",
    "sigterms": "{} SIGTERM",
    "max_lateness_ms": "at most {} ms late on Redis's clock",
    "min_lateness_ms": "never early (min {} ms)",
    "refused": "{} refused with TypeError",
    "huge_schedule_ms": "10 MB job scheduled in {} ms",
    "huge_run_ms": "ran {} ms later",
    "wake_latency_ms": "idle worker woken in {} ms",
    "failover_seconds": "failover took {} s",
    "refused_during_failover": "{} schedule() refused during it",
    "finished_unacked_at_stop": "{} finished and unacknowledged at the forced stop",
    "exit_code": "exit code {}",
    "recovery_seconds": "backlog recovered in {} s",
    "visibility_timeout": "{} s visibility timeout",
    "prefetched_at_kill": "{} claimed, not started at the kill",
    "dead_never_ran": "{} of them never ran",
    "acked_by_its_worker": "acknowledged by its worker: {}",
    "runs_until_dead": "runs until dead: {}",
    "max_retries_reported": "get_job() said max_retries {}",
    "note": "{}",
    "variants": "{} kinds of garbage",
    "hashes": "in {}",
    "broken": "{} pages or calls broken",
    "commit_hooks_seconds": "commit hooks took {} s in all",
    "relayed_by_worker": "relayed per worker: {}",
    "in_database": "{} waited in the database",
    "p50_lateness_ms": "p50 {} ms late",
    "depth": "arguments nested {} deep",
    "cancel_redis_ms": "cancel took {} ms",
    "slowest_ms": "slowest Redis command {} ms",
    "held_by": "job then in {}",
    "status": "result {}",
    "new_process": lambda v: (
        f"a new process finds the result {v['result']['status']} and the job {v['job']['status']}"
    ),
    "started_at_kill": "{} started at the kill",
    "cut_short": "{} cut short",
    # 29-33: the promises of on_commit jobs (tests/reliability/test_outbox_promises.py)
    "cancelled_in_transaction": "{} cancelled inside their transaction (by id and by key)",
    "cancelled_ran": "{} of them ran",
    "superseded_ran": lambda v: f"superseded calls that ran: {shown(v) or 'none'}",
    "lock_held_seconds": "outbox table locked {} s",
    "ran_while_locked": "{} ran while their rows stayed",
    "tombstones_dropped": "{} tombstones expired meanwhile",
    "ran_early": "{} ran early",
    "get_job_found": "get_job(returned id) found it: {}",
    "cancel_returned": "cancel(returned id) returned {}",
    "ran_under_returned_id": "ran under the returned id: {}",
    # 47-48: recurring schedules after an outage and through a rolling deploy
    "missed_ran": "missed fire times that ran: {}",
    "late_ran": "late ones that ran: {}",
    "stored_at_kill": "{} occurrences pending at the kill",
    "caught_up_seconds": "caught up {} s after the restart",
    "takeover_seconds": "new definition from the fire time {} s after the new worker started",
    "under_new": "{} ran under it",
    "definition_switches": "{} definition switch(es)",
}


def shown(value: object) -> str:
    """A note's value for a table cell: lists and dicts without Python's brackets."""
    if isinstance(value, list):
        return ", ".join(shown(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {shown(v)}" for k, v in value.items())
    return str(value)


def redis_version() -> str:
    server = shutil.which("redis-server")
    if server is None:
        return "redis-server not found"
    out = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    latest: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            latest[row["scenario"]] = row  # the last run of each scenario wins
    return sorted(latest.values(), key=lambda row: order(row["scenario"]))


def order(scenario: str) -> tuple[int, str]:
    """Scenarios in the order of their numbers ("2." before "10."), then by name."""
    number = re.match(r"\d+", scenario)
    return (int(number.group()) if number else 10**6, scenario)


def notes(row: dict) -> str:
    parts = []
    for name, value in row.items():
        if name in STANDARD or name in HIDDEN:
            continue
        note = NOTES.get(name, name + " {}")
        parts.append(note(value) if callable(note) else note.format(shown(value)))
    return "; ".join(parts)


def table(rows: list[dict]) -> str:
    header = ("Scenario", "Jobs", "Kills / restarts", "Lost", "Duplicates", "Time (s)", "Notes")
    body = [
        (
            row["scenario"],
            f"{row['jobs']:,}",
            str(row["kills"]),
            str(row["lost"]),
            str(row["duplicates"]),
            f"{row['seconds']:.1f}",
            notes(row),
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(len(header))]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([rule, line(header), rule, *(line(cells) for cells in body), rule])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-run", action="store_true", help="print the last results only")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    options = parser.parse_args()
    command = [sys.executable, "-m", "pytest", "tests/reliability", "-m", "reliability", "-q"]
    command += options.pytest_args
    code, wall = 0, None
    if not options.no_run:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text("")
        began = time.monotonic()
        env = {**os.environ, "DELAYQ_RELIABILITY_RESULTS": str(RESULTS)}
        code = subprocess.call(command, cwd=ROOT, env=env)
        wall = time.monotonic() - began
    rows = load(RESULTS)
    print()
    print(
        f"Reliability suite, {datetime.now(UTC):%Y-%m-%d}: {os.cpu_count()} cores "
        f"({platform.machine()}), Python {platform.python_version()}, Redis {redis_version()}"
        + (f", {wall:.0f} s wall time" if wall else "")
        + "; ``python benchmarks/reliability_table.py``"
    )
    print()
    print(table(rows))
    if code:
        print(f"\npytest exited with {code}: some scenarios failed (see above)")
    return code


if __name__ == "__main__":
    sys.exit(main())
