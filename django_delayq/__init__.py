"""django-delayq: delayed jobs for Django on Redis.

Public API::

    from django_delayq import task, schedule, schedule_many, cancel, get_job, Job
    from django_delayq import call, Call  # call(task, *args, **kwargs).schedule(**options)
    from django_delayq import aschedule, acancel, aget_job  # for async views
    from django_delayq import pause, resume, is_paused
    from django_delayq import current_job  # inside a task: the Job it runs
"""

from django_delayq.api import call, cancel, get_job, schedule, schedule_many
from django_delayq.async_api import acancel, aget_job, aschedule
from django_delayq.calls import Call
from django_delayq.control import is_paused, pause, resume
from django_delayq.exceptions import (
    ConfigurationError,
    ConnectionError,
    CorruptJob,
    DelayQError,
    JobNotFound,
    LeaseLost,
    OutcomeUnknown,
    SerializationError,
    TaskNotFound,
)
from django_delayq.job import Job
from django_delayq.registry import Task, task
from django_delayq.worker.execution import current_job

__version__ = "0.5.0"

__all__ = [
    "Call",
    "ConfigurationError",
    "ConnectionError",
    "CorruptJob",
    "DelayQError",
    "Job",
    "JobNotFound",
    "LeaseLost",
    "OutcomeUnknown",
    "SerializationError",
    "Task",
    "TaskNotFound",
    "acancel",
    "aget_job",
    "aschedule",
    "call",
    "cancel",
    "current_job",
    "get_job",
    "is_paused",
    "pause",
    "resume",
    "schedule",
    "schedule_many",
    "task",
]
