"""The ``@task`` decorator and the registry of runnable tasks (the allow-list).

A worker runs a job only if its task name is registered here; nothing is ever
imported from a name found in Redis.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import math
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, overload

from django_delayq.exceptions import TaskNotFound
from django_delayq.scheduling.calls import Call
from django_delayq.scheduling.expiry import check_expires
from django_delayq.scheduling.options import (
    check_concurrency,
    check_max_wait,
    check_priority,
    check_retry_backoff,
    check_unique_for,
    check_unique_until,
    parse_rate,
)
from django_delayq.storage.queues import check_queue_name
from django_delayq.wording import closest

if TYPE_CHECKING:
    from django_delayq.jobs.job import Job

# schedule()'s own keyword arguments: a task parameter with one of these names cannot be
# given by keyword to schedule(task, ...) (Task.call(...).schedule(...) can give it).
SCHEDULE_OPTIONS = frozenset(
    {
        "delay",
        "at",
        "key",
        "on_conflict",
        "on_commit",
        "queue",
        "max_retries",
        "priority",
        "group",
        "expires",
        "max_wait",
        "unique_for",
        "unique_until",
    }
)

_registry: dict[str, Task] = {}
_lock = threading.Lock()
_discovered = False  # autodiscover() ran: the registry holds every task of this code base
_scheduler: Callable[..., Job] | None = None  # api.schedule (see use_scheduler)
_async_scheduler: Callable[..., Awaitable[Job]] | None = None  # async_api.aschedule


class Task:
    """A registered function. Call it to run it now; ``.schedule()`` to run it later."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str | None = None,
        max_retries: int | None = None,
        retry_backoff: float | None = None,
        priority: int = 0,
        rate: str | None = None,
        concurrency: int | None = None,
        timeout: float | None = None,
        group_concurrency: int | None = None,
        group_rate: str | None = None,
        expires: Any = None,
        max_wait: Any = None,
        unique_for: Any = None,
        unique_until: str = "start",
    ) -> None:
        if not callable(func):
            raise TypeError(f"@task needs a function, got {func!r}")
        if max_retries is not None and (type(max_retries) is not int or max_retries < 0):
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        check_retry_backoff(retry_backoff)
        self.priority = check_priority(priority, "@task(priority=...)")
        self.rate = parse_rate(rate)  # (count, period in ms) or None
        self.concurrency = check_concurrency(concurrency)  # attempts at once, or None
        # The same, for each group= on its own (claim.lua, "gconc:" / "grate:").
        self.group_concurrency = check_concurrency(group_concurrency, "group_concurrency")
        self.group_rate = parse_rate(group_rate, "group_rate")
        self.timeout = check_timeout(timeout)
        self.expires = check_expires(expires, "@task(expires=...)")  # ("in"|"at", s) or None
        self.max_wait = check_max_wait(max_wait, "@task(max_wait=...)")  # keyed replaces' default
        self.unique_for = check_unique_for(unique_for)  # seconds: keyed calls' default window
        # "end": its keyed jobs hold their key while they run too (keyed calls' default)
        self.unique_until = check_unique_until(unique_until, "@task(unique_until=...)")
        self.func, self.name = func, name or f"{func.__module__}.{func.__qualname__}"
        self.queue = check_queue_name(queue) if queue is not None else None
        self.max_retries, self.retry_backoff = max_retries, retry_backoff
        self.is_async = asyncio.iscoroutinefunction(func)
        # A sync task that runs some of its jobs as coroutines (run_django_task, for Django
        # Tasks defined with async def): given a job's args and kwargs, the coroutine
        # function a worker's event loop awaits instead (worker/aio.py), or None.
        self.coroutine_for: Callable[[list, dict], Callable[..., Awaitable[Any]] | None] | None = (
            None
        )
        self._shapes: set[Any] = set()  # call shapes known to bind (see check_call)
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self.signature = None
        # Parameters schedule(task, ..., name=...) would take as its own options (checked
        # only when a call passes options; the system check delayq.W006 names them).
        self.shadowed = shadowed_options(self.signature)
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    def check_call(self, args: tuple | list, kwargs: dict) -> None:
        """Refuse, at schedule time, arguments the function could not be called with.

        Whether a call binds depends only on how many positional arguments it has and
        which keyword names, so shapes that bound once are remembered (a few dozen).
        """
        if self.signature is None:
            return
        shape = (len(args), frozenset(kwargs)) if kwargs else len(args)
        if shape in self._shapes:
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"cannot schedule {self.name}: {exc}") from None
        if len(self._shapes) < 64:
            self._shapes.add(shape)

    def call(self, /, *args: Any, **kwargs: Any) -> Call:
        """This task with these arguments, not scheduled yet: ``.call(...).schedule(delay=...)``
        keeps the task's arguments apart from the options (see :class:`django_delayq.Call`)."""
        return Call(self.name, args, kwargs)

    def schedule(self, /, *args: Any, **options: Any) -> Job:
        """Store a job for this task; see :func:`django_delayq.schedule`."""
        if _scheduler is None:  # pragma: no cover - django_delayq/__init__.py imports api.py
            raise RuntimeError("django_delayq.scheduling.api is not imported: import django_delayq")
        return _scheduler(self, *args, **options)

    async def aschedule(self, /, *args: Any, **options: Any) -> Job:
        """Store a job for this task from async code; see :func:`django_delayq.aschedule`."""
        if _async_scheduler is None:  # pragma: no cover - django_delayq/__init__.py imports it
            raise RuntimeError(
                "django_delayq.scheduling.async_api is not imported: import django_delayq"
            )
        return await _async_scheduler(self, *args, **options)


