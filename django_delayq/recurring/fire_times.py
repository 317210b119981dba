"""Fire times: when a schedule fires (occurrence ids are in ids.py).

Fire times are integer epoch milliseconds. ``every`` schedules fire at the multiples of
their interval since the epoch (so every worker computes the same times, whatever its
clock); cron schedules are evaluated by cronsim in the schedule's zone, which runs a time
that a spring-forward gap skips once at the shift, and a fixed time that the autumn
repeats once (at its first, summer-time, instance).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from cronsim import CronSim

from django_delayq.recurring.definitions import Definition
from django_delayq.recurring.ids import (  # noqa: F401  (0.4's recurring/times.py held them)
    may_be_occurrence,
    name_hash,
    occurrence_id,
    parse_occurrence_id,
    version_hash,
)

CRON_SCAN = 100_000  # most fire times a cron scan looks at (a year of minutes is 525,600)


class _CronSim(CronSim):
    """cronsim, whose hour step lands on the next (or previous) hour of the wall clock.

    For an expression with a wildcard minute or hour (``*/30 2 * * *``) cronsim steps
    through the zone's real time, an hour at a time from the start of an hour. Across a
    30-minute shift that lands at :30: on 2026-04-05 Australia/Lord_Howe repeats
    01:30-02:00, the step from 01:00 (+11:00) lands on the second 01:30 (+10:30) and the
    next on 02:30, so 02:00 (+10:30, 15:30 UTC) never ran; stepping back over the spring
    gap skipped 01:30-01:59 the same way (cronsim 2.8). Whole-hour shifts (Berlin) and
    fixed times (``0 2 * * *``, which cronsim evaluates on the naive wall clock) step as
    before: the steps below are then exactly cronsim's 3,600 s.
    """

    def advance_hour(self) -> bool:
        if self.dt.hour in self.hours:
            return False
        self.dt = self.dt.replace(minute=0, second=0)
        while self.dt.hour not in self.hours:
            self.tick(seconds=3600 - self.dt.minute * 60)  # to the next :00
            if self.dt.hour == 0:
                break  # re-check month and day
        return True

    def reverse_hour(self) -> bool:
        if self.dt.hour in self.hours:
            return False
        self.dt = self.dt.replace(minute=59, second=59)
        while self.dt.hour not in self.hours:
            # To the last second before this hour began in real time (its :00, or the
            # shift where the spring gap swallowed the :00).
            began = self.dt.replace(minute=0, second=0)
            if self.dt.tzinfo is None:  # a fixed time: cronsim's naive wall clock
                since = self.dt - began
            else:  # real time (one zone's datetimes subtract as wall clocks)
                since = self.dt.astimezone(UTC) - began.astimezone(UTC)
            self.tick(seconds=int(since.total_seconds()) + 1)
            if self.dt.hour == 23:
                break  # re-check month and day
        return True


def _cron_after(definition: Definition, after_ms: int) -> Iterator[int]:
    start = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(definition.zone)
    for moment in _CronSim(definition.cron or "", start):
        yield int(moment.timestamp() * 1000)


def fire_after(definition: Definition, after_ms: int) -> int:
    """The first fire time strictly after ``after_ms``."""
    every = definition.every_ms
    if every:
        return (after_ms // every + 1) * every
    for fire in _cron_after(definition, after_ms):
        if fire > after_ms:
            return fire
    raise AssertionError("unreachable")  # pragma: no cover - CronSim never ends


_next: dict[tuple[str, int], int] = {}


def next_fire(definition: Definition, after_ms: int) -> int:
    """fire_after, remembered: passes and claims ask the same question of each schedule
    (the first fire time after its last one) until that fire time comes."""
    key = (definition.digest, after_ms)
    found = _next.get(key)
    if found is None:
        if len(_next) > 200_000:
            _next.clear()
        found = _next[key] = fire_after(definition, after_ms)
    return found


def fires_between(definition: Definition, low_ms: int, high_ms: int, limit: int) -> list[int]:
    """The last ``limit`` fire times in (low_ms, high_ms], oldest first."""
    if high_ms <= low_ms or limit <= 0:
        return []
    every = definition.every_ms
    if every:
        last = high_ms // every * every
        first = max(low_ms // every + 1, last // every - limit + 1) * every
        return list(range(first, last + 1, every))
    # Backwards from high_ms (cronsim's reverse iteration), so a low bound far in the past
    # costs nothing: at most `limit` steps, plus those beyond high_ms.
    start = datetime.fromtimestamp((high_ms + 1) / 1000, UTC).astimezone(definition.zone)
    found: list[int] = []
    for scanned, moment in enumerate(_CronSim(definition.cron or "", start, reverse=True)):
        fire = int(moment.timestamp() * 1000)
        if fire <= low_ms or scanned >= CRON_SCAN:
            break
        if fire <= high_ms:
            found.append(fire)
            if len(found) >= limit:
                break
    return found[::-1]
