"""Sentry (optional): a job's death as one Sentry event with the job as context, and the
check-ins of recurring schedules (sentry_crons.py).

Nothing here runs unless ``sentry_sdk`` was imported when the app loaded (apps.py calls
:func:`connect` only then: ``sentry_sdk.init()`` in settings.py, as Sentry's Django guide
says), and every receiver returns at once while Sentry's client is not active, so a project
without Sentry pays nothing and one with Sentry installed but not initialised pays one call
per failure. ``sentry_sdk`` itself is never imported by this module.

Which failures are sent is ``DELAYQ["SENTRY_FAILURES"]``: ``"dead"`` (the default) sends one
event when a job is moved to the dead-letter set, whoever moved it (the worker that ran its
last attempt, or the recovery of another worker after a crash); ``"all"`` sends every failed
attempt too (a retried one as a warning); ``None`` sends none. One death is one event: the
job_dead signal is sent once per death (the script that dead-letters a job decides it once),
and the worker's own ERROR log line of that death, which Sentry's logging integration would
send as a second event, is dropped (:func:`drop_death_lines`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from types import ModuleType
from typing import Any

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.django_tasks.runner import shown_call
from django_delayq.monitoring import sentry_crons
from django_delayq.monitoring.sentry_client import sdk
from django_delayq.recurring import known
from django_delayq.recurring.ids import parse_occurrence_id
from django_delayq.worker.execution import CORRUPT_LINE, FAILED_LINE

logger = logging.getLogger("django_delayq.sentry")

DEAD, ALL = "dead", "all"
WORKER_LOGGER = "django_delayq.worker"
DEATH_LINES = (FAILED_LINE, CORRUPT_LINE)
STASH_SIZE = 1000  # final failures whose death is not confirmed yet (normally one round trip)
TEXT_LIMIT = 8000  # characters of a traceback text put in the event's context

# (job id, attempt) -> (exception, traceback text) of a last attempt that failed, from
# job_failed (a runner thread or the event loop) to job_dead (the dispatcher's thread, once
# Redis dead-lettered the job): the exception keeps its frames for the event's stack trace.
_stash: OrderedDict[tuple[str, int], tuple[BaseException, str]] = OrderedDict()
_lock = threading.Lock()
_connected = False


def connect() -> bool:
    """Connect the receivers (once) when ``sentry_sdk`` is imported; whether they are. Call
    it after ``sentry_sdk.init()`` in a process that initialises Sentry after Django loaded
    its apps."""
    global _connected
    module = sys.modules.get("sentry_sdk")
    if _connected or module is None:
        return _connected
    from sentry_sdk.scope import add_global_event_processor

    signals.hook(signals.job_failed, on_failed)
    signals.job_dead.connect(on_dead, dispatch_uid="delayq-sentry-dead", weak=False)
    sentry_crons.connect()
    add_global_event_processor(drop_death_lines)
    _connected = True
    return True


def on_failed(
    sender: Any, job: Any, exception: BaseException, traceback: str = "", **kwargs: Any
) -> None:
    """A failed attempt (a hook: may run on the worker's event loop, so no query and no
    Redis here): the last one is kept for its death, another is sent with ``"all"``."""
    mode = delayq_settings.SENTRY_FAILURES
    module = sdk() if mode is not None else None
    if module is None:
        return
    if not kwargs.get("will_retry", False):
        with _lock:
            _stash[(job.id, job.attempts)] = (exception, traceback)
            while len(_stash) > STASH_SIZE:
                _stash.popitem(last=False)
    elif mode == ALL:
        report(module, job, exception, traceback, f"{type(exception).__name__}: {exception}")


def on_dead(sender: Any, job: Any, error: str = "", **kwargs: Any) -> None:
    """The job was moved to the dead-letter set (the dispatcher's or the recovery's thread,
    never an event loop): one event, with the last attempt's exception when this worker ran
    it, else a message (a lease that expired on the last attempt, a corrupt record)."""
    with _lock:
        found = _stash.pop((job.id, job.attempts), None)
    mode = delayq_settings.SENTRY_FAILURES
    module = sdk() if mode is not None else None
    if module is None:
        return
    exception, text = found if found is not None else (None, "")
    report(module, job, exception, text, error or "", final=True)


def report(
    module: ModuleType,
    job: Any,
    exception: BaseException | None,
    text: str,
    error: str,
    final: bool = False,
) -> None:
    """Send one event about ``job``: the exception with its stack when it has one, else a
    message naming the error (grouped by task and error type, not by job)."""
    from sentry_sdk.utils import event_from_exception

    client = module.get_client()
    context = job_context(job, final, client.should_send_default_pii())
    task = context["task"]
    with_stack = exception is not None and exception.__traceback__ is not None
    if text and not with_stack:  # a timeout's: the runner thread's stack, as text
        context["traceback"] = text[-TEXT_LIMIT:]
    with module.new_scope() as scope:
        scope.set_context("delayq", context)
        scope.set_tag("delayq.task", task)
        scope.set_tag("delayq.queue", job.queue)
        if context.get("schedule"):
            scope.set_tag("delayq.schedule", context["schedule"])
        if with_stack:
            event, hint = event_from_exception(
                exception,
                client_options=client.options,
                mechanism={"type": "django_delayq", "handled": False},
            )
            event["level"] = "error" if final else "warning"
        else:
            kind = type(exception).__name__ if exception is not None else error.split(":")[0]
            scope.fingerprint = ["django-delayq", "dead" if final else "failed", task, kind]
            what = "moved to the dead-letter set" if final else "failed, will retry"
            event = {
                "level": "error" if final else "warning",
                "logentry": {"message": f"job of %s {what}: %s", "params": [task, error]},
            }
            hint = {}
        event["transaction"] = task
        module.capture_event(event, hint=hint)


def job_context(job: Any, final: bool, pii: bool) -> dict[str, Any]:
    """The job as the event's ``delayq`` context. On the dead path only (a thread, not an
    event loop) its schedule may cost a query and its batch one HGET."""
    # A Django Task's own path and arguments, not the runner's; a corrupt record names none.
    task, args, kwargs = shown_call(job.task or "(unknown task)", job.args, job.kwargs)
    context: dict[str, Any] = {
        "job_id": job.id,
        "task": task,
        "queue": job.queue,
        "attempt": job.attempts,
        "max_retries": job.max_retries,
        "final": final,
        "worker": job.worker,
        "schedule": known_schedule(job.id),
    }
    if final and context["schedule"] is None and job.fire_time is not None:
        try:
            context["schedule"] = job.schedule  # a query when no pass saw it here
        except Exception as exc:  # the database away: the event still goes
            logger.debug("job %s: no schedule name for Sentry (%s)", job.id, exc)
    if job.fire_time is not None:
        context["fire_time"] = job.fire_time.isoformat()
    if final:
        try:
            context["batch"] = job.batch_id
        except Exception as exc:  # Redis away: the event still goes
            logger.debug("job %s: no batch id for Sentry (%s)", job.id, exc)
    if pii:  # send_default_pii=True: arguments may hold personal data
        context["args"], context["kwargs"] = args, kwargs
    return context


def known_schedule(job_id: str) -> str | None:
    """The schedule of an occurrence as this process's last reconcile pass saw it (no
    query: safe on an event loop); None for any other job or one not seen."""
    parsed = parse_occurrence_id(job_id)
    entry = known.known(parsed[1]) if parsed is not None else None
    return entry.name if entry is not None else None


def drop_death_lines(event: Any, hint: Any) -> Any:
    """A global event processor: drop the event Sentry's logging integration makes of the
    worker's ERROR line about a job's death, which :func:`on_dead` reports already."""
    record = hint.get("log_record") if isinstance(hint, dict) else None
    if record is None or record.name != WORKER_LOGGER or record.levelno < logging.ERROR:
        return event
    if record.msg in DEATH_LINES and delayq_settings.SENTRY_FAILURES is not None:
        return None
    return event
