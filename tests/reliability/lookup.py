"""What a fresh process finds, for tests that must not depend on the caches of the process
that wrote: ``python -m tests.reliability.lookup result|job <id>`` prints one JSON object
(``{"found": false}`` or ``{"found": true, "status": ..., "queue": ...}``).

Settings come from the environment, as for worker processes (harness.worker_env)."""

from __future__ import annotations

import json
import os
import sys


def main(kind: str, ident: str) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.reliability.settings")
    django.setup()
    if kind == "job":
        from django_delayq import get_job

        job = get_job(ident)
        if job is None:
            return {"found": False}
        return {"found": True, "status": job.status, "queue": job.queue}
    try:
        from django.tasks import task_backends
        from django.tasks.exceptions import TaskResultDoesNotExist
    except ImportError:  # Django 5.2: the django-tasks backport
        from django_tasks import task_backends
        from django_tasks.exceptions import TaskResultDoesNotExist

    try:
        result = task_backends["default"].get_result(ident)
    except TaskResultDoesNotExist:
        return {"found": False}
    return {"found": True, "status": str(result.status.value), "queue": result.task.queue_name}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
