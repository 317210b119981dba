"""Which schedules are in trouble, for ``delayq_status`` and ``/metrics``.

- missing: an enabled schedule whose next occurrence (the first fire time after now) is not
  in Redis: no worker ran a reconcile pass lately (none is running?) or Redis lost it
- overdue: an enabled schedule whose latest fire time older than OVERDUE_AFTER never started
  (no worker free, or all of them down)
- error: a schedule workers leave out (a bad row, or a row whose name the settings use) or
  whose task this process does not register (definitions.load()'s errors); a bad row is
  listed with ``enabled`` False and no timing
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

from django_delayq.recurring import definitions
from django_delayq.recurring.fire_times import fire_after, fires_between
from django_delayq.recurring.ids import occurrence_id
from django_delayq.recurring.occurrences import queue_of
from django_delayq.recurring.reconcile import version_of
from django_delayq.recurring.tables import migrated_tables
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.recurring")
OVERDUE_AFTER_MS = 60_000


@dataclass(frozen=True)
class ScheduleStatus:
    name: str
    enabled: bool
    describe: str
    next_fire_ms: int | None
    last_fire_ms: int | None
    last_outcome: str
    missing: bool
    overdue: bool
    error: str = ""


def report(store: Store, now_ms: int | None = None) -> list[ScheduleStatus]:
    from django_delayq.models import ScheduleState

    now = store.recurring.server_time_ms() if now_ms is None else now_ms
    found, errors = definitions.load()
    states = {s.name: s for s in ScheduleState.objects.filter(name__in=list(found))}
    errors_of = _errors(errors)
    out = [
        ScheduleStatus(name, False, "", None, None, "", False, False, error)
        for name, error in errors_of.items()
        if name not in found
    ]
    for name, definition in found.items():
        status = _status(store, definition, states.get(name), now)
        out.append(replace(status, error=errors_of.get(name, "")))
    return sorted(out, key=lambda s: s.name)


def _errors(errors: list[definitions.ScheduleError]) -> dict[str, str]:
    """Each schedule's errors, by name (a SCHEDULES that is not a dict: under its name)."""
    found: dict[str, list[str]] = {}
    for error in errors:
        found.setdefault(error.schedule or "DELAYQ['SCHEDULES']", []).append(str(error))
    return {name: "; ".join(texts) for name, texts in found.items()}


def _status(
    store: Store, definition: definitions.Definition, state: Any, now: int
) -> ScheduleStatus:
    name, describe = definition.name, definition.describe()
    if not definition.enabled:
        return ScheduleStatus(name, False, describe, None, None, "", False, False)
    if state is None or state.digest != definition.digest:
        # No worker has seen this definition yet: nothing of it can be in Redis.
        nxt = fire_after(definition, now)
        return ScheduleStatus(name, True, describe, nxt, None, "", True, False)
    floor = max(state.since_ms, state.last_fire_ms or 0)
    nxt = fire_after(definition, max(now, floor))
    job_id = occurrence_id(name, version_of(state), nxt)
    missing = not store.recurring.exists(queue_of(definition), [job_id])[0]
    due = fires_between(definition, state.since_ms, now - OVERDUE_AFTER_MS, 1)
    overdue = bool(due) and (state.last_fire_ms is None or state.last_fire_ms < due[-1])
    last = state.last_fire_ms
    return ScheduleStatus(name, True, describe, nxt, last, state.last_outcome, missing, overdue)


def safe_report(store: Store) -> list[ScheduleStatus]:
    """:func:`report`, or [] where the schedules' tables do not exist yet (migration 0004
    not applied) or the database cannot be read (the queues' report goes on without it)."""
    from django.db import DatabaseError

    from django_delayq.exceptions import DelayQError

    try:
        with migrated_tables():  # a missing table: the warning names the command to run
            return report(store)
    except (DatabaseError, DelayQError) as exc:
        logger.warning("recurring schedules cannot be read: %s", exc)
        return []


def as_dicts(found: list[ScheduleStatus]) -> list[dict]:
    return [asdict(s) for s in found]


def as_lines(found: list[ScheduleStatus]) -> list[str]:
    """One line per trouble of a schedule (delayq_status's text; any line: exit 1)."""
    lines = []
    for s in found:
        if s.error:
            timing = f" ({s.describe})" if s.describe else ""
            lines.append(f"SCHEDULE {s.name}{timing}: INVALID: {s.error}")
        if s.missing:
            lines.append(f"SCHEDULE {s.name} ({s.describe}): MISSING its next occurrence")
        if s.overdue:
            lines.append(f"SCHEDULE {s.name} ({s.describe}): OVERDUE, last run {s.last_fire_ms}")
    return lines


class ScheduleCollector:
    """Gauges for /metrics: delayq_schedule_missing and delayq_schedule_overdue (0 or 1)
    per enabled schedule, delayq_schedule_invalid (0 or 1) per schedule and bad row."""

    def __init__(self, found: list[ScheduleStatus]) -> None:
        self.found = found

    def collect(self):  # type: ignore[no-untyped-def]
        from prometheus_client.core import GaugeMetricFamily

        for name, doc, attribute in (
            (
                "delayq_schedule_missing",
                "1: the schedule's next occurrence is not in Redis.",
                "missing",
            ),
            (
                "delayq_schedule_overdue",
                "1: a fire time over a minute old never started.",
                "overdue",
            ),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["schedule"])
            for s in self.found:
                if s.enabled:
                    gauge.add_metric([s.name], float(getattr(s, attribute)))
            yield gauge
        gauge = GaugeMetricFamily(
            "delayq_schedule_invalid",
            "1: workers leave the schedule out (a bad row) or this process does not "
            "register its task; delayq_status names the reason.",
            labels=["schedule"],
        )
        for s in self.found:
            gauge.add_metric([s.name], float(bool(s.error)))
        yield gauge