@overload
def task(func: Callable[..., Any], /) -> Task: ...
@overload
def task(
    *,
    name: str | None = ...,
    queue: str | None = ...,
    max_retries: int | None = ...,
    retry_backoff: float | None = ...,
    priority: int = ...,
    rate: str | None = ...,
    concurrency: int | None = ...,
    timeout: float | None = ...,
    group_concurrency: int | None = ...,
    group_rate: str | None = ...,
    expires: Any = ...,
    max_wait: Any = ...,
    unique_for: Any = ...,
    unique_until: str = ...,
) -> Callable[[Callable[..., Any]], Task]: ...


def task(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register a function as a task: ``@task`` or ``@task(queue=..., max_retries=...)``.

    ``timeout`` (seconds, a positive finite number): an attempt that runs longer fails with a
    ``TimeoutError`` naming the task and the limit, and is retried like any failure (backoff,
    ``max_retries``, the dead-letter set, ``job_failed``). A worker runs jobs on threads, and
    Python cannot stop a thread: at the deadline the worker records the failure, stops
    extending the lease and puts a new runner thread in the old one's place; the old thread
    goes on until the task returns, and whatever it returns then is discarded. Under
    ``delayq_worker --processes N`` a child that has left as many threads hanging as its
    ``--concurrency`` makes way for a new process, which ends them; a worker without
    ``--processes`` logs an error instead. An ``async def`` task is cancelled at its
    deadline; one that blocks its event loop is abandoned a second later, as a sync one. The
    limit is looked up in the worker's registry when the job runs, so changing it applies to
    jobs already scheduled.
    """

    check_task_options(options)

    def register(f: Callable[..., Any]) -> Task:
        new = Task(f, **options)
        with _lock:
            old = _registry.get(new.name)
            if old is not None and old.func is not f and _origin(old.func) != _origin(f):
                raise ValueError(
                    f"two different functions are registered as task {new.name!r}: "
                    "give one an explicit @task(name=...)"
                )
            _registry[new.name] = new
        return new

    return register(func) if func is not None else register


# @task's options, and what other task queues call some of them (Celery, huey, rq).
TASK_OPTIONS = (
    "name",
    "queue",
    "max_retries",
    "retry_backoff",
    "priority",
    "rate",
    "concurrency",
    "timeout",
    "group_concurrency",
    "group_rate",
    "expires",
    "max_wait",
    "unique_for",
    "unique_until",
)
ELSEWHERE = {
    "ttl": "expires",
    "retry_delay": "retry_backoff",
    "default_retry_delay": "retry_backoff",
    "retries": "max_retries",
    "time_limit": "timeout",
    "job_timeout": "timeout",
    "rate_limit": "rate",
    "group_limit": "group_concurrency",
    "partition_limit": "group_concurrency",
}


def check_task_options(options: dict[str, Any]) -> None:
    """TypeError naming an option @task does not take, the one meant when it is close (or
    another library's name for it) and the valid ones, when the decorator is written, not
    a bare "unexpected keyword argument" once it is applied."""
    for option in options:
        if option not in TASK_OPTIONS:
            meant = ELSEWHERE.get(option) or closest(option, TASK_OPTIONS)
            hint = f"did you mean {meant!r}? " if meant else ""
            raise TypeError(
                f"@task() got an unknown option {option!r}: {hint}@task takes "
                f"{', '.join(TASK_OPTIONS)} (retry_backoff: the base delay in seconds of the "
                "exponential backoff between attempts)"
            )


def shadowed_options(signature: inspect.Signature | None) -> frozenset[str]:
    """The parameters of a task's function that bear the name of one of schedule()'s options
    (those a caller may pass by keyword)."""
    if signature is None:
        return frozenset()
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = (p.name for p in signature.parameters.values() if p.kind in by_keyword)
    return SCHEDULE_OPTIONS.intersection(names)


def shadowing(task: str, parameter: str) -> str:
    """Why a task's parameter named like a schedule() option cannot be given with it, and
    what to write instead (the TypeError of plan.mixed_plan, the system check delayq.W006)."""
    return (
        f"task {task} has a parameter named {parameter!r}, which is also an option of "
        f"schedule(), so schedule({task}, ..., {parameter}=...) cannot say which is meant: "
        f"give the task's arguments and the options apart, "
        f"{task}.call(..., {parameter}=...).schedule({parameter}=...)"
    )


def check_timeout(timeout: Any) -> float | None:
    """A task's ``timeout``: None, or a positive finite number of seconds (as a float)."""
    if timeout is None:
        return None
    if (
        not isinstance(timeout, (int, float))
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    return float(timeout)


def loop_function(task: Task | None, args: list, kwargs: dict) -> Callable[..., Any] | None:
    """The coroutine function a worker's event loop awaits for a job of ``task`` with these
    arguments: an ``async def`` task's own, the one its ``coroutine_for`` names, else None
    (a sync job, or a task this process does not know: a runner thread runs it)."""
    if task is None:
        return None
    if task.coroutine_for is not None:
        try:
            return task.coroutine_for(args, kwargs)
        except Exception:  # the runner thread's call reports what is wrong
            return None
    return task.func if task.is_async else None


def use_scheduler(schedule: Callable[..., Job]) -> None:
    """Give :meth:`Task.schedule` the function it calls: api.py registers its schedule()
    when it is imported (the package's __init__ imports it), so this module, which api.py
    imports, never imports api.py."""
    global _scheduler
    _scheduler = schedule


def use_async_scheduler(aschedule: Callable[..., Awaitable[Job]]) -> None:
    """Give :meth:`Task.aschedule` the coroutine function it calls (as use_scheduler)."""
    global _async_scheduler
    _async_scheduler = aschedule


def _origin(func: Callable[..., Any]) -> tuple:
    code = getattr(func, "__code__", None)
    return (getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None))


def get_task(name: str) -> Task:
    try:
        return _registry[name]
    except KeyError:
        raise TaskNotFound(
            f"task {name!r} is not registered in this process: decorate it with "
            "@django_delayq.task in a module that is imported (an app's tasks.py is)"
        ) from None


def find_task(name: str) -> Task | None:
    """The task registered under ``name`` in this process, or None."""
    return _registry.get(name)


def sender(name: str) -> Task | str:
    """The sender of a job's signals: its Task when registered in this process, else its name."""
    return _registry.get(name) or name


def registered() -> dict[str, Task]:
    return dict(_registry)


def autodiscover() -> None:
    """Import every installed app's ``tasks`` module, as workers do at start.

    DelayQConfig.ready() calls it in every process, so that from then on the registry holds
    every task this code base defines, and schedule() can refuse a name that is not there.
    """
    global _discovered
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tasks")
    _discovered = True


def discovered() -> bool:
    """True once :func:`autodiscover` ran in this process."""
    return _discovered


def unknown_task(name: str) -> TaskNotFound:
    """The error for scheduling a name no @task registered, naming the closest ones."""
    close = difflib.get_close_matches(name, list(_registry), n=3, cutoff=0.6)
    if close:
        hint = "closest registered names: " + ", ".join(repr(c) for c in close)
    else:
        hint = f"none of the {len(_registry)} registered tasks has a similar name"
    return TaskNotFound(
        f"task {name!r} is not registered in this process ({hint}); a job of it would be "
        "retried and dead-lettered by every worker of this code base. Register it with "
        "@django_delayq.task in an app's tasks.py, or, to schedule tasks that workers of "
        "another code base run, set DELAYQ['CHECK_NAMES'] = False"
    )


def unregister(name: str) -> None:
    with _lock:
        _registry.pop(name, None)
