"""The name of the schedule an occurrence belongs to (:attr:`django_delayq.Job.schedule`).

An occurrence's id carries a 40-bit hash of its schedule's name and its version
(ids.py), not the name: the name is what this process's last reconcile pass saw under
that hash (known.py), else the ``ScheduleState`` row with that hash (one indexed query).
"""

from __future__ import annotations

from django_delayq.jobs import job
from django_delayq.recurring import known
from django_delayq.recurring.ids import parse_occurrence_id, version_hash


def schedule_name(job_id: str) -> str | None:
    """The schedule whose occurrence ``job_id`` is, or None: at once for an ordinary job id
    (no query), and for an id whose schedule no ``ScheduleState`` row names any more."""
    parsed = parse_occurrence_id(job_id)
    if parsed is None:
        return None
    _, hashed, version = parsed
    entry = known.known(hashed)
    if entry is not None:
        return entry.name
    from django_delayq.models import ScheduleState

    rows = list(
        ScheduleState.objects.filter(name_hash=hashed).values_list("name", "digest", "generation")
    )
    for name, digest, generation in rows:
        if version_hash(digest, generation) == version:
            return name
    # The schedule changed since the occurrence was made: the hash alone, if one row has it.
    return rows[0][0] if len(rows) == 1 else None


def connect() -> None:
    """Make :attr:`django_delayq.Job.schedule` use :func:`schedule_name` (apps.py)."""
    job.schedule_lookup = schedule_name
