"""``manage.py delayq_queue pause|resume|status QUEUE...``: queue control from a shell.

Thin: :mod:`django_delayq.scheduling.pausing` does the work.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from django_delayq.exceptions import DelayQError
from django_delayq.management.parsing import DelayQCommand
from django_delayq.monitoring import health
from django_delayq.scheduling import pausing as control
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name

HELP = """Pause or resume queues, or show whether they are paused.

pause: no worker claims the queue's jobs until it is resumed (within one claim round trip;
the state lives in Redis and survives worker restarts). Jobs can still be scheduled; jobs
running finish and are acknowledged. resume: claims start again at once (workers are woken).
status: 'paused' or 'running' per queue. A queue nothing names (not in the settings, no
registered task's, no live worker's, never scheduled to, not paused) is refused, as a
typo: --force acts on it all the same (a queue that is new on purpose)."""


class Command(DelayQCommand):
    help = HELP
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action", choices=("pause", "resume", "status"))
        parser.add_argument("queues", nargs="+", metavar="QUEUE")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Act on a queue nothing names yet (default: refuse it, as a typo).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            queues = [check_queue_name(q) for q in options["queues"]]
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        action = options["action"]
        try:
            if not options["force"]:  # a paused queue is real: resume it, show it
                unsure = [q for q in queues if action == "pause" or not control.is_paused(q)]
                health.check_known_queues(get_store(), unsure)
            for queue in queues:
                if action == "pause":
                    changed = control.pause(queue)
                    self.stdout.write(f"{queue}: paused" + ("" if changed else " (already)"))
                elif action == "resume":
                    changed = control.resume(queue)
                    self.stdout.write(
                        f"{queue}: resumed" + ("" if changed else " (was not paused)")
                    )
                else:
                    state = "paused" if control.is_paused(queue) else "running"
                    self.stdout.write(f"{queue}: {state}")
        except DelayQError as exc:
            raise CommandError(f"cannot reach Redis: {exc}") from exc
        except ValueError as exc:  # an unknown queue
            raise CommandError(str(exc)) from exc
