"""Which schedules are in trouble, for ``delayq_status`` and ``/metrics``.

- missing: an enabled schedule whose next occurrence (the first fire time after now) is not
  in Redis: no worker ran a reconcile pass lately (none is running?) or Redis lost it
- overdue: an enabled schedule whose latest fire time older than OVERDUE_AFTER never started
  (no worker free, or all of them down)
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from django_delayq.recurring import definitions
from django_delayq.recurring.reconcile import queue_of, version_of
from django_delayq.recurring.times import fire_after, fires_between, occurrence_id
from django_delayq.storage.recurring import exists, server_time_ms
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


def report(store: Store, now_ms: int | None = None) -> list[ScheduleStatus]:
    from django_delayq.models import ScheduleState

    now = server_time_ms(store) if now_ms is None else now_ms
    found, _ = definitions.load()
    states = {s.name: s for s in ScheduleState.objects.filter(name__in=list(found))}
    out: list[ScheduleStatus] = []
    for name, definition in sorted(found.items()):
        state = states.get(name)
        if not definition.enabled:
            out.append(
                ScheduleStatus(name, False, definition.describe(), None, None, "", False, False)
            )
            continue
        if state is None or state.digest != definition.digest:
            # No worker has seen this definition yet: nothing of it can be in Redis.
            nxt = fire_after(definition, now)
            out.append(
                ScheduleStatus(name, True, definition.describe(), nxt, None, "", True, False)
            )
            continue
        floor = max(state.since_ms, state.last_fire_ms or 0)
        nxt = fire_after(definition, max(now, floor))
        job_id = occurrence_id(name, version_of(state), nxt)
        missing = not exists(store, queue_of(definition), [job_id])[0]
        due = fires_between(definition, state.since_ms, now - OVERDUE_AFTER_MS, 1)
        overdue = bool(due) and (state.last_fire_ms is None or state.last_fire_ms < due[-1])
        out.append(
            ScheduleStatus(
                name,
                True,
                definition.describe(),
                nxt,
                state.last_fire_ms,
                state.last_outcome,
                missing,
                overdue,
            )
        )
    return out


def safe_report(store: Store) -> list[ScheduleStatus]:
    """:func:`report`, or [] where the schedules' tables do not exist yet (migration 0004
    not applied) or the database cannot be read (the queues' report goes on without it)."""
    from django.db import DatabaseError

    from django_delayq.exceptions import DelayQError

    try:
        return report(store)
    except (DatabaseError, DelayQError) as exc:
        logger.warning("recurring schedules cannot be read: %s", exc)
        return []


def as_dicts(found: list[ScheduleStatus]) -> list[dict]:
    return [asdict(s) for s in found]


def as_lines(found: list[ScheduleStatus]) -> list[str]:
    """One line per schedule in trouble (delayq_status's text)."""
    lines = []
    for s in found:
        if s.missing:
            lines.append(f"SCHEDULE {s.name} ({s.describe}): MISSING its next occurrence")
        if s.overdue:
            lines.append(f"SCHEDULE {s.name} ({s.describe}): OVERDUE, last run {s.last_fire_ms}")
    return lines


class ScheduleCollector:
    """Gauges for /metrics: delayq_schedule_missing and delayq_schedule_overdue (0 or 1)
    per enabled schedule."""

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
