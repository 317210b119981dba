"""A ``django.tasks`` backend that runs Django's ``@task`` functions on django-delayq.

::

    TASKS = {
        "default": {
            "BACKEND": "django_delayq.backends.DelayQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"RESULT_TTL": 86400, "MAX_RETRIES": 0},
        }
    }

How it works: ``enqueue()`` stores one django-delayq job of the internal task
``django_delayq.backends.run_django_task`` in the queue named by the Task's ``queue_name``
(due at ``run_after``, else now). Its arguments are the Task's module path, its
arguments, and the Task's options, so the job shows in the admin like any other, and the
job id is the result id. ``manage.py delayq_worker`` runs it: the internal task imports
the Task by its module path, refuses anything that is not a ``django.tasks`` Task of a
DelayQBackend alias (the allow-list), runs it, and keeps its result.

Results: one JSON document per result (``store.result_key``: found by the result id alone,
whatever the queue), replaced whole at every change and expiring ``RESULT_TTL`` seconds after
the last one (longer while the task is deferred or waiting for a retry), so ``get_result()``
works from any process.

Retries: ``OPTIONS["MAX_RETRIES"]`` (default 0, Django's one attempt) failed attempts
are retried with DELAYQ's backoff. Between attempts the status is READY again, every
attempt appends its worker to ``worker_ids`` (``attempts == len(worker_ids)``) and every
failure its ``TaskError``; FAILED is set only by the last attempt. A job a stopping worker
hands back, or one recovered from a dead worker with attempts left, is READY again.

Priority is not supported (``supports_priority = False``, so Django refuses a Task whose
priority is not 0): django-delayq orders jobs by due time only; use a separate queue and
worker for urgent work. Signals ``task_enqueued``, ``task_started`` (every attempt) and
``task_finished`` (the final outcome) are sent with ``sender=DelayQBackend`` like Django's
ImmediateBackend, through ``send_robust``: a failing receiver is logged, never fatal.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from traceback import format_exception
from typing import Any

from django.conf import settings
from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from . import signals
from .api import LATEST_DUE
from .checks import served
from .conf import delayq_settings
from .connection import get_store
from .exceptions import ConfigurationError, LeaseLost
from .execution import TRACEBACK_LIMIT, current_job
from .job import (
    FLAG_TOMBSTONE,
    IN_DATABASE,
    PENDING,
    Fields,
    Job,
    dumps,
    encode_record,
    id_timestamp,
    make_job,
    new_job_id,
)
from .registry import task as delayq_task
from .store import DONE_TTL, check_queue_name
from .wording import DJANGO_TASK_RUNNER

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

__all__ = ["DelayQBackend", "run_django_task"]

INTERNAL_TASK = DJANGO_TASK_RUNNER  # the name @task registers run_django_task under
RESULT_FORMAT = 1
DAY = 24 * 60 * 60
OPTION_DEFAULTS: dict[str, Any] = {
    # Seconds a result is kept after its last change; None keeps it until deleted.
    "RESULT_TTL": DAY,
    # Retries after the first attempt (0: Django's single attempt).
    "MAX_RETRIES": 0,
}
RESULT_ID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")  # a job id (ULID)


def option_problems(options: Any) -> list[str]:
    """What is wrong with a DelayQBackend's OPTIONS, one sentence per problem."""
    if not isinstance(options, dict):
        return [f"OPTIONS must be a dict, got {options!r}"]
    problems = [
        f"OPTIONS has the unknown key {name!r} (known: {', '.join(OPTION_DEFAULTS)})"
        for name in sorted(set(options) - set(OPTION_DEFAULTS))
    ]
    ttl = options.get("RESULT_TTL", DAY)
    number = isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and math.isfinite(ttl)
    if ttl is not None and not (number and ttl > 0):
        problems.append(f"OPTIONS['RESULT_TTL'] must be seconds > 0 or None, got {ttl!r}")
    retries = options.get("MAX_RETRIES", 0)
    if type(retries) is not int or retries < 0:
        problems.append(f"OPTIONS['MAX_RETRIES'] must be an int >= 0, got {retries!r}")
    return problems


