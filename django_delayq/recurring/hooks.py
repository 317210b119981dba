"""What a worker does when an occurrence starts and ends (receivers of django-delayq's
signals, connected by apps.py).

On ``job_started`` of an occurrence, before its task runs: the durable record (the
schedule's ``last_fire_ms`` is raised to this fire time in the database), then its successor
(the next fire time, stored by occur.lua), so the chain goes on without waiting for a
reconcile pass: one UPDATE and one script when this process's last pass saw the schedule
(known.py), else the UPDATE, two reads and the script. On success, failure or death: the
schedule's last outcome.

Ordinary jobs cost a dict lookup here: a job id is looked up in the database only when its
bits name a known schedule (the set of name hashes, read again at most once a second when an
id is not in it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from django_delayq.recurring import definitions, known
from django_delayq.recurring.times import (
    fire_after,
    may_be_occurrence,
    occurrence_id,
    parse_occurrence_id,
)

logger = logging.getLogger("django_delayq.recurring")

# Tests replace Redis's clock (epoch seconds) for successors; None: Redis's TIME.
clock: Callable[[], float] | None = None

_known: set[int] = set()
_known_at = -1e9
_known_lock = threading.Lock()
REFRESH = 1.0  # seconds between two reads of the name hashes when an id is not among them


def _schedule_hash(job_id: str) -> tuple[int, int, int] | None:
    global _known, _known_at
    parsed = parse_occurrence_id(job_id)
    if parsed is None:
        return None
    if parsed[1] in _known:
        return parsed
    with _known_lock:
        if time.monotonic() - _known_at < REFRESH:
            return None
        from django_delayq.models import ScheduleState

        _known_at = time.monotonic()
        try:
            _known = set(ScheduleState.objects.values_list("name_hash", flat=True))
        except DatabaseError as exc:  # migration 0004 not applied: no schedules
            if _known:
                logger.warning("cannot read the recurring schedules' states: %s", exc)
            _known = set()
    return parsed if parsed[1] in _known else None


def forget_known() -> None:
    """Read the name hashes again on the next start, and trust no pass's entries (tests)."""
    global _known_at
    _known_at = -1e9
    known.remember({})


def definition_named(name: str) -> definitions.Definition | None:
    from django_delayq.models import Schedule

    found, _ = definitions.from_settings()
    if name in found:
        return found[name]
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        return None
    try:
        return definitions.parse_row(row)
    except definitions.ScheduleError:
        return None


def on_started(sender: Any, job: Any, **kwargs: Any) -> None:
    parsed = _schedule_hash(job.id)
    if parsed is None:
        return
    from django_delayq.models import ScheduleState
    from django_delayq.recurring.reconcile import version_of

    fire, hashed, version = parsed
    # The durable record first: no occurrence at or before `fire` is created again.
    record_fire = ScheduleState.objects.filter(name_hash=hashed).filter(
        Q(last_fire_ms__isnull=True) | Q(last_fire_ms__lte=fire)
    )
    fields = {
        "last_fire_ms": fire,
        "last_job_id": job.id,
        "last_started_at": timezone.now(),
        "last_outcome": "running",
        "last_finished_at": None,
    }
    entry = known.known(hashed)
    # Fast path: one UPDATE that also proves the entry current (generation, digest); it set
    # last_fire_ms to `fire`, so the successor follows max(fire, since_ms).
    if (
        entry is not None
        and entry.version == version
        and record_fire.filter(generation=entry.generation, digest=entry.digest).update(**fields)
    ):
        _successor(entry.name, entry.definition, version, max(fire, entry.since_ms), fire)
        return
    record_fire.update(**fields)
    state = ScheduleState.objects.filter(name_hash=hashed).first()
    if state is None or version_of(state) != version:
        return  # an occurrence of an older definition: the reconcile pass keeps the chain
    definition = definition_named(state.name)
    if definition is None or not definition.enabled or definition.digest != state.digest:
        return
    after = max(fire, state.since_ms, state.last_fire_ms or 0)
    _successor(state.name, definition, version, after, fire)


def _successor(
    name: str, definition: definitions.Definition, version: int, after: int, fire: int
) -> None:
    """Store the occurrence after ``after`` (occur.lua: at most once)."""
    from django_delayq.recurring.reconcile import encoded
    from django_delayq.storage.connection import get_store
    from django_delayq.storage.recurring import occur

    successor = fire_after(definition, after)
    job_id = occurrence_id(name, version, successor)
    now = clock() if clock is not None else None
    # Decided no earlier than `fire` (a job never starts before it is due on Redis's clock).
    record, queue = encoded(definition)
    occur(get_store(), queue, [(job_id, record, successor)], fire, now)


def _outcome(job: Any, outcome: str) -> None:
    if _schedule_hash(job.id) is None:
        return
    from django_delayq.models import ScheduleState

    ScheduleState.objects.filter(last_job_id=job.id).update(
        last_outcome=outcome, last_finished_at=timezone.now()
    )


def on_succeeded(sender: Any, job: Any, **kwargs: Any) -> None:
    _outcome(job, "succeeded")


def on_failed(sender: Any, job: Any, will_retry: bool = False, **kwargs: Any) -> None:
    _outcome(job, "retrying" if will_retry else "failed")


def on_dead(sender: Any, job: Any, **kwargs: Any) -> None:
    _outcome(job, "dead")


def connect() -> None:
    """Hook the receivers above to the job signals (signals.hook: called directly, not
    through Django's dispatch, which every job would pay for), only for jobs whose id may be
    an occurrence's: an ordinary job costs one look at three characters of its id per
    signal. On a worker's event loop, what may be an occurrence is sent through a thread
    (the ORM)."""
    from django_delayq import signals

    signals.hook(signals.job_started, on_started, _maybe_occurrence)
    signals.hook(signals.job_succeeded, on_succeeded, _maybe_occurrence)
    signals.hook(signals.job_failed, on_failed, _maybe_occurrence)
    signals.hook(signals.job_dead, on_dead, _maybe_occurrence)


def _maybe_occurrence(job: Any) -> bool:
    return may_be_occurrence(job.id)
