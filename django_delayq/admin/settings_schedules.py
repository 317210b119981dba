"""The Recurring schedules page's read-only table: the schedules of ``DELAYQ["SCHEDULES"]``.

They are code, not rows: nothing on the page edits them (change the settings and deploy).
They show beside the database's rows with the same next run, last run and last outcome
(ScheduleState, which workers write for schedules of both sources), so that a newcomer
sees the demo's nightly sweep loaded. An entry workers leave out shows with the reason,
as delayq_status prints it. A database row of a settings schedule's name is ignored by
workers (definitions.load(): the settings win); both tables say so.

Everything here is plain text: the template escapes it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.translation import gettext

from django_delayq.admin.views import arguments_text
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import DelayQError
from django_delayq.recurring import definitions, deploys
from django_delayq.recurring.fire_times import fire_after
from django_delayq.recurring.occurrences import queue_of
from django_delayq.storage.connection import get_store

logger = logging.getLogger("django_delayq.admin")
TASK_CHARS = 40  # a longer dotted name shows as its first and last parts, whole in the title


@dataclass(frozen=True)
class SettingsRow:
    """One entry of ``DELAYQ["SCHEDULES"]`` as the page shows it (``problem`` set and the
    timing empty for an entry workers leave out)."""

    name: str
    task: str
    task_short: str  # its middle cut when long (short_task)
    arguments: str = ""
    timing: str = ""
    tz: str = ""
    missed: str = ""
    queue: str = ""
    enabled: bool = False
    next_run: str = ""  # in ``zone``, with its abbreviation (schedule_time)
    last_run: str = ""
    zone: str = ""  # the zone of its times: its own (cron), else the current one (TIME_ZONE)
    outcome: str = ""
    problem: str = ""
    shadows_row: bool = False  # a database row of this name exists; workers ignore it

    @property
    def task_parts(self) -> list[str]:
        """The shown name's parts, for a line break after each dot (never inside one)."""
        return self.task_short.split(".")


def zone_of(definition: definitions.Definition | None) -> str:
    """The zone a schedule's times are shown in: a cron schedule's own (its cron is read
    there), else the admin's current zone (TIME_ZONE, unless a middleware activated one)."""
    if definition is not None and definition.cron is not None:
        return definition.tz
    return timezone.get_current_timezone_name()


def schedule_time(ms: int | None, zone: str) -> str:
    """A schedule's fire time in ``zone``, as the admin's other times show (the zone's
    abbreviation after it): "2026-12-03 03:00:00 CET"; "" for none."""
    if ms is None:
        return ""
    return format_date(datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)), "Y-m-d H:i:s T")


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def next_run_ms(definition: definitions.Definition, state: Any, now: int) -> int:
    """The first fire time after now that workers may still create: none at or before the
    definition's start or the last fire time that started (ScheduleState's rule)."""
    floor = max(now, state.since_ms, state.last_fire_ms or 0) if state is not None else now
    return fire_after(definition, floor)


def short_task(name: str) -> str:
    """``…ledger_tasks.sweep_unpaid_orders`` for a long dotted name: its module's path
    left out but for the last part, which names the file."""
    parts = name.split(".")
    if len(name) <= TASK_CHARS or len(parts) < 3:
        return name
    return "…" + ".".join(parts[-2:])


def timing(definition: definitions.Definition) -> str:
    if definition.cron is not None:
        return definition.cron
    seconds = (definition.every_ms or 0) / 1000
    return gettext("every %(seconds)s s") % {"seconds": f"{seconds:g}"}


def settings_rows(
    states: dict[str, Any], database_names: Collection[str] = (), now: int | None = None
) -> list[SettingsRow]:
    """Every entry of ``DELAYQ["SCHEDULES"]``, by name; ``states`` are the ScheduleState
    rows by name, ``database_names`` the Schedule rows' names that the settings also use."""
    now = now_ms() if now is None else now
    found, errors = definitions.from_settings()
    rows = [_row(d, states.get(name), name in database_names, now) for name, d in found.items()]
    raw = delayq_settings.SCHEDULES
    for error in errors:
        spec = raw.get(error.schedule) if isinstance(raw, dict) and error.schedule else None
        task = spec.get("task") if isinstance(spec, dict) else None
        task = task if isinstance(task, str) else ""
        name = error.schedule or "DELAYQ['SCHEDULES']"
        rows.append(SettingsRow(name, task, short_task(task), problem=str(error)))
    return sorted(rows, key=lambda row: row.name)


def _row(definition: definitions.Definition, state: Any, shadows: bool, now: int) -> SettingsRow:
    d = definition
    last = state.last_fire_ms if state is not None else None
    zone = zone_of(d)
    return SettingsRow(
        name=d.name,
        task=d.task,
        task_short=short_task(d.task),
        arguments=arguments_text(d.args, d.kwargs),
        timing=timing(d),
        tz=d.tz if d.cron is not None else "",
        missed=d.missed,
        queue=queue_of(d),
        enabled=d.enabled,
        next_run=schedule_time(next_run_ms(d, state, now), zone) if d.enabled else "",
        last_run=schedule_time(last, zone),
        zone=zone,
        outcome=(state.last_outcome if state is not None else "") or "",
        problem=definitions.task_error(d.task) or "",
        shadows_row=shadows,
    )


def workers_version_differs(store: Any = None, now: int | None = None) -> bool:
    """Whether the workers follow another version of ``DELAYQ["SCHEDULES"]`` than this
    process's settings (a deploy under way, or a web process of other code): then the
    table shows what this process reads, not what workers run. False when no worker ran
    lately or Redis cannot say (the page goes on without the note)."""
    now = now_ms() if now is None else now
    ours = deploys.settings_version(definitions.from_settings()[0])
    try:
        current = deploys.current_version(store or get_store(), now)
    except DelayQError as exc:
        logger.warning("admin: cannot read the workers' settings versions: %s", exc)
        return False
    return current is not None and current != ours
