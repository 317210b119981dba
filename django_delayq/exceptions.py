"""Every exception django-delayq raises derives from :class:`DelayQError`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError


class DelayQError(Exception):
    """Root of django-delayq's exceptions."""


class ConfigurationError(DelayQError, ImproperlyConfigured):
    """The ``DELAYQ`` settings or the cache they point at cannot work."""


class NotMigrated(ConfigurationError, DatabaseError):
    """A table or column of django-delayq's is missing from a database: its migrations have
    not run there (the message names the command). Also a ``DatabaseError``, so code that
    caught the database's own error still catches it."""


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


# What the databases say of a table or column that is not there.
_MISSING_STATES = {"42P01", "42703"}  # PostgreSQL: undefined table, undefined column
_MISSING_CODES = {1146, 1054}  # MySQL and MariaDB: no such table, unknown column
_MISSING_TEXTS = ("no such table", "no such column", "has no column named", "ORA-00942")


def schema_missing(exc: BaseException) -> bool:
    """Whether a database error says a table or a column does not exist (SQLite,
    PostgreSQL, MySQL and MariaDB, Oracle)."""
    for error in (exc, exc.__cause__):
        if error is None:
            continue
        state = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
        code = error.args[0] if error.args else None
        if state in _MISSING_STATES or (type(code) is int and code in _MISSING_CODES):
            return True
        if any(text in str(error) for text in _MISSING_TEXTS):
            return True
    return False


def migrate_command(alias: str) -> str:
    """The command that creates django-delayq's tables in database ``alias``."""
    if alias == "default":
        return "python manage.py migrate"
    return f"python manage.py migrate django_delayq --database {alias}"


@contextmanager
def migrated(what: str, aliases: Callable[[], Sequence[str]]) -> Iterator[None]:
    """Raises :class:`NotMigrated`, naming ``what`` needs the tables, the databases
    (``aliases()``, asked only then) and the command to run, instead of a database error
    that says a table or column is missing (also a decorator)."""
    try:
        yield
    except DatabaseError as exc:
        if isinstance(exc, NotMigrated) or not schema_missing(exc):
            raise
        names = list(aliases())
        where = f"database {names[0]!r}" if len(names) == 1 else f"one of the databases {names}"
        run = "; ".join(migrate_command(alias) for alias in names)
        raise NotMigrated(
            f"{what} needs django-delayq's tables, and {where} lacks one ({exc}): its "
            f"migrations have not run there. Run: {run}"
        ) from exc
