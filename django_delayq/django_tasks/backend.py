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
DelayQBackend alias (the allow-list), runs it, and keeps its result. Where the job goes is
the plan's decision, as for schedule() (``scheduling/plan.py``, :func:`place_unkeyed`):
Redis now, its READY result written in the same round trip, or, due beyond
``DELAYQ["HORIZON"]``, a row of the database outbox, its result saved in Redis first.

Results: one JSON document per result (``store.result_key``: found by the result id alone,
whatever the queue), replaced whole at every change and expiring ``RESULT_TTL`` seconds after
the last one (longer while the task is deferred or waiting for a retry), so ``get_result()``
works from any process. The document's format is in ``compat.py``; how an attempt
updates it, in ``attempts.py``.

Retries: ``OPTIONS["MAX_RETRIES"]`` (default 0, Django's one attempt) failed attempts
are retried with DELAYQ's backoff. Between attempts the status is READY again, every
attempt appends its worker to ``worker_ids`` (``attempts == len(worker_ids)``) and every
failure its ``TaskError``; FAILED is set only by the last attempt. A job a stopping worker
hands back, or one recovered from a dead worker with attempts left, is READY again.

Priority is supported (``supports_priority = True``): Django's ``priority`` (-100..100) is
the job's, so among due jobs a higher priority is claimed first (``scheduling/options.py``).
Signals ``task_enqueued``, ``task_started`` (every attempt) and
``task_finished`` (the final outcome) are sent with ``sender=DelayQBackend`` like Django's
ImmediateBackend, through ``send_robust``: a failing receiver is logged, never fatal.
"""

from __future__ import annotations

import inspect
import math
import re
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.core import checks
from django.db import transaction

from django_delayq import signals
from django_delayq.checks import served
from django_delayq.django_tasks.attempts import (
    arun_attempt,
    finish_outside_run,
    ready_again,
    run_attempt,
)
from django_delayq.django_tasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    as_datetime,
    decode_state,
    encode_state,
    epoch,
    new_state,
    task_backends,
    task_enqueued,
    task_from_spec,
    task_result,
    task_spec,
)
from django_delayq.django_tasks.runner import DJANGO_TASK_RUNNER
from django_delayq.exceptions import ConfigurationError, LeaseLost
from django_delayq.jobs.ids import id_timestamp, new_job_id
from django_delayq.jobs.job import IN_DATABASE, PENDING, Job, make_job
from django_delayq.jobs.record import Fields, JobSpec, encode_job
from django_delayq.scheduling.plan import (
    LATEST_DUE,
    REDIS,
    due_soon,
    place_unkeyed,
    relay_beyond_horizon,
)
from django_delayq.scheduling.registry import task as delayq_task
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name
from django_delayq.worker.execution import current_job

__all__ = ["DelayQBackend", "run_django_task"]

INTERNAL_TASK = DJANGO_TASK_RUNNER  # the name @task registers run_django_task under
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
    retries (``OPTIONS["MAX_RETRIES"]``) and priorities (see the module).
    Constructing the backend does no I/O: Redis is reached on the first enqueue or read.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

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
        if run_after is not None and epoch(run_after) >= LATEST_DUE.timestamp():
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
        # encode_job then refuses what would not come back equal from JSON.
        result = TaskResult(
            task=task,
            id=job_id,
            status=TaskResultStatus.READY,
            enqueued_at=as_datetime(id_timestamp(job_id)),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        encode_job(JobSpec(task.module_path, result.args, result.kwargs))  # the check
        spec = task_spec(task, self.alias)
        max_retries = self.option("MAX_RETRIES")
        job_args = [task.module_path, result.args, result.kwargs, spec]
        due_in = 0.0
        when: dict[str, float] = {"delay": 0.0}
        if task.run_after is not None:
            when = {"at": epoch(task.run_after)}
            due_in = when["at"] - time.time()
        where = place_unkeyed(None, due_in)  # the plan's: Redis now, or beyond the horizon
        soon, outbox = due_soon(when), where.in_outbox  # flag 'i' (jobs/record.py)
        spec_ = JobSpec(INTERNAL_TASK, job_args, {}, None, max_retries, task.priority)
        encoded = encode_job(replace(spec_, tombstone=soon, outbox=outbox))
        record = encoded.data
        state = new_state(job_id, task.module_path, result.args, result.kwargs, spec)
        if where is not REDIS:  # the job waits in the database outbox; its READY result is in Redis
            return self._enqueue_row(task, result, job_id, record, state, due_in, job_args)
        ttl, plain = self.result_ttl(due_in), encoded.plain_schedule
        scheduled = get_store().schedule_with_result(
            task.queue_name, job_id, record, encode_state(state), ttl, plain, **when
        )
        job = make_job(
            job_id,
            task.queue_name,
            PENDING,
            Fields(INTERNAL_TASK, job_args, {}, None, max_retries, priority=task.priority),
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
        from django_delayq.outbox import rows as outbox

        get_store().save_result(job_id, encode_state(state), self.result_ttl(due_in))
        now = time.time()
        due = now + due_in
        row = outbox.Row(job_id, task.queue_name, due, record, delay=due_in)
        relay_in = relay_beyond_horizon(due, due_in)  # the database's clock
        alias = outbox.write_alias()
        outbox.save(alias, row, relay_in, now)
        max_retries = self.option("MAX_RETRIES")
        fields = Fields(INTERNAL_TASK, job_args, {}, None, max_retries, priority=task.priority)
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
        # The row joined the caller's transaction: the job exists once it commits (as
        # schedule()'s rows, placement.bulk_rows); Django's own signal stays at enqueue.
        transaction.on_commit(
            lambda: signals.send(signals.job_scheduled, run_django_task, job=job), using=alias
        )
        signals.send(task_enqueued, type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        if not isinstance(result_id, str) or not RESULT_ID.match(result_id):
            raise TaskResultDoesNotExist(result_id)
        found = get_store().load_result(result_id)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        state = decode_state(found)  # ValueError naming an unreadable result
        return task_result(_load_task(state["task"], state["spec"]), result_id, state)


@delayq_task(name=INTERNAL_TASK)
def run_django_task(path: str, args: list, kwargs: dict, spec: dict) -> Any:
    """The django-delayq task that runs a ``django.tasks`` Task (enqueued by DelayQBackend).

    Only a module path naming a ``django.tasks`` Task, on an alias configured with a
    DelayQBackend in this process, is run.
    """
    job = current_job()
    if job is None:
        raise RuntimeError(f"{INTERNAL_TASK} runs only inside a django-delayq worker")
    return run_attempt(_backend(spec.get("backend")), job, path, args, kwargs, spec)


async def arun_django_task(path: str, args: list, kwargs: dict, spec: dict) -> Any:
    """What a worker's event loop awaits for a job of run_django_task whose Task is defined
    with ``async def`` (worker/aio.py): the same attempt, the Task awaited."""
    job = current_job()
    if job is None:
        raise RuntimeError(f"{INTERNAL_TASK} runs only inside a django-delayq worker")
    return await arun_attempt(_backend(spec.get("backend")), job, path, args, kwargs, spec)


def _coroutine_for(args: list, kwargs: dict) -> Any:
    """run_django_task's jobs of a Task defined with ``async def`` run on the worker's event
    loop (``delayq_worker --async-concurrency``); the others on its runner threads."""
    path, _, _, spec = args
    task = _load_task(path, spec)
    return arun_django_task if inspect.iscoroutinefunction(task.func) else None


run_django_task.coroutine_for = _coroutine_for


# -- a job of run_django_task that ends without run_attempt() seeing it -------------


def _on_job_dead(sender: Any, job: Job, error: str, **kwargs: Any) -> None:
    last = job.errors[-1] if job.errors else {}
    path = str(last.get("type") or "django_delayq.exceptions.LeaseLost")
    text = str(last.get("traceback") or last.get("message") or error)
    finish_outside_run(job, {"exception_class_path": path, "traceback": text}, _backend)


def _on_job_cancelled(sender: Any, job: Job, **kwargs: Any) -> None:
    message = f"django_delayq.exceptions.JobCancelled: job {job.id} was cancelled before it ran"
    path = "django_delayq.exceptions.JobCancelled"
    finish_outside_run(job, {"exception_class_path": path, "traceback": message}, _backend)


def _on_job_released(sender: Any, job: Job, **kwargs: Any) -> None:
    ready_again(job, None, _backend)


def _on_job_failed(
    sender: Any, job: Job, exception: BaseException, will_retry: bool, **kw: Any
) -> None:
    if isinstance(exception, LeaseLost) and will_retry:  # run_attempt() never saw it end
        path = "django_delayq.exceptions.LeaseLost"
        error = {"exception_class_path": path, "traceback": f"{path}: {exception}"}
        ready_again(job, error, _backend)


signals.job_dead.connect(_on_job_dead, sender=run_django_task, dispatch_uid="delayq-tasks-dead")
signals.job_released.connect(
    _on_job_released, sender=run_django_task, dispatch_uid="delayq-tasks-released"
)
signals.job_failed.connect(_on_job_failed, sender=run_django_task, dispatch_uid="delayq-tasks-lost")
signals.loop_safe("delayq-tasks-lost")  # acts on LeaseLost only, which recovery sends
signals.job_cancelled.connect(
    _on_job_cancelled, sender=run_django_task, dispatch_uid="delayq-tasks-cancelled"
)


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
    return task_from_spec(path, spec, _backend(spec.get("backend")).alias)
