"""``manage.py delayq_status``: print the health of the queues, exit 0 / 1 / 2.

Thin: :func:`django_delayq.monitoring.health.report` computes the report; this prints it.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from typing import Any

from django.core.management.base import CommandError

from django_delayq.exceptions import DelayQError
from django_delayq.management.parsing import DelayQCommand
from django_delayq.monitoring import health
from django_delayq.recurring.status import as_dicts, as_lines, safe_report
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import queue_list
from django_delayq.wording import counted

HEALTHY, UNHEALTHY, UNREACHABLE = 0, 1, 2

HELP = """Print, per queue: pending jobs, jobs due now, jobs in progress, dead jobs, jobs
expired and jobs rescheduled (totals since the queue began), lag (how long the oldest due job
has waited) and the live workers serving it.

A queue is healthy unless its lag exceeds --max-lag (when given), or it has due jobs and no
live worker serves it; a paused queue (delayq_queue pause) is healthy and shown as paused.
Exit status: 0 when every queue shown is healthy, 1 when one is not, 2 when Redis cannot be
read (unreachable, or no answer within --timeout seconds) or the options are wrong.
Usable as a Kubernetes probe, a cron alert or a Nagios check."""


def seconds(value: str) -> float:
    """A number of seconds >= 0 (argparse names this function in its error)."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise ValueError(value)
    return number


class Command(DelayQCommand):
    help = HELP
    # The exit status says only what HELP says: a configuration problem is a 2 (Redis
    # cannot be read), never the 1 of a failed system check; and a probe starts faster.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--queues",
            default=None,
            help="Comma-separated queues to check (default: the configured queues, those of "
            "registered tasks, every queue Redis remembers and those live workers serve).",
        )
        parser.add_argument(
            "--max-lag",
            type=seconds,
            default=None,
            metavar="SECONDS",
            help="Unhealthy when a queue's oldest due job has waited longer than this "
            "(default: no limit; only 'due jobs and no live worker' is unhealthy).",
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument(
            "--timeout",
            type=seconds,
            default=10.0,
            metavar="SECONDS",
            help="Give up (exit 2) when Redis has not answered within this (default 10).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues = None
        if options["queues"]:
            try:
                queues = queue_list(options["queues"])
            except ValueError as exc:  # exit 2, as argparse does for bad options
                raise CommandError(f"--queues: {exc}", returncode=UNREACHABLE) from exc
        found: list[Any] = []

        def read() -> None:
            try:
                found.append(
                    health.report(get_store(), queues, max_lag=options["max_lag"], totals=True)
                )
            except DelayQError as exc:
                found.append(exc)

        # The report runs on a thread so that a Redis that accepts connections and never
        # answers (or a network that drops packets) still ends in exit 2 on time.
        thread = threading.Thread(target=read, name="delayq-status", daemon=True)
        thread.start()
        thread.join(options["timeout"])
        result = found[0] if found else None
        if not isinstance(result, health.Report):
            error = (
                f"Redis did not answer within {options['timeout']:g} s"
                if result is None
                else f"cannot read the queues from Redis: {result}"
            )
            if options["json"]:
                self.stdout.write(json.dumps({"healthy": False, "error": error}))
            else:
                self.stderr.write(f"ERROR: {error}")
            sys.exit(UNREACHABLE)
        schedules = safe_report(get_store())  # recurring schedules: missing or overdue
        troubled = as_lines(schedules)
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        **as_json(result),
                        "healthy": result.healthy and not troubled,
                        "schedules": as_dicts(schedules),
                    },
                    indent=2,
                )
            )
        else:
            self.stdout.write("\n".join([as_text(result), *troubled]))
            if result.unreadable:  # not a queue's health: the exit code says nothing of it
                self.stderr.write(
                    f"WARNING: roster entries of another type, left out: "
                    f"{', '.join(result.unreadable)} (delete them if no worker wrote them)"
                )
        if not result.healthy or troubled:
            sys.exit(UNHEALTHY)


def as_json(report: health.Report) -> dict[str, Any]:
    return {
        "healthy": report.healthy,
        "redis_time": report.now,
        "max_lag": report.max_lag,
        "queues": [
            {
                "queue": q.queue,
                "pending": q.pending,
                "due": q.due,
                "in_progress": q.running,
                "dead": q.dead,
                "finished": q.finished,
                "expired_total": q.totals.get("expired", 0),
                "rescheduled_total": q.totals.get("rescheduled", 0),
                "lag_seconds": round(q.lag, 3),
                "live_workers": q.workers,
                "healthy": q.healthy,
                "paused": q.paused,
                "problems": list(q.problems),
            }
            for q in report.queues
        ],
        "workers": [
            {
                "name": w.name,
                "instance": w.instance,
                "host": w.host,
                "pid": w.pid,
                "queues": list(w.queues),
                "concurrency": w.concurrency,
                "version": w.version,
                "running": len(w.running),
                "done": w.done,
                "failed": w.failed,
                "last_beat_seconds_ago": round(report.now - w.beat, 3),
            }
            for w in report.workers
        ],
        "unreadable_roster_entries": report.unreadable,
    }


def _problem_text(q: health.QueueHealth, report: health.Report) -> str:
    max_lag = report.max_lag
    texts = []
    if health.UNKNOWN in q.problems:
        hint = health.unknown_queue_hint(q.queue, report.known)
        texts.append(f"UNKNOWN QUEUE: nothing names {q.queue!r}{hint}")
    if health.LAG in q.problems:
        texts.append(f"LAG: oldest due job waited {q.lag:.1f} s > {max_lag:g} s")
    if health.NO_WORKER in q.problems:
        texts.append(f"NO WORKER: {q.due} due, no live worker serves {q.queue}")
    return "; ".join(texts) or ("paused" if q.paused else "ok")


def as_text(report: health.Report) -> str:
    header = (
        "queue",
        "pending",
        "due",
        "in progress",
        "dead",
        "expired",
        "rescheduled",
        "lag",
        "workers",
        "status",
    )
    rows = [
        (
            q.queue,
            str(q.pending),
            str(q.due),
            str(q.running),
            str(q.dead),
            str(q.totals.get("expired", 0)),
            str(q.totals.get("rescheduled", 0)),
            f"{q.lag:.1f} s",
            str(q.workers),
            _problem_text(q, report),
        )
        for q in report.queues
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        lines.append("  ".join([*cells, row[-1]]))
    bad = sum(1 for q in report.queues if not q.healthy)
    count = len(report.workers)
    workers = counted(count, "live worker")
    summary = (
        f"OK: {counted(len(report.queues), 'queue')} healthy, {workers}"
        if not bad
        else f"UNHEALTHY: {bad} of {counted(len(report.queues), 'queue')}, {workers}"
    )
    return "\n".join([*lines, summary])
