"""What the job page shows of a job's steering options (issue 36) beyond its Job's fields
(expires_at, unique_until, unique_for, waits_for: the template reads those): its debounce
(``max_wait``: the first due time kept for its key, the cap) and its group with the
queue's fairness. Read only for a job whose record has the option's flag (one HGET, or one
indexed SELECT for a row), so a plain job's page costs nothing more."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_delayq.conf.queues import is_fair
from django_delayq.exceptions import CorruptJob, DelayQError
from django_delayq.jobs.job import PENDING, Job, decode_fields
from django_delayq.jobs.record import FLAG_DEBOUNCED, FLAG_GROUPED, Fields
from django_delayq.jobs.times import to_datetime
from django_delayq.outbox import rows as outbox
from django_delayq.scheduling.registry import find_task
from django_delayq.storage.store import Store


@dataclass(frozen=True)
class Debounce:
    """A debounced job (``max_wait``): the first due time of its key's job (None when not
    known: not kept, or Redis did not answer), the cap (seconds: the row's call's, else
    the task's default ``@task(max_wait=...)``; None when neither says: the cap is each
    replacing call's own) and the latest due time a replace may give it."""

    first_due: datetime | None
    max_wait: float | None
    latest: datetime | None


@dataclass(frozen=True)
class Grouping:
    """The group a job was scheduled with (None: none, or not known) and whether its queue
    claims in turns group by group (``DELAYQ["QUEUES"][q]["fair"]``)."""

    group: str | None
    fair: bool


def debounce(store: Store, job: Job, fields: Fields) -> Debounce | None:
    """The debounce of a pending job scheduled with max_wait (record flag 'd'), else None."""
    if FLAG_DEBOUNCED not in fields.flags or job.key is None or job.status != PENDING:
        return None
    task = find_task(job.task)
    cap = None if task is None else task.max_wait
    first: float | None = None
    if job.waits_in == "database":
        row = outbox.find(job.id, job.queue)
        if row is not None:
            first = row.due_at if row.first_due is None else row.first_due
            cap = row.max_wait if row.max_wait is not None else cap
    else:
        try:
            first = store.first_due(job.queue, job.key, job.id)
        except DelayQError:
            first = None
    latest = None if first is None or cap is None else to_datetime(first + cap)
    return Debounce(None if first is None else to_datetime(first), cap, latest)


def grouping(job: Job, fields: Fields) -> Grouping | None:
    """The group of a job scheduled with one (record flag 'g'), else None."""
    if FLAG_GROUPED not in fields.flags:
        return None
    if job.waits_in == "database":  # its row keeps it (outbox/rows.py)
        row = outbox.find(job.id, job.queue)
        return Grouping(None if row is None else row.group, is_fair(job.queue))
    try:
        group = job.group
    except DelayQError:
        group = None
    return Grouping(group, is_fair(job.queue))


def fields_shown(store: Store, job: Job, record: bytes | None) -> dict[str, object]:
    """The job page's context for these options (``debounce``, ``grouping``: None when
    the job has neither, or its record cannot be read)."""
    try:
        fields = decode_fields(record) if record else None
    except CorruptJob:
        fields = None
    if fields is None:
        return {"debounce": None, "grouping": None}
    return {"debounce": debounce(store, job, fields), "grouping": grouping(job, fields)}
