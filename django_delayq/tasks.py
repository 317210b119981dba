"""django-delayq's own tasks, found by the worker's ``autodiscover_modules("tasks")``.

It registers ``run_django_task`` (``django_tasks/backend.py``, the task that runs
``django.tasks`` Tasks) in every worker, whether or not a module of the project has
imported the backend yet. Without django.tasks (Django 5.2 without the django-tasks
backport) there is nothing to register.
"""

from importlib.util import find_spec

if find_spec("django.tasks") is not None or find_spec("django_tasks") is not None:
    from django_delayq.django_tasks import backend  # noqa: F401
