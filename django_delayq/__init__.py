"""django-delayq: delayed jobs for Django on Redis.

Public API::

    from django_delayq import task, schedule, schedule_many, cancel, get_job, Job
    from django_delayq import call, Call  # call(task, *args, **kwargs).schedule(**options)
    from django_delayq import reschedule, areschedule  # move a pending job's due time
    from django_delayq import aschedule, acancel, aget_job  # for async views
    from django_delayq import pause, resume, is_paused
    from django_delayq import current_job  # inside a task: the Job it runs

Modules moved into folders in 0.5 (``django_delayq.api`` is ``django_delayq.scheduling.api``
...): the old paths still import, the same module object, with a DeprecationWarning naming
the new one (:data:`MOVED`); they go in 1.0.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

from django_delayq.batches.api import BatchState, batch, cancel_batch, get_batch
from django_delayq.exceptions import (
    ConfigurationError,
    ConnectionError,
    CorruptJob,
    DelayQError,
    JobNotFound,
    LeaseLost,
    NotMigrated,
    OutcomeUnknown,
    SerializationError,
    TaskNotFound,
)
from django_delayq.jobs.finished import AttemptRecord
from django_delayq.jobs.job import Job
from django_delayq.scheduling.api import call, cancel, get_job, schedule, schedule_many
from django_delayq.scheduling.async_api import acancel, aget_job, areschedule, aschedule
from django_delayq.scheduling.calls import Call
from django_delayq.scheduling.pausing import is_paused, pause, resume
from django_delayq.scheduling.registry import Task, task
from django_delayq.scheduling.rescheduling import reschedule
from django_delayq.worker.execution import current_job

__version__ = "0.7.0"

# Old module path (before 0.5) -> the module's new path.
MOVED = {
    "django_delayq.api": "django_delayq.scheduling.api",
    "django_delayq.async_api": "django_delayq.scheduling.async_api",
    "django_delayq.plan": "django_delayq.scheduling.plan",
    "django_delayq.calls": "django_delayq.scheduling.calls",
    "django_delayq.registry": "django_delayq.scheduling.registry",
    "django_delayq.control": "django_delayq.scheduling.pausing",
    "django_delayq.queue_settings": "django_delayq.conf.queues",
    "django_delayq.job": "django_delayq.jobs.job",
    "django_delayq.job_ids": "django_delayq.jobs.ids",
    "django_delayq.job_state": "django_delayq.jobs.state",
    "django_delayq.record": "django_delayq.jobs.record",
    "django_delayq.arguments": "django_delayq.jobs.arguments",
    "django_delayq.relaying": "django_delayq.outbox.relay",
    "django_delayq.outbox_checks": "django_delayq.outbox.checks",
    "django_delayq.database_time": "django_delayq.outbox.database_time",
    "django_delayq.placement": "django_delayq.outbox.placement",
    "django_delayq.task_attempts": "django_delayq.django_tasks.attempts",
    "django_delayq.health": "django_delayq.monitoring.health",
    "django_delayq.metrics": "django_delayq.monitoring.metrics",
    "django_delayq.batch": "django_delayq.storage.bulk",
    "django_delayq.recurring.times": "django_delayq.recurring.fire_times",
    "django_delayq.storage.retries": "django_delayq.storage.resends",
    "django_delayq.storage.times": "django_delayq.storage.milliseconds",
    "django_delayq.worker.exchange": "django_delayq.worker.claiming",
}


MOVED_BY_NEW = {new: old for old, new in MOVED.items()}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path of :data:`MOVED` as the module at its new path (one module
    object under both names, so a patch through either is seen by both), with a warning."""

    specs: dict = {}  # old path -> the module's own spec

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new} in django-delayq 0.5: import from there "
            f"(the old path goes in 1.0)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self.specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # importlib gave the module the old path's spec: give it back its own
        module.__spec__ = self.specs[MOVED_BY_NEW[module.__name__]]


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


class _Package(types.ModuleType):
    """django_delayq itself: ``import django_delayq.batch`` (0.4's module, now
    storage/bulk.py) makes importlib set the package's attribute ``batch`` to that module;
    the name is the batch() function's since 0.6, so a module is not let in there."""

    def __setattr__(self, name, value):
        if name == "batch" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "AttemptRecord",
    "BatchState",
    "Call",
    "ConfigurationError",
    "ConnectionError",
    "CorruptJob",
    "DelayQError",
    "Job",
    "JobNotFound",
    "LeaseLost",
    "NotMigrated",
    "OutcomeUnknown",
    "SerializationError",
    "Task",
    "TaskNotFound",
    "acancel",
    "aget_job",
    "areschedule",
    "aschedule",
    "batch",
    "call",
    "cancel",
    "cancel_batch",
    "current_job",
    "get_batch",
    "get_job",
    "is_paused",
    "pause",
    "reschedule",
    "resume",
    "schedule",
    "schedule_many",
    "task",
]
