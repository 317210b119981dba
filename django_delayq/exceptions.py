"""Every exception django-delayq raises derives from :class:`DelayQError`."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class DelayQError(Exception):
    """Root of django-delayq's exceptions."""


class ConfigurationError(DelayQError, ImproperlyConfigured):
    """The ``DELAYQ`` settings or the cache they point at cannot work."""


class SerializationError(DelayQError, TypeError):
    """A task argument cannot be carried as JSON (raised at schedule time)."""


class TaskNotFound(DelayQError, LookupError):
    """No task is registered under that name."""


class JobNotFound(DelayQError, LookupError):
    """No job with that id (or unique key) is where the operation needs it."""


class LeaseLost(DelayQError):
    """The worker's lease on a job expired and the job was recovered or re-claimed."""


class CorruptJob(DelayQError, ValueError):
    """A job record read from Redis cannot be decoded."""


class ConnectionError(DelayQError):
    """Redis could not be reached; the operation did not happen."""


class OutcomeUnknown(ConnectionError):
    """The connection broke after an operation that is not safe to repeat was sent: Redis may
    or may not have run it (the message says which operation)."""


class Superseded(DelayQError):
    """A job was not retried because another pending job holds its unique key."""


class JobCancelled(DelayQError):
    """A pending job was cancelled before it ran (the error a django.tasks result shows)."""
