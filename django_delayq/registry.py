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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from .exceptions import TaskNotFound
from .store import check_queue_name

if TYPE_CHECKING:
    from .job import Job

# schedule()'s own keyword arguments; a task parameter with one of these names
# could not be passed by keyword, so @task refuses it.
SCHEDULE_OPTIONS = frozenset(
    {"delay", "at", "key", "on_conflict", "on_commit", "queue", "max_retries"}
)

_registry: dict[str, Task] = {}
_lock = threading.Lock()
_discovered = False  # autodiscover() ran: the registry holds every task of this code base


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
    ) -> None:
        if not callable(func):
            raise TypeError(f"@task needs a function, got {func!r}")
        if max_retries is not None and (type(max_retries) is not int or max_retries < 0):
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if retry_backoff is not None and (
            not isinstance(retry_backoff, (int, float))
            or isinstance(retry_backoff, bool)
            or not math.isfinite(retry_backoff)
            or retry_backoff < 0
        ):
            raise ValueError(
                f"retry_backoff must be a finite number of seconds >= 0, got {retry_backoff!r}"
            )
        self.func = func
        self.name = name or f"{func.__module__}.{func.__qualname__}"
        self.queue = check_queue_name(queue) if queue is not None else None
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.is_async = asyncio.iscoroutinefunction(func)
        self._shapes: set[Any] = set()  # call shapes known to bind (see check_call)
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self.signature = None
        clash = SCHEDULE_OPTIONS & set(self.signature.parameters if self.signature else ())
        if clash:
            raise TypeError(
                f"task {self.name} has a parameter named {sorted(clash)[0]!r}, which is one of "
                "schedule()'s own options: rename the parameter"
            )
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

    def schedule(self, /, *args: Any, **options: Any) -> Job:
        """Store a job for this task; see :func:`django_delayq.schedule`."""
        return _api().schedule(self, *args, **options)


@overload
def task(func: Callable[..., Any], /) -> Task: ...
@overload
def task(
    *,
    name: str | None = ...,
    queue: str | None = ...,
    max_retries: int | None = ...,
    retry_backoff: float | None = ...,
) -> Callable[[Callable[..., Any]], Task]: ...


def task(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register a function as a task: ``@task`` or ``@task(queue=..., max_retries=...)``."""

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


@functools.cache
def _api() -> Any:
    from . import api  # api imports this module: import it on first use

    return api


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
