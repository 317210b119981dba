"""``django.tasks`` Tasks of the reliability suite, run through DelayQBackend by worker
processes (``DELAYQ_TASKS_QUEUES`` in tests/reliability/settings.py configures it there;
the test process enqueues under ``override_settings(TASKS=...)``). Each records its runs in
the "runs" Redis, never in worker memory."""

from __future__ import annotations

import time

from tests.testapp.tasks import runs_client

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task
def linger(tag: str, seconds: float) -> str:
    """Record the start, sleep ``seconds``, record the end."""
    runs_client().rpush(f"runs:{tag}:started", "linger")
    time.sleep(seconds)
    runs_client().rpush(f"runs:{tag}", "linger")
    return "done"
