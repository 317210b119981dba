"""``django_delayq.backends.DelayQBackend``: the path Django's ``TASKS`` setting names.

The backend lives in :mod:`django_delayq.django_tasks.backend`; this module keeps the
documented path (and the one every stored job of ``run_django_task`` was named after).
"""

from django_delayq.django_tasks.backend import DelayQBackend, run_django_task

__all__ = ["DelayQBackend", "run_django_task"]