class DelayQBackend(BaseTaskBackend):
    """Runs ``django.tasks`` Tasks through django-delayq's Redis queues and worker.

    Supports ``run_after`` (deferred to the due time), coroutine functions, results from
    any process, ``takes_context`` (``context.attempt`` is the attempt number) and
    retries (``OPTIONS["MAX_RETRIES"]``). Priority is not supported (see the module).
    Constructing the backend does no I/O: Redis is reached on the first enqueue or read.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        # Problems are reported by check() and raised by the first enqueue, not here:
        # Django builds backends while importing the modules that define tasks.
        self._problems = option_problems(self.options)

    # -- configuration --------------------------------------------------------

    def option(self, name: str) -> Any:
        if self._problems:
            raise ConfigurationError(f"TASKS[{self.alias!r}]: {self._problems[0]}")
        return self.options.get(name, OPTION_DEFAULTS[name])

    def result_ttl(self, extra: float = 0.0) -> float | None:
        ttl = self.option("RESULT_TTL")
        return None if ttl is None else float(ttl) + max(extra, 0.0)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = [
            checks.Error(f"TASKS[{self.alias!r}]: {problem}.", id="delayq.E101")
            for problem in self._problems
        ]
        for queue in sorted(self.queues):
            try:
                check_queue_name(queue)
            except ValueError as exc:
                messages.append(checks.Error(f"TASKS[{self.alias!r}]: {exc}.", id="delayq.E102"))
                continue
            if not served(queue):
                messages.append(
                    checks.Warning(
                        f"TASKS[{self.alias!r}] allows queue {queue!r}, which is not in "
                        "DELAYQ['QUEUES']: workers started without --queues will not run it.",
                        hint=f"Add {queue!r} to DELAYQ['QUEUES'], or run a worker with "
                        f"--queues {queue}.",
                        id="delayq.W101",
                    )
                )
        return messages

    # -- the backend contract -------------------------------------------------

    def validate_task(self, task: Task) -> None:
        run_after = task.run_after
        if run_after is not None and not isinstance(run_after, datetime):
            hint = " (timezone.now() + timedelta(...))" if isinstance(run_after, timedelta) else ""
            raise InvalidTask(
                f"run_after must be a datetime{hint}, got {type(run_after).__name__} {run_after!r}."
            )
        super().validate_task(task)
        if run_after is not None and _epoch(run_after) >= LATEST_DUE.timestamp():
            raise InvalidTask(
                f"run_after={run_after!r} is too far ahead: django-delayq keeps due times "
                "before 2200."
            )
        try:
            check_queue_name(task.queue_name)
        except ValueError as exc:
            raise InvalidTask(f"{exc}.") from None

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        job_id = new_job_id()
        # TaskResult applies Django's normalize_json (tuples become lists, and so on);
        # encode_record then refuses what would not come back equal from JSON.
        result = TaskResult(
            task=task,
            id=job_id,
            status=TaskResultStatus.READY,
            enqueued_at=_datetime(id_timestamp(job_id)),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        encode_record(task.module_path, result.args, result.kwargs)
        spec = _task_spec(task, self.alias)
        max_retries = self.option("MAX_RETRIES")
        job_args = [task.module_path, result.args, result.kwargs, spec]
        due_in = 0.0
        when: dict[str, float] = {"delay": 0.0}
        if task.run_after is not None:
            when = {"at": _epoch(task.run_after)}
            due_in = when["at"] - time.time()
        horizon = delayq_settings.HORIZON
        far = horizon is not None and due_in > horizon
        flags = FLAG_TOMBSTONE if far or due_in < DONE_TTL + 3600 else ""
        record = encode_record(INTERNAL_TASK, job_args, {}, None, max_retries, flags)
        state = _new_state(job_id, task.module_path, result.args, result.kwargs, spec)
        store = get_store()
        if far:  # the job waits in the database outbox; its READY result is in Redis
            return self._enqueue_row(task, result, job_id, record, state, due_in, job_args)
        scheduled = store.schedule_with_result(
            task.queue_name, job_id, record, _encode(state), self.result_ttl(due_in), **when
        )
        job = make_job(
            job_id,
            task.queue_name,
            PENDING,
            Fields(INTERNAL_TASK, job_args, {}, None, max_retries),
            max_retries,
            score=scheduled.due_at,
            outcome="created",
        )
        signals.send(signals.job_scheduled, run_django_task, job=job)
        signals.send(task_enqueued, type(self), task_result=result)
        return result

    def _enqueue_row(
        self,
        task: Task,
        result: TaskResult,
        job_id: str,
        record: bytes,
        state: dict[str, Any],
        due_in: float,
        job_args: list,
    ) -> TaskResult:
        """A Task due beyond DELAYQ["HORIZON"]: its result (READY) is saved in Redis first,
        then the job is an outbox row that workers relay as it comes within the horizon."""
        from . import outbox

        get_store().save_result(job_id, _encode(state), self.result_ttl(due_in))
        now = time.time()
        due = now + due_in
        row = outbox.Row(job_id, task.queue_name, due, record, delay=due_in)
        relay_in = outbox.When(due_in - float(delayq_settings.HORIZON))  # the database's clock
        outbox.save(outbox.write_alias(), row, relay_in, now)
        max_retries = self.option("MAX_RETRIES")
        fields = Fields(INTERNAL_TASK, job_args, {}, None, max_retries)
        job = make_job(
            job_id,
            task.queue_name,
            PENDING,
            fields,
            max_retries,
            score=due,
            outcome="created",
            waits_in=IN_DATABASE,
        )
        signals.send(signals.job_scheduled, run_django_task, job=job)
        signals.send(task_enqueued, type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        if not isinstance(result_id, str) or not RESULT_ID.match(result_id):
            raise TaskResultDoesNotExist(result_id)
        found = get_store().load_result(result_id)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        state = _decode(found)  # ValueError naming an unreadable result
        return _task_result(_load_task(state["task"], state["spec"]), result_id, state)

    # -- the worker side (called by run_django_task) --------------------------

    def run(self, job: Job, path: str, args: list, kwargs: dict, spec: dict) -> Any:
        """Run one attempt of a Task inside the worker, keeping its result up to date."""
        store = get_store()
        found = store.load_result(job.id)
        try:
            state = _decode(found) if found else None
        except ValueError:
            state = None  # unreadable: start it again, like one that expired
        state = state or _new_state(job.id, path, args, kwargs, spec)
        state.update(task=path, spec=spec, args=args, kwargs=kwargs)  # the job is the truth
        now = time.time()
        state.update(status=TaskResultStatus.RUNNING.value, last_attempted_at=now)
        state.update(finished_at=None, started_at=state.get("started_at") or now)
        state["worker_ids"] = [*state.get("worker_ids", []), job.worker or ""]
        store.save_result(job.id, _encode(state), self.result_ttl())
        task = None
        try:
            task = _load_task(path, spec)
            result = _task_result(task, job.id, state)
            signals.send(task_started, type(self), task_result=result)
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
            else:
                value = task.call(*result.args, **result.kwargs)
            # What get_result() will return; raises for what JSON cannot carry.
            value = json.loads(dumps(normalize_json(value)))
        except BaseException as exc:
            final = not job.will_retry
            kind = type(exc)
            error = {
                "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
                "traceback": "".join(format_exception(exc))[-TRACEBACK_LIMIT:],
            }
            errors = [*state.get("errors", []), error][-int(delayq_settings.MAX_ERRORS_KEPT) :]
            state["errors"] = errors
            if final:
                state.update(status=TaskResultStatus.FAILED.value, finished_at=time.time())
                store.save_result(job.id, _encode(state), self.result_ttl())
                if task is not None:
                    result = _task_result(task, job.id, state)
                    signals.send(task_finished, type(self), task_result=result)
            else:
                state["status"] = TaskResultStatus.READY.value
                # Kept at least until the retry, whose backoff is at most 125% of the cap.
                wait = float(delayq_settings.RETRY_BACKOFF_MAX) * 1.25
                store.save_result(job.id, _encode(state), self.result_ttl(wait))
            raise
        state.update(status=TaskResultStatus.SUCCESSFUL.value, finished_at=time.time())
        state["return_value"] = value
        store.save_result(job.id, _encode(state), self.result_ttl())
        signals.send(task_finished, type(self), task_result=_task_result(task, job.id, state))
        return value


@delayq_task(name=INTERNAL_TASK)
def run_django_task(path: str, args: list, kwargs: dict, spec: dict) -> Any:
    """The django-delayq task that runs a ``django.tasks`` Task (enqueued by DelayQBackend).

    Only a module path naming a ``django.tasks`` Task, on an alias configured with a
    DelayQBackend in this process, is run.
    """
    job = current_job()
    if job is None:
        raise RuntimeError(f"{INTERNAL_TASK} runs only inside a django-delayq worker")
    return _backend(spec.get("backend")).run(job, path, args, kwargs, spec)


def _finish_outside_run(job: Job, error: dict[str, str]) -> None:
    """A job of run_django_task ended without run() recording it (its worker died on the
    last attempt, or it was cancelled while pending): make its result FAILED with
    ``error`` and send task_finished, rather than leave it RUNNING or READY until it expires.
    A result run() already finished is left alone."""
    store = get_store()
    found = store.load_result(job.id)
    if found is None:
        return
    try:
        state = _decode(found)
    except ValueError:
        return
    finished = (TaskResultStatus.FAILED.value, TaskResultStatus.SUCCESSFUL.value)
    if state.get("status") in finished:
        return
    backend = _backend(state["spec"].get("backend"))
    errors = [*state.get("errors", []), error][-int(delayq_settings.MAX_ERRORS_KEPT) :]
    state.update(errors=errors, status=TaskResultStatus.FAILED.value, finished_at=time.time())
    store.save_result(job.id, _encode(state), backend.result_ttl())
    task = _load_task(state["task"], state["spec"])
    signals.send(task_finished, type(backend), task_result=_task_result(task, job.id, state))


def _on_job_dead(sender: Any, job: Job, error: str, **kwargs: Any) -> None:
    last = job.errors[-1] if job.errors else {}
    path = str(last.get("type") or "django_delayq.exceptions.LeaseLost")
    text = str(last.get("traceback") or last.get("message") or error)
    _finish_outside_run(job, {"exception_class_path": path, "traceback": text})


def _on_job_cancelled(sender: Any, job: Job, **kwargs: Any) -> None:
    message = f"django_delayq.exceptions.JobCancelled: job {job.id} was cancelled before it ran"
    _finish_outside_run(
        job, {"exception_class_path": "django_delayq.exceptions.JobCancelled", "traceback": message}
    )


def _ready_again(job: Job, error: dict[str, str] | None) -> None:
    """The job waits in pending again (handed back, or recovered with attempts left): its
    result says READY, with the lost attempt's error if there was one."""
    store = get_store()
    found = store.load_result(job.id)
    try:
        state = _decode(found) if found else None
    except ValueError:
        return
    if state is None or state.get("status") != TaskResultStatus.RUNNING.value:
        return
    if error is not None:
        kept = int(delayq_settings.MAX_ERRORS_KEPT)
        state["errors"] = [*state.get("errors", []), error][-kept:]
    state["status"] = TaskResultStatus.READY.value
    backend = _backend(state["spec"].get("backend"))
    store.save_result(job.id, _encode(state), backend.result_ttl())


