"""django-delayq: delayed jobs for Django on Redis.

Public API::

    from django_delayq import task, schedule, schedule_many, cancel, get_job, Job
"""

from .api import cancel, get_job, schedule, schedule_many
from .exceptions import (
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
from .job import Job
from .registry import Task, task

__version__ = "0.3.0"

__all__ = [
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
    "cancel",
    "get_job",
    "schedule",
    "schedule_many",
    "task",
]
