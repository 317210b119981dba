"""django.tasks Tasks used by tests/test_backend.py (run by DelayQBackend under
override_settings(TASKS=...); decorated here against whatever TASKS says at import)."""

from __future__ import annotations

try:
    from django.tasks import default_task_backend, task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import default_task_backend, task

CALLS: list = []


@task
def add(a, b):
    CALLS.append(("add", a, b))
    return a + b


@task
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


@task
def fail(message="boom"):
    CALLS.append(("fail", message))
    raise ValueError(message)


@task(takes_context=True)
def flaky(context, failures):
    """Fails the first ``failures`` attempts, then returns the attempt number."""
    CALLS.append(("flaky", context.attempt))
    if context.attempt <= failures:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task(takes_context=True)
def describe(context):
    result = context.task_result
    return {
        "attempt": context.attempt,
        "id": result.id,
        "status": result.status,
        "worker_ids": result.worker_ids,
        "backend": result.backend,
    }


@task(takes_context=True)
def own_status(context):
    """The task's own result as another process would read it while the task runs."""
    return default_task_backend.get_result(context.task_result.id).status


@task
async def async_double(x):
    CALLS.append(("async_double", x))
    return x * 2


@task
def bad_return():
    return object()


def not_a_task():
    CALLS.append(("not_a_task",))


@task(takes_context=True)
async def async_flaky(context, failures):
    """async def: fails the first ``failures`` attempts, then returns the attempt number and
    the thread it ran in."""
    import threading

    CALLS.append(("async_flaky", context.attempt))
    if context.attempt <= failures:
        raise RuntimeError(f"async attempt {context.attempt} fails")
    return [context.attempt, threading.current_thread().name]