def _on_job_released(sender: Any, job: Job, **kwargs: Any) -> None:
    _ready_again(job, None)


def _on_job_failed(
    sender: Any, job: Job, exception: BaseException, will_retry: bool, **kw: Any
) -> None:
    if isinstance(exception, LeaseLost) and will_retry:  # run() never saw this attempt end
        path = "django_delayq.exceptions.LeaseLost"
        _ready_again(job, {"exception_class_path": path, "traceback": f"{path}: {exception}"})


signals.job_dead.connect(_on_job_dead, sender=run_django_task, dispatch_uid="delayq-tasks-dead")
signals.job_released.connect(
    _on_job_released, sender=run_django_task, dispatch_uid="delayq-tasks-released"
)
signals.job_failed.connect(_on_job_failed, sender=run_django_task, dispatch_uid="delayq-tasks-lost")
signals.job_cancelled.connect(
    _on_job_cancelled, sender=run_django_task, dispatch_uid="delayq-tasks-cancelled"
)


# -- helpers --------------------------------------------------------------------


def _backend(alias: Any) -> DelayQBackend:
    try:
        backend = task_backends[alias]
    except Exception as exc:  # InvalidTaskBackend, or a bad alias type
        raise InvalidTask(f"the task backend {alias!r} is not configured in TASKS: {exc}") from exc
    if not isinstance(backend, DelayQBackend):
        raise InvalidTask(
            f"the task backend {alias!r} is {type(backend).__name__}, not a DelayQBackend: "
            "django-delayq runs only tasks enqueued through a DelayQBackend"
        )
    return backend


