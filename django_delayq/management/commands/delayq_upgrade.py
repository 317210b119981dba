"""``manage.py delayq_upgrade``: convert queues from the Redis layout of django-delayq 0.1.

Thin: :mod:`django_delayq.worker.upgrade` does the work; this picks the queues and prints.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError

from django_delayq.exceptions import DelayQError
from django_delayq.management.parsing import DelayQCommand
from django_delayq.monitoring import health
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import queue_list
from django_delayq.worker.upgrade import BATCH, QueueUpgrade, upgrade_queue

HELP = """Convert the jobs of django-delayq 0.1 in Redis to this version's layout (due times
in milliseconds, leases, attempts, errors and records). Run it after stopping every worker
and deploying this version, before starting the workers again; workers refuse to start
while a queue they serve holds 0.1's data. Safe to run twice or after an interruption.
Exit status: 0 when done (or nothing to do), 1 with --dry-run when something needs
converting, 2 when Redis cannot be reached or the options are wrong."""


class Command(DelayQCommand):
    help = HELP

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--queues",
            default=None,
            help="Comma-separated queues (default: the configured queues, those of registered "
            "tasks and every queue Redis remembers).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Change nothing: report what needs converting, exit 1 if anything does.",
        )
        parser.add_argument(
            "--batch", type=int, default=BATCH, help=f"Jobs per script call (default {BATCH})."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1", returncode=2)
        try:
            store = get_store()
            if options["queues"]:
                queues = queue_list(options["queues"])
            else:
                queues = list(health.iter_known_queues(store))
            if options["dry_run"]:
                data_all = store.old_layout.data(queues)
                found = [d for d in data_all if d.found]
                for data in data_all if verbosity >= 2 else found if verbosity else ():
                    self.stdout.write(f"{data.queue}: {data.describe()} in the 0.1 layout")
                if verbosity >= 1:
                    self.stdout.write(
                        f"dry run: {len(found)} of {len(queues)} queues need converting"
                        if found
                        else f"dry run: nothing to convert in {len(queues)} queues"
                    )
                if found:
                    sys.exit(1)
                return
            for queue in queues:
                progress = self._progress if verbosity >= 3 else None
                report = upgrade_queue(store, queue, limit=options["batch"], progress=progress)
                if verbosity >= 2 or (verbosity >= 1 and report.found.found):
                    self.stdout.write(self._line(report))
        except ValueError as exc:  # a bad queue name
            raise CommandError(f"--queues: {exc}", returncode=2) from exc
        except DelayQError as exc:
            raise CommandError(
                f"{exc}; nothing is lost: run delayq_upgrade again, it goes on where it stopped",
                returncode=2,
            ) from exc
        if verbosity >= 1:
            self.stdout.write(f"done: {len(queues)} queues in this version's layout")

    def _progress(self, report: QueueUpgrade) -> None:
        self.stdout.write(f"  {report.queue}: {report.converted} converted so far")

    @staticmethod
    def _line(report: QueueUpgrade) -> str:
        if not report.found.found:
            return f"{report.queue}: nothing in the 0.1 layout"
        kept = f", {report.kept} records that do not decode kept as they are" if report.kept else ""
        return (
            f"{report.queue}: found {report.found.describe()}; converted {report.pending} "
            f"pending, {report.running} in progress (recovery retries them), {report.dead} "
            f"dead, {report.records} records{kept}, {report.orphans} orphaned meta fields "
            "deleted"
        )
