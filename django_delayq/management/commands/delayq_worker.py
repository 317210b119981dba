"""``manage.py delayq_worker``: parse options, build a Worker, run it."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_delayq.checks import serving
from django_delayq.worker import Worker

LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Command(BaseCommand):
    help = "Run due django-delayq jobs. SIGTERM/SIGINT stops gracefully; a second one at once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--queues",
            default=None,
            help="Comma-separated queues to run (default: DELAYQ['QUEUES']).",
        )
        parser.add_argument(
            "--concurrency", type=int, default=1, help="Jobs run at once, in threads (default 1)."
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Run until nothing is due, then exit 0 (2 if Redis stays unreachable for 10 s).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=None,
            help="Seconds running jobs get after SIGTERM (default: setting).",
        )
        parser.add_argument("--name", default=None, help="Worker name shown in the admin.")
        parser.add_argument(
            "--no-relay",
            action="store_true",
            help="Do not move jobs from the database outbox into Redis (on_commit jobs whose "
            "fast path failed, jobs beyond DELAYQ['HORIZON']): some other worker must.",
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        # The system checks run before handle(): they know the queues this worker serves,
        # so a queue only --queues covers draws no warning (delayq.W101).
        with serving(_queues(options.get("queues")) or ()):
            return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(options["verbosity"])
        queues = _queues(options["queues"])
        if options["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        try:
            worker = Worker(
                queues,
                concurrency=options["concurrency"],
                burst=options["burst"],
                shutdown_timeout=options["shutdown_timeout"],
                name=options["name"],
                relay=not options["no_relay"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc

        def on_signal(signum: int, frame: Any) -> None:
            logging.getLogger("django_delayq.worker").warning(
                "received %s: %s",
                signal.Signals(signum).name,
                "stopping now" if worker.stopping else "finishing running jobs, then stopping",
            )
            # request_stop sets Events; a handler runs between two bytecodes of the main
            # thread, which may hold one of their locks (in Event.clear()), so setting them
            # here could deadlock. Another thread does it.
            threading.Thread(target=worker.request_stop, name="delayq-stop", daemon=True).start()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = worker.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if code:
            sys.exit(code)

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_delayq")
        logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(self.stdout._out)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)


def _queues(option: str | None) -> list[str] | None:
    """--queues as a list, None when not given."""
    if not option:
        return None
    return [q.strip() for q in option.split(",") if q.strip()]