def _load_task(path: str, spec: dict) -> Task:
    """The ``django.tasks`` Task at ``path`` with the options it was enqueued with.

    Refuses anything but a Task whose backend is a DelayQBackend (the allow-list).
    """
    backend = _backend(spec.get("backend"))
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"cannot import the task {path!r}: {exc}") from exc
    if not isinstance(found, Task) or found.module_path != path:
        raise InvalidTask(f"{path!r} is not a django.tasks Task (decorated with @task)")
    run_after = spec.get("run_after")
    return replace(
        found,
        backend=backend.alias,
        queue_name=spec.get("queue_name", found.queue_name),
        priority=spec.get("priority", found.priority),
        run_after=None if run_after is None else datetime.fromisoformat(run_after),
    )


def _task_spec(task: Task, alias: str) -> dict[str, Any]:
    run_after = task.run_after.isoformat() if task.run_after is not None else None
    return {
        "backend": alias,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": run_after,
    }


def _new_state(job_id: str, path: str, args: list, kwargs: dict, spec: dict) -> dict[str, Any]:
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


def _encode(state: dict[str, Any]) -> bytes:
    return dumps(state).encode()


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        state = json.loads(raw)
    except ValueError:  # includes UnicodeDecodeError
        state = None
    if not isinstance(state, dict) or state.get("v") != RESULT_FORMAT:
        raise ValueError(f"unreadable django.tasks result: {bytes(raw)[:80]!r}")
    return state


def _task_result(task: Task, result_id: str, state: dict[str, Any]) -> TaskResult:
    result = TaskResult(
        task=task,
        id=result_id,
        status=TaskResultStatus(state["status"]),
        enqueued_at=_datetime(state.get("enqueued_at")),
        started_at=_datetime(state.get("started_at")),
        finished_at=_datetime(state.get("finished_at")),
        last_attempted_at=_datetime(state.get("last_attempted_at")),
        args=state["args"],
        kwargs=state["kwargs"],
        backend=task.backend,
        errors=[TaskError(**error) for error in state.get("errors", [])],
        worker_ids=list(state.get("worker_ids", [])),
    )
    object.__setattr__(result, "_return_value", state.get("return_value"))
    return result


def _datetime(epoch: float | None) -> datetime | None:
    """An epoch as Django's timezone.now() would give it: aware UTC, or naive local."""
    if epoch is None:
        return None
    if settings.USE_TZ:
        return datetime.fromtimestamp(epoch, tz=UTC)
    return datetime.fromtimestamp(epoch)


def _epoch(when: datetime) -> float:
    if timezone.is_naive(when):
        when = timezone.make_aware(when, timezone.get_default_timezone())
    return when.timestamp()
