"""``manage.py delayq_worker``: parse options, build a Worker, run it."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from django_delayq.checks import serving
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import DelayQError
from django_delayq.management.parsing import DelayQCommand
from django_delayq.monitoring import health
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.supervised import Supervised
from django_delayq.worker.supervisor import Supervisor, cpu_count

FORCE_HELP = (
    "Serve --queues even if nothing names them yet (not the settings, a registered task, a "
    "live worker, or a job scheduled to it): a queue new on purpose."
)
LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Command(DelayQCommand):
    help = "Run due django-delayq jobs. SIGTERM/SIGINT stops gracefully; a second one at once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--queues",
            default=None,
            help="Comma-separated queues to run (default: DELAYQ['QUEUES']); one nothing "
            "names is refused as a typo, unless --force.",
        )
        parser.add_argument("--force", action="store_true", help=FORCE_HELP)
        parser.add_argument(
            "--concurrency", type=int, default=1, help="Jobs run at once, in threads (default 1)."
        )
        parser.add_argument(
            "--async-concurrency",
            type=int,
            default=0,
            help="Attempts of async def tasks run at once on one event loop (default 0: "
            "they run on the --concurrency threads, one per thread).",
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
        parser.add_argument(
            "--processes",
            default=None,
            help="Run N worker processes ('auto': one per core) under a supervisor that "
            "restarts them; each has --concurrency threads (default: this process only).",
        )
        parser.add_argument(
            "--max-jobs",
            type=int,
            default=None,
            help="Replace a worker process after it has run this many jobs (implies a supervisor).",
        )
        parser.add_argument(
            "--max-memory",
            type=megabytes,
            default=None,
            metavar="MB",
            help="Replace a worker process whose resident memory is above this many MB (or "
            "with a unit: 512MB, 1.5GB; binary, as the resident size is measured), once its "
            "running jobs finish (implies a supervisor).",
        )
        # Given by the supervisor to its children only.
        parser.add_argument("--supervisor-pid", type=int, default=None, help=argparse.SUPPRESS)

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
        if options["async_concurrency"] < 0:
            raise CommandError(
                f"--async-concurrency must be 0 or more, got {options['async_concurrency']}"
            )
        processes = _processes(options["processes"])
        limits = _limits(options)
        if options["supervisor_pid"] is None:  # the supervisor's children: checked by it
            _check_queues(queues or [], options["force"])
        if options["supervisor_pid"] is None and (processes is not None or limits):
            code = self._supervise(processes or 1, options)
            if code:
                sys.exit(code)
            return
        try:
            worker = Worker(
                queues,
                concurrency=options["concurrency"],
                async_concurrency=options["async_concurrency"],
                burst=options["burst"],
                shutdown_timeout=options["shutdown_timeout"],
                name=options["name"],
                relay=not options["no_relay"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        child = None
        if options["supervisor_pid"] is not None:
            child = Supervised(
                worker, options["supervisor_pid"], options["max_jobs"], options["max_memory"]
            )
            child.start()
        code = _run(worker, child)
        if code:
            sys.exit(code)

    def _supervise(self, processes: int, options: dict[str, Any]) -> int:
        """Run ``processes`` children of this command under a Supervisor (supervisor.py)."""
        module = getattr(settings, "SETTINGS_MODULE", None)
        if not module:
            raise CommandError(
                "--processes, --max-jobs and --max-memory start worker processes with "
                "DJANGO_SETTINGS_MODULE: settings.configure() cannot be passed on"
            )
        argv = ["--concurrency", str(options["concurrency"]), "-v", str(options["verbosity"])]
        if options["async_concurrency"]:
            argv += ["--async-concurrency", str(options["async_concurrency"])]
        if options["queues"]:
            argv += ["--queues", options["queues"]]
        for flag in ("burst", "no_relay", "traceback"):
            if options.get(flag):
                argv.append("--" + flag.replace("_", "-"))
        for option in ("shutdown_timeout", "max_jobs", "max_memory", "pythonpath"):
            if options.get(option) is not None:
                argv += ["--" + option.replace("_", "-"), str(options[option])]
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": module}
        # The project's directory (manage.py's, or the current one) is on sys.path[0].
        if sys.path and sys.path[0]:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (sys.path[0], os.environ.get("PYTHONPATH")) if p
            )
        timeout = options["shutdown_timeout"]
        supervisor = Supervisor(
            processes,
            argv,
            name=options["name"] or f"{socket.gethostname()}:{os.getpid()}",
            burst=options["burst"],
            shutdown_timeout=float(
                delayq_settings.SHUTDOWN_TIMEOUT if timeout is None else timeout
            ),
            env=env,
        )
        return supervisor.run()

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_delayq")
        logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(self.stdout._out)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)


MEMORY = re.compile(r"(?P<number>[0-9]*\.?[0-9]+)\s*(?P<unit>[mg]i?b?)?", re.IGNORECASE)


def megabytes(value: str) -> float:
    """--max-memory in MB: a number (MB), or with a unit M, MB, MiB, G, GB or GiB (binary:
    1 GB is 1024 MB, as resident_mb() measures)."""
    found = MEMORY.fullmatch(value.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a size: give MB (--max-memory 512) or a unit (512MB, 1.5GB)"
        )
    unit = (found["unit"] or "m")[0].lower()
    return float(found["number"]) * (1024 if unit == "g" else 1)


def _processes(option: str | None) -> int | None:
    """--processes as a number, None when not given."""
    if option is None:
        return None
    if option.strip().lower() == "auto":
        return cpu_count()
    try:
        processes = int(option)
    except ValueError:
        processes = 0
    if processes < 1:
        raise CommandError(f"--processes must be a number >= 1 or 'auto', got {option!r}")
    return processes


def _queues(option: str | None) -> list[str] | None:
    """--queues as a list, None when not given."""
    if not option:
        return None
    return [q.strip() for q in option.split(",") if q.strip()]


def _check_queues(queues: list[str], force: bool) -> None:
    """CommandError for an invalid queue name, or (unless ``force``) one nothing names: a
    misspelt --queues must not start a worker that serves a queue no job goes to. Refused
    here, not by N children of a supervisor dying at start."""
    try:
        for queue in queues:
            check_queue_name(queue)
        if not force:
            health.check_known_queues(get_store(), queues)
    except DelayQError as exc:
        raise CommandError(
            f"cannot check --queues against the queues Redis knows: {exc} (--force starts "
            "without checking)"
        ) from exc
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def _limits(options: dict[str, Any]) -> bool:
    """Whether --max-jobs or --max-memory is given (each checked: CommandError if bad)."""
    if options["max_jobs"] is not None and options["max_jobs"] < 1:
        raise CommandError(f"--max-jobs must be at least 1, got {options['max_jobs']}")
    if options["max_memory"] is not None and not options["max_memory"] > 0:
        raise CommandError(
            f"--max-memory must be a positive number of MB, got {options['max_memory']:g}"
        )
    return options["max_jobs"] is not None or options["max_memory"] is not None


def _run(worker: Worker, child: Supervised | None) -> int:
    """Run the worker with SIGTERM / SIGINT handlers (graceful, then forced); its exit code."""

    def on_signal(signum: int, frame: Any) -> None:
        logging.getLogger("django_delayq.worker").warning(
            "received %s: %s",
            signal.Signals(signum).name,
            "stopping now"
            if (worker.stopping if child is None else child.signalled)
            else "finishing running jobs, then stopping",
        )
        # request_stop sets Events; a handler runs between two bytecodes of the main
        # thread, which may hold one of their locks (in Event.clear()), so setting them
        # here could deadlock. Another thread does it.
        stop = worker.request_stop if child is None else child.on_signal
        threading.Thread(target=stop, name="delayq-stop", daemon=True).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = worker.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if child is not None:
        code = child.exit_code(code)
    return code
