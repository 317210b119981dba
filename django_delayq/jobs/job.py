"""The Job value object: a job as read from Redis (or the outbox), and how one is assembled.

A job lives in Redis as a record (what the producer decided, :mod:`django_delayq.jobs.record`),
beside it its state and errors (what the scripts change as it runs,
:mod:`django_delayq.jobs.state`), and a score in one of its queue's sorted sets (pending, running
or dead: due time, lease end or time of death). ``created_at`` is not stored: job ids are
ULIDs, whose first 48 bits are the creation time (:mod:`django_delayq.jobs.ids`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from django_delayq.exceptions import CorruptJob
from django_delayq.jobs.finished import (
    FINISHED,
    AttemptRecord,
    KeptEntry,
    attempt_records,
    parse_kept,
)
from django_delayq.jobs.ids import id_timestamp
from django_delayq.jobs.record import EMPTY, Fields, decode_record, head_fields
from django_delayq.jobs.state import last_error_of, parse_errors, parse_state, worker_of
from django_delayq.jobs.times import to_datetime

PENDING = "pending"
RUNNING = "running"
DEAD = "dead"
STATUSES = (PENDING, RUNNING, DEAD)
# A follower (unique_until="end"): stored, in no set, pending once its key's job ended.
WAITING = "waiting"

# Outcomes of schedule() with a unique key.
CREATED = "created"
REPLACED = "replaced"
KEPT = "kept"
DEFERRED = "deferred"  # on_commit=True inside a transaction: stored when it commits
THROTTLED = "throttled"  # unique_for=: the key's job succeeded within the window, none stored

# Where a pending job waits (Job.waits_in): in Redis, or as a row of the database outbox
# (outbox/rows.py: on_commit jobs until relayed, jobs due beyond DELAYQ["HORIZON"]).
IN_REDIS = "redis"
IN_DATABASE = "database"

# A claimed job that no runner has started yet has the running score lease_until - RESERVED
# (seconds here; lua/include/base.lua holds the same span in milliseconds).
RESERVED = 10_000_000_000


@dataclass(frozen=True)
class Job:
    """A job as stored in Redis at the moment it was read.

    ``status`` is ``"pending"``, ``"running"`` or ``"dead"``; ``"succeeded"`` or ``"cancelled"`` (or
    ``"expired"``: not started before its ``expires_at``) for a finished job, kept a while
    (``DELAYQ["FINISHED_MAX_AGE"]``), which ``get_job(id, finished=True)`` and the admin return
    (plain ``get_job`` returns None for it, as before 0.7); ``finished_at`` is when it ended,
    ``due_at`` when it was due (the attempt that succeeded was due then; a cancelled job would have
    run then).
    ``outcome`` is set only on the Job returned by ``schedule()``: ``"created"``,
    ``"replaced"`` or ``"kept"`` (unique keys), ``"throttled"`` (the key's job succeeded
    within its ``unique_for`` window: nothing stored; the Job is that finished job's id,
    status ``"succeeded"``, with this call's task and arguments), or ``"deferred"``
    (on_commit inside a transaction: its row is in the transaction, Redis gets it after the
    commit); and on
    the one ``reschedule()`` returns: ``"rescheduled"``.
    ``"waiting"``: a follower (``unique_until="end"``), stored but not pending until the job of
    its key that runs (``waits_for``, its id) ended; ``due_at`` is its "not before".
    ``attempts`` counts the attempts made, the one running included. ``waits_in`` is
    ``"redis"``, or ``"database"`` for a pending job that waits in the outbox table.
    """

    id: str
    task: str
    args: list
    kwargs: dict
    queue: str
    status: str
    due_at: datetime | None = None
    attempts: int = 0
    max_retries: int = 0
    last_error: str | None = None
    key: str | None = None
    created_at: datetime | None = None
    errors: list[dict] = field(default_factory=list, repr=False)
    lease_until: datetime | None = None
    worker: str | None = None
    died_at: datetime | None = None
    outcome: str | None = None
    waits_in: str = IN_REDIS
    priority: int = 0
    finished_at: datetime | None = None
    # A finished job whose record was above 64 KiB: its size in bytes; only its task and
    # header were kept (args and kwargs are then empty).
    args_not_kept: int | None = None
    # The attempt that ended a succeeded job: attempt, started and due (epoch s; due None when
    # not known), duration (s), worker.
    last_attempt: dict | None = field(default=None, repr=False)
    # schedule(expires=...): not started by then (Redis's clock at its claim), it is never
    # run and ends "expired"; None: it never expires.
    expires_at: datetime | None = None
    # schedule(unique_for=...) in seconds: once it succeeded, its key schedules nothing this
    # long (outcome "throttled"); None: no window.
    unique_for: float | None = None
    # status "waiting" (unique_until="end"): the id of the key's job it waits for ("" when
    # that one ended and the follower is about to be pending); due_at is its "not before".
    waits_for: str | None = None
    # A keyed job's unique_until: "end" (record flag 'h': the key holds while it runs too) or
    # "start"; None without a key.
    unique_until: str | None = None

    @property
    def attempt_history(self) -> list[AttemptRecord]:
        """Its attempts so far, in order, each with its worker, start, duration, error and
        the wait before the next (from its errors, and the attempt that ended it when it
        succeeded; the errors kept are the last ``DELAYQ["MAX_ERRORS_KEPT"]``)."""
        return attempt_records(self.errors, self.last_attempt)

    @property
    def will_retry(self) -> bool:
        """Whether a failure of the current attempt would be retried; False for a job that
        has no attempt to come (dead, succeeded, cancelled)."""
        if self.status == DEAD or self.status in FINISHED:
            return False
        return self.attempts <= self.max_retries

    @property
    def fire_time(self) -> datetime | None:
        """For an occurrence of a recurring schedule, the time it fires for (an aware UTC
        datetime, read from its id); None for any other job."""
        from django_delayq.recurring.ids import parse_occurrence_id

        parsed = parse_occurrence_id(self.id)
        return None if parsed is None else to_datetime(parsed[0] / 1000)

    @cached_property
    def schedule(self) -> str | None:
        """For an occurrence of a recurring schedule, the schedule's name; None for any other
        job. Found on first access (then kept on this Job): for an ordinary job id without a
        query, else from what the worker's last reconcile pass saw or one indexed query of
        ``ScheduleState`` (so in async code, read it through ``sync_to_async``)."""
        return schedule_lookup(self.id)

    @cached_property
    def batch_id(self) -> str | None:
        """The id of the batch this job is a member or a callback of (a chain step of a
        member chain too); None for any other job. Read on first access (one HGET of its
        link in Redis, while the job exists), then kept on this Job."""
        return batch_lookup(self.queue, self.id)

    @cached_property
    def group(self) -> str | None:
        """The group this job was scheduled with (``schedule(..., group=...)``, the key the
        task's limits per group count by); None for a job without one. Read on first access
        (one HGET in Redis, while the job exists), then kept on this Job."""
        return group_lookup(self.queue, self.id)


def _no_schedules(job_id: str) -> str | None:
    return None


def _no_batches(queue: str, job_id: str) -> str | None:
    return None


# The batch a job belongs to: django_delayq.batches sets it when imported.
batch_lookup: Callable[[str, str], str | None] = _no_batches


def _no_group(queue: str, job_id: str) -> str | None:
    return None


# The group a job was scheduled with: scheduling/options.py sets it when imported.
group_lookup: Callable[[str, str], str | None] = _no_group


# The schedule an occurrence's id belongs to: django_delayq.recurring.names sets it when
# the app is ready (jobs/job.py imports nothing of recurring/, which imports the models).
schedule_lookup: Callable[[str], str | None] = _no_schedules


def make_job(
    job_id: str,
    queue: str,
    status: str,
    fields: Fields,
    default_max_retries: int,
    *,
    attempts: int = 0,
    score: float | None = None,
    errors: list[dict] | None = None,
    worker: str | None = None,
    outcome: str | None = None,
    waits_in: str = IN_REDIS,
    kept: KeptEntry | None = None,
    waits_for: str | None = None,
) -> Job:
    """The one place a Job is assembled (API, worker, recovery, admin, backend)."""
    when = to_datetime(score)
    errors = errors or []
    return _assemble(
        {
            "id": job_id,
            "task": fields.task,
            "args": fields.args,
            "kwargs": fields.kwargs,
            "queue": queue,
            "status": status,
            "due_at": when if status in (PENDING, WAITING) or status in FINISHED else None,
            "attempts": attempts,
            "max_retries": default_max_retries
            if fields.max_retries is None
            else fields.max_retries,
            "last_error": last_error_of(errors),
            "key": fields.key,
            "created_at": to_datetime(id_timestamp(job_id)),
            "errors": errors,
            "lease_until": when if status == RUNNING else None,
            "worker": worker if status == RUNNING else None,
            "died_at": when if status == DEAD else None,
            "outcome": outcome,
            "waits_in": waits_in,
            "priority": fields.priority,
            "finished_at": to_datetime(kept.ended_at) if kept else None,
            "last_attempt": kept.last_attempt if kept else None,
            "args_not_kept": kept.cut if kept else None,
            "expires_at": None
            if fields.expires_at is None
            else to_datetime(fields.expires_at / 1000),
            "unique_for": None if fields.window_ms is None else fields.window_ms / 1000,
            "waits_for": waits_for if status == WAITING else None,
            "unique_until": None
            if fields.key is None
            else ("end" if "h" in fields.flags else "start"),
        }
    )


# The datetimes job_alike made last, (epoch, datetime): its due time's and its id's time's
# (the jobs of a schedule_many() chunk mostly share both).
_alike_due: tuple[float | None, datetime | None] = (None, None)
_alike_created: tuple[float | None, datetime | None] = (None, None)


def job_alike(
    fields_of: dict[str, Any], job_id: str, args: list, kwargs: dict, score: float | None
) -> Job:
    """A pending Job like the one whose fields ``fields_of`` copies (``dict(job.__dict__)``
    taken as make_job returned it), with its own id, arguments and due time: schedule_many()'s
    jobs of one plan, made without make_job's work for each (the same Job it would make)."""
    global _alike_due, _alike_created
    values = fields_of.copy()
    values["id"], values["args"], values["kwargs"], values["errors"] = job_id, args, kwargs, []
    due = _alike_due
    if due[0] != score:
        due = _alike_due = (score, to_datetime(score))
    values["due_at"] = due[1]
    created_at = id_timestamp(job_id)
    created = _alike_created
    if created[0] != created_at:
        created = _alike_created = (created_at, to_datetime(created_at))
    values["created_at"] = created[1]
    return _assemble(values)


def _assemble(values: dict[str, Any]) -> Job:
    """``Job(**values)``, ``values`` giving every field, without the frozen dataclass's
    ``__init__``: it sets each of the 19 fields through ``object.__setattr__``, a third of
    the Python a schedule() call spends after its reply. The Job is the same (equal, as
    frozen; tests/test_api.py checks it against ``Job(**values)``)."""
    job = object.__new__(Job)
    object.__setattr__(job, "__dict__", values)
    return job


def decode_fields(record: bytes | None) -> Fields:
    """A record's fields, or EMPTY (task '') when it is missing or corrupt."""
    if record is None:
        return EMPTY
    try:
        return decode_record(record)
    except CorruptJob:
        return EMPTY


def job_from_raw(raw: Any, default_max_retries: int, outcome: str | None = None) -> Job:
    """A Job from a store.RawJob (what the reads return). A corrupt record gives task ''."""
    kept = parse_kept(raw.kept) if raw.status is None and raw.kept else None
    if kept is not None:
        return job_from_kept(raw.id, raw.queue, kept, default_max_retries)
    attempts, token = parse_state(raw.state)
    score = raw.score
    if raw.status == RUNNING and score is not None:
        if score >= 0:
            attempts += 1  # the attempt in progress
        else:
            score += RESERVED  # claimed, not started yet: the lease still runs
    return make_job(
        raw.id,
        raw.queue,
        raw.status or "orphaned",
        decode_fields(raw.record),
        default_max_retries,
        attempts=attempts,
        score=score,
        errors=parse_errors(raw.errors),
        worker=worker_of(token),
        outcome=outcome,
        waits_for=raw.waits_for,
    )


def job_from_kept(job_id: str, queue: str, kept: KeptEntry, default_max_retries: int) -> Job:
    """A finished job from what was kept of it (jobs/finished.py): status "succeeded" or
    "cancelled", its attempts counted from its errors and its last attempt."""
    last = kept.last_attempt
    attempts = (
        last["attempt"]
        if last
        else max(
            [e.get("attempt", 0) for e in kept.errors if isinstance(e.get("attempt"), int)],
            default=0,
        )
    )
    return make_job(
        job_id,
        queue,
        kept.outcome,
        _kept_fields(kept),
        default_max_retries,
        attempts=attempts,
        score=kept.due,
        errors=kept.errors,
        kept=kept,
    )


def _kept_fields(kept: KeptEntry) -> Fields:
    if kept.cut is None:
        return decode_fields(kept.record or None)
    try:
        return head_fields(kept.record)
    except CorruptJob:
        return EMPTY
