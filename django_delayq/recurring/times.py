"""Fire times and occurrence ids.

Fire times are integer epoch milliseconds. ``every`` schedules fire at the multiples of
their interval since the epoch (so every worker computes the same times, whatever its
clock); cron schedules are evaluated by cronsim in the schedule's zone, which runs a time
that a spring-forward gap skips once at the shift, and a fixed time that the autumn
repeats once (at its first, summer-time, instance).

An occurrence's id has a ULID's shape (26 Crockford base-32 digits), so the admin and
``id_timestamp()`` read its fire time like a job's creation time: 48 bits of fire time,
16 bits of TAG (an occurrence is known by its id alone, without a database query), 40 bits
of a hash of the schedule's name (found again on the job's start) and 24 bits of its
version (a hash of the definition's digest and generation), so a changed schedule's
occurrences never share an id, or a tombstone, with the old one's.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime

from cronsim import CronSim

from django_delayq.recurring.definitions import Definition

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALUE = {c: i for i, c in enumerate(_CROCKFORD)}
TAG = 0xD7C3  # 16 bits that mark an occurrence's id (an ordinary ULID has them by chance
# once in 65,536: its start then costs one look at the known name hashes)
TAG_BITS = 16
NAME_BITS = 40
VERSION_BITS = 24
CRON_SCAN = 100_000  # most fire times a cron scan looks at (a year of minutes is 525,600)


@functools.lru_cache(maxsize=200_000)
def name_hash(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=5).digest(), "big")


@functools.lru_cache(maxsize=200_000)
def version_hash(digest: str, generation: int) -> int:
    raw = hashlib.blake2b(f"{digest}/{generation}".encode(), digest_size=3).digest()
    return int.from_bytes(raw, "big")


def occurrence_id(name: str, version: int, fire_ms: int) -> str:
    value = (fire_ms << 80) | (TAG << 64) | (name_hash(name) << VERSION_BITS) | version
    digits = []
    for _ in range(26):
        digits.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(digits))


# Characters 10 to 12 of a 26-character id hold bits 65 to 79: the tag's top 15 bits.
_TAG_HEAD = "".join(_CROCKFORD[(TAG >> shift) & 31] for shift in (11, 6, 1))


def may_be_occurrence(job_id: str) -> bool:
    """Whether ``job_id`` may be an occurrence's: its tag's first characters are there. An
    ordinary job id (every job a worker runs asks) is turned away by one comparison of
    three characters, not 26 lookups; 1 in 32,768 passes and is parsed in full."""
    return len(job_id) == 26 and job_id[10:13] == _TAG_HEAD


def parse_occurrence_id(job_id: str) -> tuple[int, int, int] | None:
    """(fire_ms, name hash, version) of an occurrence's id; None for any other id."""
    if not may_be_occurrence(job_id):
        return None
    value = 0
    for char in job_id:
        digit = _VALUE.get(char)
        if digit is None:
            return None
        value = value * 32 + digit
    if (value >> 64) & 0xFFFF != TAG:
        return None
    return value >> 80, (value >> VERSION_BITS) & ((1 << NAME_BITS) - 1), value & 0xFFFFFF


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
