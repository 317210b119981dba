"""The task that runs a Django Task, as the rest of django-delayq knows it: its registered
name (stored in every such job, so it never changes: ``django_delayq.backends`` was its
module when it was first named) and the call its jobs show (admin, worker log lines).

This module imports nothing of django.tasks, so the worker and the admin can read it on
Django 5.2 without the backport.
"""

from __future__ import annotations

# The task that runs a Django Task (backend.py): its jobs are shown as the Task they run.
DJANGO_TASK_RUNNER = "django_delayq.backends.run_django_task"


def shown_call(task: str, args: list, kwargs: dict) -> tuple[str, list, dict]:
    """The call a job makes as people know it: for a Django Task (``run_django_task(path,
    args, kwargs, spec)``) the Task's own path and arguments, else the job's."""
    if (
        task == DJANGO_TASK_RUNNER
        and len(args) == 4
        and isinstance(args[0], str)
        and isinstance(args[1], list)
        and isinstance(args[2], dict)
    ):
        return args[0], args[1], args[2]
    return task, args, kwargs
