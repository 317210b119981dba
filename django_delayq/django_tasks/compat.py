"""django.tasks as the backend (:mod:`django_delayq.backends`) uses it: the imports, and a
Task's result as django-delayq keeps it in Redis and as ``get_result()`` returns it.

The imports come from Django 6.0+'s ``django.tasks``, else from the django-tasks backport
(Django 5.2); without either, importing this module (and so the backend) raises ImportError.

A result is one JSON document per result id (``store.result_key``), format 1::

    {"v": 1, "task": <module path>, "spec": <the Task's options>, "args": [...],
     "kwargs": {...}, "status": "READY"|"RUNNING"|"FAILED"|"SUCCESSFUL",
     "enqueued_at", "started_at", "finished_at", "last_attempted_at": <epoch> or null,
     "worker_ids": [...], "errors": [{"exception_class_path", "traceback"}, ...],
     "return_value": ... (once SUCCESSFUL)}

It is replaced whole at every change (:mod:`django_delayq.django_tasks.attempts`), and turned into
the ``TaskResult`` Django's API returns by :func:`task_result`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from django_delayq.conf import delayq_settings
from django_delayq.jobs.arguments import dumps
from django_delayq.jobs.ids import id_timestamp

try:  # Django 6.0+
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2 with the django-tasks backport
    try:
        from django_tasks import task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:
        raise ImportError(
            "django_delayq.backends needs django.tasks (Django 6.0+) or, on Django 5.2, the "
            "django-tasks backport: pip install 'django-delayq[tasks]'"
        ) from exc

__all__ = [
    "RESULT_FORMAT",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "as_datetime",
    "decode_state",
    "encode_state",
    "epoch",
    "new_state",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_from_spec",
    "task_result",
    "task_spec",
    "task_started",
    "with_error",
]

RESULT_FORMAT = 1


def task_spec(task: Task, alias: str) -> dict[str, Any]:
    """The options a Task was enqueued with, as the job's arguments carry them."""
    run_after = task.run_after.isoformat() if task.run_after is not None else None
    return {
        "backend": alias,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": run_after,
    }


def task_from_spec(path: str, spec: dict, alias: str) -> Task:
    """The ``django.tasks`` Task at ``path`` with the options it was enqueued with, on the
    backend ``alias``. Refuses anything but a Task (decorated with ``@task``)."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"cannot import the task {path!r}: {exc}") from exc
    if not isinstance(found, Task) or found.module_path != path:
        raise InvalidTask(f"{path!r} is not a django.tasks Task (decorated with @task)")
    run_after = spec.get("run_after")
    return replace(
        found,
        backend=alias,
        queue_name=spec.get("queue_name", found.queue_name),
        priority=spec.get("priority", found.priority),
        run_after=None if run_after is None else datetime.fromisoformat(run_after),
    )


def new_state(job_id: str, path: str, args: list, kwargs: dict, spec: dict) -> dict[str, Any]:
    """A READY result document; enqueued_at is the job id's (ULID) time."""
    return {
        "v": RESULT_FORMAT,
        "task": path,
        "spec": spec,
        "args": args,
        "kwargs": kwargs,
        "status": TaskResultStatus.READY.value,
        "enqueued_at": id_timestamp(job_id),
        "started_at": None,
        "finished_at": None,
        "last_attempted_at": None,
        "worker_ids": [],
        "errors": [],
    }


def encode_state(state: dict[str, Any]) -> bytes:
    return dumps(state).encode()


def decode_state(raw: bytes) -> dict[str, Any]:
    """A result document; ValueError naming a result that is not one (of this format)."""
    try:
        state = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        state = None
    if not isinstance(state, dict) or state.get("v") != RESULT_FORMAT:
        raise ValueError(f"unreadable django.tasks result: {bytes(raw)[:80]!r}")
    return state


def with_error(state: dict[str, Any], error: dict[str, str]) -> list[dict[str, str]]:
    """The result's errors with ``error`` appended, the oldest dropped past MAX_ERRORS_KEPT."""
    return [*state.get("errors", []), error][-int(delayq_settings.MAX_ERRORS_KEPT) :]


def task_result(task: Task, result_id: str, state: dict[str, Any]) -> TaskResult:
    """The ``TaskResult`` a result document describes."""
    result = TaskResult(
        task=task,
        id=result_id,
        status=TaskResultStatus(state["status"]),
        enqueued_at=as_datetime(state.get("enqueued_at")),
        started_at=as_datetime(state.get("started_at")),
        finished_at=as_datetime(state.get("finished_at")),
        last_attempted_at=as_datetime(state.get("last_attempted_at")),
        args=state["args"],
        kwargs=state["kwargs"],
        backend=task.backend,
        errors=[TaskError(**error) for error in state.get("errors", [])],
        worker_ids=list(state.get("worker_ids", [])),
    )
    object.__setattr__(result, "_return_value", state.get("return_value"))
    return result


def as_datetime(epoch: float | None) -> datetime | None:
    """An epoch as Django's timezone.now() would give it: aware UTC, or naive local."""
    if epoch is None:
        return None
    if settings.USE_TZ:
        return datetime.fromtimestamp(epoch, tz=UTC)
    return datetime.fromtimestamp(epoch)


def epoch(when: datetime) -> float:
    """Epoch seconds of ``when``; a naive datetime is in the default time zone."""
    if timezone.is_naive(when):
        when = timezone.make_aware(when, timezone.get_default_timezone())
    return when.timestamp()
