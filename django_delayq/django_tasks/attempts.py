"""A Django Task's attempts inside the worker, and its result kept up to date through them.

:func:`run_attempt` runs one attempt (``run_django_task`` calls it): the result says RUNNING
while it runs, then SUCCESSFUL, READY again (it will be retried) or FAILED (the last
attempt), and Django's ``task_started`` and ``task_finished`` are sent.

A job can also end without ``run_attempt`` seeing it: its worker died on the last attempt,
it was cancelled while pending (:func:`finish_outside_run`: FAILED), a stopping worker
handed it back or its lease was lost with attempts left (:func:`ready_again`: READY). The
backend's job-signal receivers call these.

The backend is passed in, not imported: ``backend.py`` defines it and imports this module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from traceback import format_exception
from typing import Any, Protocol

from asgiref.sync import sync_to_async

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.django_tasks.compat import (
    Task,
    TaskContext,
    TaskResultStatus,
    decode_state,
    encode_state,
    new_state,
    normalize_json,
    task_finished,
    task_from_spec,
    task_result,
    task_started,
    with_error,
)
from django_delayq.jobs.arguments import dumps
from django_delayq.jobs.job import Job
from django_delayq.storage.connection import get_store
from django_delayq.storage.store import Store
from django_delayq.worker.execution import TRACEBACK_LIMIT


class Backend(Protocol):
    """What this module uses of a DelayQBackend."""

    alias: str

    def result_ttl(self, extra: float = 0.0) -> float | None: ...


FINISHED = (TaskResultStatus.FAILED.value, TaskResultStatus.SUCCESSFUL.value)


def load_state(store: Store, job_id: str) -> dict[str, Any] | None:
    """The job's result document, or None when there is none or it cannot be read."""
    found = store.load_result(job_id)
    try:
        return decode_state(found) if found else None
    except ValueError:
        return None


def run_attempt(backend: Backend, job: Job, path: str, args: list, kwargs: dict, spec: dict) -> Any:
    """Run one attempt of a Task inside the worker, keeping its result up to date."""
    store, state, result = _begin(backend, job, path, args, kwargs, spec)
    task = result.task
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        # What get_result() will return; raises for what JSON cannot carry.
        value = json.loads(dumps(normalize_json(value)))
    except BaseException as exc:
        _attempt_failed(store, backend, job, task, state, exc)
        raise
    _succeeded(store, backend, job, task, state, value)
    return value


async def arun_attempt(
    backend: Backend, job: Job, path: str, args: list, kwargs: dict, spec: dict
) -> Any:
    """:func:`run_attempt` for a Task defined with ``async def``, on the worker's event loop
    (worker/aio.py): the result document and Django's signals through ``sync_to_async``
    (in the attempt's thread), the Task awaited."""
    store, state, result = await sync_to_async(_begin)(backend, job, path, args, kwargs, spec)
    task = result.task
    try:
        if task.takes_context:
            context = TaskContext(task_result=result)
            value = await task.func(context, *result.args, **result.kwargs)
        else:
            value = await task.func(*result.args, **result.kwargs)
        value = json.loads(dumps(normalize_json(value)))
    except BaseException as exc:
        await sync_to_async(_attempt_failed)(store, backend, job, task, state, exc)
        raise
    await sync_to_async(_succeeded)(store, backend, job, task, state, value)
    return value


def _begin(
    backend: Backend, job: Job, path: str, args: list, kwargs: dict, spec: dict
) -> tuple[Store, dict[str, Any], Any]:
    """The attempt starts: its result says RUNNING, ``task_started`` is sent. Returns the
    store, the result document and the TaskResult (raises, the failure recorded, when the
    Task cannot be loaded)."""
    store = get_store()
    # Unreadable or expired: start it again. The job is the truth for what to run.
    state = load_state(store, job.id) or new_state(job.id, path, args, kwargs, spec)
    state.update(task=path, spec=spec, args=args, kwargs=kwargs)
    now = time.time()
    state.update(status=TaskResultStatus.RUNNING.value, last_attempted_at=now)
    state.update(finished_at=None, started_at=state.get("started_at") or now)
    state["worker_ids"] = [*state.get("worker_ids", []), job.worker or ""]
    store.save_result(job.id, encode_state(state), backend.result_ttl())
    try:
        task = task_from_spec(path, spec, backend.alias)
        result = task_result(task, job.id, state)
        signals.send(task_started, type(backend), task_result=result)
    except BaseException as exc:
        _attempt_failed(store, backend, job, None, state, exc)
        raise
    return store, state, result


def _succeeded(
    store: Store, backend: Backend, job: Job, task: Task, state: dict[str, Any], value: Any
) -> None:
    """The Task returned ``value`` (as JSON gives it back): SUCCESSFUL, task_finished sent."""
    state.update(status=TaskResultStatus.SUCCESSFUL.value, finished_at=time.time())
    state["return_value"] = value
    store.save_result(job.id, encode_state(state), backend.result_ttl())
    signals.send(task_finished, type(backend), task_result=task_result(task, job.id, state))


def _attempt_failed(
    store: Store,
    backend: Backend,
    job: Job,
    task: Task | None,
    state: dict[str, Any],
    exc: BaseException,
) -> None:
    """The attempt raised ``exc``: FAILED if it was the last, else READY for the retry."""
    kind = type(exc)
    error = {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        "traceback": "".join(format_exception(exc))[-TRACEBACK_LIMIT:],
    }
    state["errors"] = with_error(state, error)
    if not job.will_retry:
        state.update(status=TaskResultStatus.FAILED.value, finished_at=time.time())
        store.save_result(job.id, encode_state(state), backend.result_ttl())
        if task is not None:
            result = task_result(task, job.id, state)
            signals.send(task_finished, type(backend), task_result=result)
    else:
        state["status"] = TaskResultStatus.READY.value
        # Kept at least until the retry, whose backoff is at most 125% of the cap.
        wait = float(delayq_settings.RETRY_BACKOFF_MAX) * 1.25
        store.save_result(job.id, encode_state(state), backend.result_ttl(wait))


def finish_outside_run(
    job: Job, error: dict[str, str], backend_for: Callable[[Any], Backend]
) -> None:
    """A job of run_django_task ended without run_attempt() recording it (its worker died on
    the last attempt, or it was cancelled while pending): make its result FAILED with
    ``error`` and send task_finished, rather than leave it RUNNING or READY until it expires.
    A result already finished is left alone. ``backend_for`` gives the DelayQBackend of an
    alias (``backends._backend``)."""
    store = get_store()
    state = load_state(store, job.id)
    if state is None or state.get("status") in FINISHED:
        return
    backend = backend_for(state["spec"].get("backend"))
    state.update(errors=with_error(state, error), status=TaskResultStatus.FAILED.value)
    state["finished_at"] = time.time()
    store.save_result(job.id, encode_state(state), backend.result_ttl())
    task = task_from_spec(state["task"], state["spec"], backend.alias)
    signals.send(task_finished, type(backend), task_result=task_result(task, job.id, state))


def ready_again(
    job: Job, error: dict[str, str] | None, backend_for: Callable[[Any], Backend]
) -> None:
    """The job waits in pending again (handed back, or recovered with attempts left): its
    result says READY, with the lost attempt's error if there was one."""
    store = get_store()
    state = load_state(store, job.id)
    if state is None or state.get("status") != TaskResultStatus.RUNNING.value:
        return
    if error is not None:
        state["errors"] = with_error(state, error)
    state["status"] = TaskResultStatus.READY.value
    backend = backend_for(state["spec"].get("backend"))
    store.save_result(job.id, encode_state(state), backend.result_ttl())
