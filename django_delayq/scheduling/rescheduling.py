"""reschedule(): a pending job's due time moved, wherever the job waits.

In Redis the store's reschedule transition moves it in one script (lua/reschedule.lua:
atomic against a worker's claim, so the job is moved while pending or not at all). In the
database outbox (an on_commit job whose transaction has not committed, a job beyond
``DELAYQ["HORIZON"]``) the row's due time is updated in the caller's transaction, and a row
the move brings within the horizon is relayed once that commits. A job in Redis moved
beyond the horizon stays in Redis (it is as on time there; only its wait is longer).

A job moved is announced by ``job_rescheduled`` (signals.py, ``send_robust``): once Redis
answered, or for a row once the caller's transaction commits (never for a move rolled back).
reschedule() is an explicit move: ``max_wait`` (a debounce's cap) does not bound it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.jobs.job import PENDING, Job, decode_fields, make_job
from django_delayq.outbox import placement
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.outbox.database_time import When
from django_delayq.scheduling.api import search_queues
from django_delayq.scheduling.plan import beyond_horizon, relay_beyond_horizon, when
from django_delayq.scheduling.registry import sender
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.reschedule import Rescheduled

RESCHEDULED = "rescheduled"  # Job.outcome of the Job reschedule() returns


def reschedule_options(job_id: Any, key: Any, delay: Any, at: Any) -> dict[str, float]:
    """The store's ``delay`` or ``at`` (seconds, epoch) of a reschedule() call, its input
    checked: a job id or ``key=``, ``delay=`` or ``at=``, exactly one of each."""
    if (job_id is None) == (key is None):
        raise TypeError("reschedule() takes a job id or key=, exactly one of them")
    for name, value in (("job id", job_id), ("key=", key)):
        if value is not None and (not isinstance(value, str) or not value):
            raise TypeError(f"reschedule()'s {name} must be a non-empty string, got {value!r}")
    if delay is None and at is None:
        raise TypeError(
            "reschedule() needs the new due time: delay= (a timedelta or seconds from now) "
            "or at= (an aware datetime)"
        )
    return when(delay, at)


def job_of(queue: str, moved: Rescheduled) -> Job | None:
    """The Job reschedule() returns for what the script answered (None: a re-send found the
    job gone since its first send moved it)."""
    if not moved.record:
        return None
    fields = decode_fields(moved.record)
    return make_job(
        moved.id,
        queue,
        PENDING,
        fields,
        delayq_settings.MAX_RETRIES,
        score=moved.due_at,
        outcome=RESCHEDULED,
    )


def announce(job: Job | None) -> None:
    """``job_rescheduled`` for a job moved (nothing for None)."""
    if job is not None:
        signals.send(signals.job_rescheduled, sender(job.task), job=job)


def reschedule(
    job_id: str | None = None,
    *,
    key: str | None = None,
    queue: str | None = None,
    delay: Any = None,
    at: Any = None,
) -> Job | None:
    """Move a pending job's due time: ``delay=`` (timedelta or seconds from now) or ``at=``
    (aware datetime; a time past means now), the job found by id or by unique ``key=`` (in
    ``queue``, else in every queue, as :func:`~django_delayq.cancel` looks). Returns the Job
    with its new ``due_at`` (outcome ``"rescheduled"``), or None when the job is not pending
    (running, finished, dead or unknown: nothing changed). The job keeps its arguments,
    attempts, priority, unique key, group and batch. A job waiting in the database outbox is
    moved in the caller's transaction (see the module)."""
    options = reschedule_options(job_id, key, delay, at)
    in_queue = None if queue is None else check_queue_name(queue)
    if key is not None:  # a row holding the key is the key's job (placement.py)
        moved = move_rows(in_queue, None, key, options)
        if moved is not None:
            return moved
    for attempt in range(2):
        for name in search_queues(queue):
            found = get_store().reschedule(name, job_id, key, **options)
            if found is not None:
                job = job_of(name, found)
                announce(job)
                return job
        if attempt == 0 and job_id is not None:
            moved = move_rows(in_queue, job_id, None, options)
            if moved is not None:
                return moved
        if key is not None or attempt == 1:
            return None
    return None


def move_rows(
    queue: str | None, job_id: str | None, key: str | None, options: dict[str, float]
) -> Job | None:
    """Move the outbox row of ``job_id`` or ``key`` (see the module); its Job, or None when
    no row holds it (a row a relay was moving is waited for, and is in Redis by then)."""
    now = time.time()
    delay = options.get("delay")
    due = options["at"] if delay is None else now + delay
    due_when = When(options["at"], False) if delay is None else When(delay)
    far = beyond_horizon(due - now)
    relay_at = relay_beyond_horizon(due, delay) if far else When(0.0)

    def moved_job(row: outbox.Row) -> Job:
        return placement.row_job(replace(row, due_at=max(due, now)), RESCHEDULED)

    def committed(alias: str, row: outbox.Row) -> None:
        if not far:  # brought within the horizon: relayed now (a worker's relay else)
            relaying.relay_now(get_store(), alias, [row.id])
        announce(moved_job(row))

    moved = outbox.move(job_id, key, queue, (due_when, relay_at), placement.relayed_rows, committed)
    if not moved:
        return None
    return moved_job(moved[0])
