"""Schedules: parsed and validated from ``DELAYQ["SCHEDULES"]`` and from the Schedule model.

A :class:`Definition` is what every worker must agree on: task, timing, arguments, queue,
zone, missed policy and enabled. Its :attr:`~Definition.digest` changes with any of them;
the reconcile pass (reconcile.py) compares it with the database's record to see a change.
Errors name the schedule, the bad value and what to do.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from types import SimpleNamespace
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.conf import settings

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConfigurationError, SerializationError
from django_delayq.jobs.record import encode_record
from django_delayq.scheduling.registry import autodiscover, discovered, find_task, unknown_task
from django_delayq.storage.queues import check_queue_name

NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
MISSED = ("skip", "once", "all")
KEYS = {"task", "cron", "every", "args", "kwargs", "queue", "tz", "missed", "enabled"}
MIN_EVERY_MS = 1000  # an interval of at least a second
# Rows parsed before (from_database), by (default zone, the row's stored columns).
_parsed: dict[tuple, Any] = {}
ROW_FIELDS = ("name", "task", "cron", "every", "queue", "tz", "missed", "enabled")
# What from_settings() found: (the settings' object, default zone, schedules, errors).
_from_settings: tuple | None = None


class ScheduleError(ConfigurationError, ValueError):
    """A schedule that cannot be used; the message names it and says what to do. ``field``
    names the bad entry (the admin's form shows the message beside that field)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.schedule: str | None = None  # the schedule's name, once known (load())


@dataclass(frozen=True)
class Definition:
    name: str
    task: str
    cron: str | None
    every_ms: int | None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    queue: str | None = None
    tz: str = "UTC"
    missed: str = "once"
    enabled: bool = True
    source: str = "settings"  # or "database"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def content(self) -> dict[str, Any]:
        """Everything that decides the occurrences, as JSON-able values."""
        return {
            "task": self.task,
            "cron": self.cron,
            "every_ms": self.every_ms,
            "args": list(self.args),
            "kwargs": self.kwargs,
            "queue": self.queue,
            "tz": self.tz,
            "missed": self.missed,
            "enabled": self.enabled,
        }

    @cached_property
    def digest(self) -> str:
        text = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def describe(self) -> str:
        """'cron 0 3 * * * (Europe/Berlin)' or 'every 30 s'."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.tz})"
        seconds = self.every_ms / 1000 if self.every_ms else 0
        return f"every {seconds:g} s"


def default_zone() -> str:
    return getattr(settings, "TIME_ZONE", None) or "UTC"


def check_cron(expression: Any, name: str = "") -> str:
    where = f"schedule {name!r}: " if name else ""
    if type(expression) is not str or not expression.strip():
        raise ScheduleError(
            f"{where}cron must be a string such as '0 3 * * *', got {expression!r}", "cron"
        )
    expression = " ".join(expression.split())
    if len(expression.split(" ")) != 5:
        raise ScheduleError(
            f"{where}cron {expression!r} must have five fields (minute hour day month "
            "weekday), such as '0 3 * * *'",
            "cron",
        )
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise ScheduleError(f"{where}cron {expression!r} is not valid: {exc}", "cron") from None
    return expression


def check_zone(zone: Any, name: str = "") -> str:
    where = f"schedule {name!r}: " if name else ""
    if type(zone) is not str or not zone:
        raise ScheduleError(f"{where}tz must be an IANA zone name, got {zone!r}", "tz")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"{where}tz {zone!r} is not a known time zone: use an IANA name such as "
            "'Europe/Berlin' or 'UTC'",
            "tz",
        ) from None
    return zone


def check_every(every: Any, name: str = "") -> int:
    """An interval (seconds, or a timedelta) as whole milliseconds, at least a second."""
    where = f"schedule {name!r}: " if name else ""
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise ScheduleError(
            f"{where}every must be a number of seconds or a timedelta, got {every!r}", "every"
        )
    ms = round(seconds * 1000) if seconds == seconds and abs(seconds) < 1e12 else 0
    if ms < MIN_EVERY_MS:
        raise ScheduleError(f"{where}every must be at least 1 second, got {every!r}", "every")
    return ms


def parse(name: Any, spec: Any, source: str = "settings") -> Definition:
    """A Definition from one ``DELAYQ["SCHEDULES"]`` entry; ScheduleError if it is not valid."""
    if type(name) is not str or not NAME.fullmatch(name):
        raise ScheduleError(
            f"schedule name {name!r} must be 1-100 letters, digits, '_', '.', ':' or '-'", "name"
        )
    if not isinstance(spec, dict):
        raise ScheduleError(
            f"schedule {name!r} must be a dict such as {{'task': 'app.tasks.f', "
            f"'cron': '0 3 * * *'}}, got {type(spec).__name__}"
        )
    unknown = sorted(set(spec) - KEYS)
    if unknown:
        raise ScheduleError(
            f"schedule {name!r} has unknown key {unknown[0]!r}: use {', '.join(sorted(KEYS))}"
        )
    task = spec.get("task")
    if type(task) is not str or not task.strip() or " " in task:
        raise ScheduleError(
            f"schedule {name!r}: task must be a task's dotted name such as 'shop.tasks.sweep', "
            f"got {task!r}",
            "task",
        )
    cron, every = spec.get("cron"), spec.get("every")
    if (cron is None) == (every is None):
        raise ScheduleError(
            f"schedule {name!r} needs exactly one of 'cron' (such as '0 3 * * *') and "
            "'every' (seconds or a timedelta)",
            "cron",
        )
    cron_text = check_cron(cron, name) if cron is not None else None
    every_ms = check_every(every, name) if every is not None else None
    args, kwargs = _check_arguments(name, task, spec)
    queue = spec.get("queue") or None
    if queue is not None:
        try:
            check_queue_name(queue)
        except ValueError as exc:
            raise ScheduleError(f"schedule {name!r}: {exc}", "queue") from None
    tz = check_zone(spec.get("tz") or default_zone(), name)
    missed = spec.get("missed", "once")
    if missed not in MISSED:
        raise ScheduleError(
            f"schedule {name!r}: missed must be 'skip', 'once' or 'all', got {missed!r}", "missed"
        )
    enabled = spec.get("enabled", True)
    if type(enabled) is not bool:
        raise ScheduleError(
            f"schedule {name!r}: enabled must be True or False, got {enabled!r}", "enabled"
        )
    return Definition(
        name, task.strip(), cron_text, every_ms, tuple(args), dict(kwargs), queue, tz, missed,
        enabled, source,
    )  # fmt: skip


def _check_arguments(name: str, task: str, spec: dict) -> tuple[list | tuple, dict]:
    """A schedule's args and kwargs, checked: JSON that comes back equal, as schedule()'s."""
    args = spec.get("args", ())
    if not isinstance(args, (list, tuple)):
        raise ScheduleError(f"schedule {name!r}: args must be a list, got {args!r}", "args")
    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, dict) or not all(type(k) is str for k in kwargs):
        raise ScheduleError(
            f"schedule {name!r}: kwargs must be a dict with string keys, got {kwargs!r}", "kwargs"
        )
    try:
        encode_record(task, list(args), kwargs)
    except SerializationError as exc:
        raise ScheduleError(f"schedule {name!r}: {exc}", "args") from None
    return args, kwargs


def from_settings() -> tuple[dict[str, Definition], list[ScheduleError]]:
    """The valid schedules of ``DELAYQ["SCHEDULES"]``, and the errors of the others (parsed
    once per settings object and zone: a pass reads them every few seconds)."""
    global _from_settings
    raw = delayq_settings.SCHEDULES
    memo = _from_settings
    if memo is not None and memo[0] is raw and memo[1] == default_zone():
        return dict(memo[2]), list(memo[3])
    if not isinstance(raw, dict):
        return {}, [ScheduleError(f"DELAYQ['SCHEDULES'] must be a dict, got {raw!r}")]
    found: dict[str, Definition] = {}
    errors: list[ScheduleError] = []
    for name, spec in raw.items():
        try:
            found[name] = parse(name, spec)
        except ScheduleError as exc:
            errors.append(_about(exc, name))
    _from_settings = (raw, default_zone(), found, errors)
    return dict(found), list(errors)


def row_spec(row: Any) -> dict[str, Any]:
    """A Schedule model row as a ``SCHEDULES`` entry."""
    spec: dict[str, Any] = {
        "task": row.task,
        "args": row.args if row.args is not None else [],
        "kwargs": row.kwargs or {},
        "queue": row.queue or None,
        "tz": row.tz or None,
        "missed": row.missed,
        "enabled": bool(row.enabled),
    }
    if row.cron:
        spec["cron"] = row.cron
    if row.every is not None:
        spec["every"] = row.every
    return spec


def from_database(using: str | None = None) -> tuple[dict[str, Definition], list[ScheduleError]]:
    """The valid rows of the Schedule model, and the errors of the others. Each row is
    parsed once: a pass over 10,000 unchanged rows reads their columns as they are stored
    (the arguments as JSON text, not decoded) and looks each up."""
    from django.apps import apps  # not an import of models.py, which imports this module
    from django.db.models import TextField
    from django.db.models.functions import Cast

    schedule_model = apps.get_model("django_delayq", "Schedule")
    found: dict[str, Definition] = {}
    errors: list[ScheduleError] = []
    manager = schedule_model.objects.using(using) if using else schedule_model.objects
    texts = {"args_text": Cast("args", TextField()), "kwargs_text": Cast("kwargs", TextField())}
    zone = default_zone()
    for values in manager.annotate(**texts).values_list(*ROW_FIELDS, *texts):
        memo_key = (zone, *values)
        cached = _parsed.get(memo_key)
        if cached is None:
            row = SimpleNamespace(**dict(zip(ROW_FIELDS, values, strict=False)))
            row.args, row.kwargs = _json(values[-2]), _json(values[-1])
            try:
                cached = parse(row.name, row_spec(row), "database")
            except ScheduleError as exc:
                cached = exc
            if len(_parsed) > 100_000:
                _parsed.clear()
            _parsed[memo_key] = cached
        if isinstance(cached, ScheduleError):
            errors.append(_about(cached, values[0]))
        else:
            found[values[0]] = cached
    return found, errors


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def load(include_database: bool = True) -> tuple[dict[str, Definition], list[ScheduleError]]:
    """Every schedule: the settings' and the database's (a name in both: the settings win,
    and the clash is an error). A schedule whose task this process does not register is
    kept (a worker of other task modules must not cancel it) and is an error too."""
    found, errors = from_settings()
    if include_database:
        rows, row_errors = from_database()
        errors += row_errors
        for name, definition in rows.items():
            if name in found:
                errors.append(_about(clash(name), name))
            else:
                found[name] = definition
    for name, definition in found.items():
        problem = task_error(definition.task)
        if problem:
            errors.append(_about(unregistered(name, problem), name))
    return found, errors


def _about(error: ScheduleError, name: Any) -> ScheduleError:
    error.schedule = name if isinstance(name, str) else repr(name)
    return error


def clash(name: str) -> ScheduleError:
    return ScheduleError(
        f"schedule {name!r} is defined in DELAYQ['SCHEDULES'] and in the database: rename "
        "the database's (the settings' one is used)",
        "name",
    )


def unregistered(name: str, problem: str) -> ScheduleError:
    return ScheduleError(f"schedule {name!r}: {problem}", "task")


def task_error(name: str) -> str | None:
    """Why ``name`` is not a task this process registered, or None (always None with
    ``CHECK_NAMES`` off: the tasks of another code base's workers)."""
    if not delayq_settings.CHECK_NAMES:
        return None
    if not discovered():
        autodiscover()
    if find_task(name) is not None:
        return None
    return str(unknown_task(name))


class ScheduleRow(Protocol):
    """A Schedule row, or anything with its fields (row_spec() reads them)."""

    name: str
    task: str


def check_row(row: ScheduleRow, settings_names: Collection[str] | None = None) -> Definition:
    """``row`` as a Definition, or the ScheduleError that refuses it: not valid (parse), a
    task this process does not register, or a name ``DELAYQ["SCHEDULES"]`` uses. The one
    check of a row: Schedule.clean() (so the admin's form and full_clean()) and the list."""
    definition = parse(row.name, row_spec(row), "database")
    problem = task_error(definition.task)
    if problem:
        raise unregistered(definition.name, problem)
    if definition.name in (from_settings()[0] if settings_names is None else settings_names):
        raise clash(definition.name)
    return definition


class ErrorLog:
    """Logs each schedule's error once, not on every pass: again when its text changes,
    and once when the schedule has none any more (fixed or deleted). One per Reconciler."""

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.logged: dict[str, str] = {}

    def report(self, errors: Iterable[ScheduleError]) -> None:
        current: dict[str, str] = {}
        for error in errors:
            key = error.schedule if error.schedule is not None else ""
            current[key] = f"{current[key]}; {error}" if key in current else str(error)
        for key, text in current.items():
            if self.logged.get(key) != text:
                self.logger.error("recurring schedule error: %s", text)
        for key in self.logged.keys() - current.keys():
            self.logger.info("recurring schedule %r: no error any more", key)
        self.logged = current
