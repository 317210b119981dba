"""The bridge to Django's Tasks framework (``django.tasks``, or the django-tasks backport).

``backend.py`` is the backend (``django_delayq.backends.DelayQBackend`` is its documented
path) and the internal task that runs a Task; ``attempts.py`` runs one attempt and keeps the
Task's result; ``compat.py`` imports django.tasks and holds the result's stored format;
``runner.py`` names the internal task without importing django.tasks.

Before 0.5 ``django_delayq.django_tasks`` was the module now at ``compat.py``: its names
still resolve here, with a DeprecationWarning.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    import importlib
    import warnings

    if name.startswith("__"):
        raise AttributeError(f"module 'django_delayq.django_tasks' has no attribute {name!r}")
    compat = importlib.import_module("django_delayq.django_tasks.compat")
    if not hasattr(compat, name):
        raise AttributeError(f"module 'django_delayq.django_tasks' has no attribute {name!r}")
    warnings.warn(
        f"django_delayq.django_tasks.{name} moved to django_delayq.django_tasks.compat.{name} "
        f"in django-delayq 0.5: import it from there (the old path goes in 1.0)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(compat, name)
