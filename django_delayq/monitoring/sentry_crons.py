"""Check-ins of recurring schedules to Sentry's cron monitors (optional, opt-in).

Each attempt of an occurrence of a schedule ``DELAYQ["SENTRY_CRONS"]`` selects is one
check-in: ``in_progress`` when the worker starts it, then ``ok`` when it returns or
``error`` when it fails (a retry is a new check-in). The check-in id is derived from the
job id and the attempt number, so the worker that recovers an attempt whose worker died
closes that attempt's check-in with ``error``. Each check-in carries the monitor's config
(the schedule's cron and zone, or its interval), so Sentry creates or updates the monitor and
alerts when the schedule stops firing. A skipped occurrence (its ``missed`` policy) sends
nothing: Sentry sees a missed check-in, as it should.

The hooks run for occurrences only (one look at three characters of every other job's
id), never query the database on an event loop, and send through the SDK's background
transport.
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from typing import Any

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.monitoring.sentry_client import sdk
from django_delayq.recurring import known
from django_delayq.recurring.ids import may_be_occurrence, parse_occurrence_id

# What a SENTRY_CRONS dict may give a schedule: the slug, and Sentry's monitor options
# (minutes for the margin and the runtime).
NUMBER_OPTIONS = ("checkin_margin", "max_runtime", "failure_issue_threshold", "recovery_threshold")
OPTIONS = ("slug", "owner", *NUMBER_OPTIONS)
SLUG_LIMIT = 50
SLUG = re.compile(r"[a-z0-9_-]{1,50}")
_NOT_SLUG = re.compile(r"[^a-z0-9_-]+")
_NAMESPACE = uuid.UUID("6f0c1f4e-3a8e-4d38-9d5b-6a1c2f1e9b7a")
MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000


def connect() -> None:
    signals.hook(signals.job_started, on_started, _maybe_occurrence)
    signals.hook(signals.job_succeeded, on_succeeded, _maybe_occurrence)
    signals.hook(signals.job_failed, on_failed, _maybe_occurrence)


def _maybe_occurrence(job: Any) -> bool:
    return may_be_occurrence(job.id)


def on_started(sender: Any, job: Any, **kwargs: Any) -> None:
    checkin(job, "in_progress")


def on_succeeded(sender: Any, job: Any, duration: float | None = None, **kwargs: Any) -> None:
    checkin(job, "ok", duration)


def on_failed(sender: Any, job: Any, **kwargs: Any) -> None:
    checkin(job, "error")


def checkin(job: Any, status: str, duration: float | None = None) -> None:
    if not delayq_settings.SENTRY_CRONS:
        return
    module = sdk()
    found = monitor_of(job) if module is not None else None
    if found is None:
        return
    from sentry_sdk.crons import capture_checkin

    slug, config = found
    capture_checkin(
        monitor_slug=slug,
        check_in_id=checkin_id(job.id, job.attempts),
        status=status,
        duration=duration,
        monitor_config=config,
    )


def checkin_id(job_id: str, attempt: int) -> str:
    """The same for one attempt in every process (the recovery closes a dead worker's)."""
    return uuid.uuid5(_NAMESPACE, f"{job_id}/{attempt}").hex


def monitor_of(job: Any) -> tuple[str, dict[str, Any] | None] | None:
    """(slug, monitor config) for an occurrence of a selected schedule, else None."""
    parsed = parse_occurrence_id(job.id)
    if parsed is None:
        return None
    entry = known.known(parsed[1])
    if entry is not None:
        name, definition = entry.name, entry.definition
    else:  # no reconcile pass here saw it: the name (a query, never on an event loop)
        name, definition = _unseen(job)
    if name is None:
        return None
    options = selected(delayq_settings.SENTRY_CRONS, name)
    if options is None:
        return None
    return options.get("slug") or slug_of(name), monitor_config(definition, options)


def _unseen(job: Any) -> tuple[str | None, Any]:
    try:
        asyncio.get_running_loop()
        return None, None  # on the worker's event loop: no query
    except RuntimeError:
        pass
    from django_delayq.recurring.definitions import from_settings

    name = job.schedule
    return name, from_settings()[0].get(name) if name is not None else None


def selected(crons: Any, name: str) -> dict[str, Any] | None:
    """The options of schedule ``name`` in SENTRY_CRONS, or None when it does not check in."""
    if crons is True:
        return {}
    if isinstance(crons, dict):
        found = crons.get(name, False)
        if found is False:
            return None
        return dict(found) if isinstance(found, dict) else {}
    if isinstance(crons, (list, tuple)) and name in crons:
        return {}
    return None


def slug_of(name: str) -> str:
    """A schedule name as a monitor slug: lowercase letters, digits, '_' and '-', at most 50
    characters ('Nightly.Report' -> 'nightly-report')."""
    return _NOT_SLUG.sub("-", name.lower()).strip("-")[:SLUG_LIMIT] or "schedule"


def monitor_config(definition: Any, options: dict[str, Any]) -> dict[str, Any] | None:
    """Sentry's monitor config: the schedule's cron and zone, or its interval (rounded up to
    whole minutes, Sentry's smallest unit), and the options given in SENTRY_CRONS."""
    config: dict[str, Any] = {}
    if definition is not None and definition.cron is not None:
        config["schedule"] = {"type": "crontab", "value": definition.cron}
        config["timezone"] = definition.tz
    elif definition is not None and definition.every_ms:
        value, unit = interval(definition.every_ms)
        config["schedule"] = {"type": "interval", "value": value, "unit": unit}
    for key in ("owner", *NUMBER_OPTIONS):
        if key in options:
            config[key] = options[key]
    return config or None


def interval(every_ms: int) -> tuple[int, str]:
    """An interval as (value, unit): whole days or hours when it is one, else minutes
    (rounded up)."""
    if every_ms % DAY == 0:
        return every_ms // DAY, "day"
    if every_ms % HOUR == 0:
        return every_ms // HOUR, "hour"
    return math.ceil(every_ms / MINUTE), "minute"


def slug_clashes(crons: Any, schedules: Any) -> list[tuple[str, list[str]]]:
    """(slug, names) of the schedules that would check in to one Sentry monitor: the
    settings' schedules (``schedules``, DELAYQ["SCHEDULES"]) and the names SENTRY_CRONS
    lists, as selected, by their own ``slug`` or :func:`slug_of` ('Nightly.Report' and
    'nightly-report' share one). Database schedules are not known here."""
    names = set(schedules) if isinstance(schedules, dict) else set()
    if isinstance(crons, (dict, list, tuple)):
        names |= {name for name in crons if isinstance(name, str)}
    by_slug: dict[str, list[str]] = {}
    for name in sorted(names):
        options = selected(crons, name)
        if options is not None:
            slug = options.get("slug") or slug_of(name)
            by_slug.setdefault(slug, []).append(name)
    return [(slug, found) for slug, found in sorted(by_slug.items()) if len(found) > 1]


def problems(crons: Any) -> list[str]:
    """What is wrong with a SENTRY_CRONS value (checks.py: delayq.E014)."""
    if isinstance(crons, bool):
        return []
    if isinstance(crons, (list, tuple)):
        return [f"{name!r} is not a schedule name" for name in crons if not isinstance(name, str)]
    if not isinstance(crons, dict):
        return [f"it must be True, False, a list of schedule names or a dict, got {crons!r}"]
    found = []
    for name, options in crons.items():
        if options is None or isinstance(options, bool):
            continue
        if not isinstance(options, dict):
            found.append(f"{name!r} -> {options!r}: give a dict of options, True or None")
            continue
        found += [f"{name!r}: {problem}" for problem in _option_problems(options)]
    return found


def _option_problems(options: dict) -> list[str]:
    known_ones = ", ".join(OPTIONS)
    found = [f"unknown option {key!r} (use {known_ones})" for key in options if key not in OPTIONS]
    for key in NUMBER_OPTIONS:
        value = options.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            found.append(f"{key} must be a whole number >= 1, got {value!r}")
    slug = options.get("slug", "x")
    if not isinstance(slug, str) or not SLUG.fullmatch(slug):
        found.append(f"slug must be 1-50 lowercase letters, digits, '_' or '-', got {slug!r}")
    owner = options.get("owner", "")
    if not isinstance(owner, str):
        found.append(f"owner must be a string such as 'user:jane@example.com', got {owner!r}")
    return found
