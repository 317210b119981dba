"""The public API: schedule(), call(), schedule_many(), cancel(), get_job().

One straight path: validate and plan in the caller's process (so bad input fails where it is
written, not later in a worker), ask the plan where the job goes (plan.py: Redis now, or a
row of the database outbox, relayed to Redis when its transaction commits or as it comes
within the horizon), encode it for that place, and send it there: to the store (a script
call) or to the outbox (placement.py); then send the signals.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import OutcomeUnknown
from django_delayq.jobs.job import Job, decode_fields, job_from_raw, make_job
from django_delayq.jobs.record import FLAG_LINKED
from django_delayq.monitoring import tracing
from django_delayq.monitoring.health import iter_known_queues
from django_delayq.outbox import placement
from django_delayq.outbox import rows as outbox
from django_delayq.scheduling import membership, registry
from django_delayq.scheduling.calls import Call
from django_delayq.scheduling.calls import use_scheduler as use_call_scheduler
from django_delayq.scheduling.plan import (
    REDIS,
    Place,
    Plan,
    cached_plan,
    mixed_plan,
    resolve_task,
    transaction_alias,
)
from django_delayq.scheduling.prepared import Prepared, jobs_of
from django_delayq.scheduling.registry import Task, sender
from django_delayq.storage.bulk import Batch
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name

logger = logging.getLogger("django_delayq.api")

BULK_CHUNK = 1000


def _store(prepared: Prepared) -> Job:
    """Store a job in Redis now and send job_scheduled."""
    plan = prepared.plan
    try:
        result = get_store().schedule(
            plan.queue,
            prepared.id,
            prepared.record,
            prepared.plain,
            link=prepared.link,
            trace=prepared.trace,
            **plan.options,
        )
    except OutcomeUnknown as exc:
        raise OutcomeUnknown(
            f"{exc}; the job may have been stored: get_job({prepared.id!r}) tells"
        ) from exc
    job = prepared.job(result)
    signals.send(signals.job_scheduled, prepared.sender, job=job)
    return job


def schedule(task: Task | str, /, *args: Any, **kwargs: Any) -> Job:
    """Store a job that runs ``task(*args, **kwargs)`` later.

    Options (taken out of ``kwargs``): ``delay`` (timedelta or seconds) or ``at``
    (aware datetime); ``key`` (unique key) with ``on_conflict`` ("replace" or
    "keep"); ``queue``; ``max_retries``; ``priority`` (an int from -100 to 100, default
    the task's or 0: among due jobs, higher runs first); ``expires`` (seconds or a timedelta,
    counted from this call, not from the due time; or an aware datetime; default the task's:
    a job not started by then is never run, it ends with status "expired"); ``on_commit``
    (True, or a database alias: store when the current transaction commits). Returns the
    Job; its ``outcome`` says whether it was created, replaced, kept, or deferred to the commit.

    An option named like one of the task's parameters raises TypeError: give such a task's
    arguments with :func:`call` (``call(task, *args, **kwargs).schedule(**options)``).
    """
    plan, on_commit = mixed_plan(task, kwargs)
    return _schedule_planned(plan, args, kwargs, on_commit)


def call(task: Task | str, /, *args: Any, **kwargs: Any) -> Call:
    """``task(*args, **kwargs)`` as a :class:`Call`, to schedule with
    ``.schedule(**options)``: every keyword argument is the task's, whatever its name (a
    task may have parameters named ``delay``, ``queue``, even ``task``). ``task`` is what
    schedule() takes: a @task function, a Task or a registered task's name."""
    name, _ = resolve_task(task)
    return Call(name, args, kwargs)


def schedule_call(
    call: Call, options: dict[str, Any], link: str | None = None, job_id: str | None = None
) -> Job:
    """Store a job of ``call`` (:meth:`Call.schedule`): ``options`` are only options.
    ``link`` (the first step of a chain, batches/chains.py): the job's link, instead of the
    open batch's; ``job_id``: its id, instead of a new one."""
    on_commit = options.pop("on_commit", False)
    plan = Plan(call.task, options)
    return _schedule_planned(plan, call.args, dict(call.kwargs), on_commit, link, job_id)


def _schedule_planned(
    plan: Plan,
    args: tuple | list,
    kwargs: dict,
    on_commit: bool | str = False,
    link: str | None = None,
    job_id: str | None = None,
) -> Job:
    now = time.time()
    where = plan.place(transaction_alias(on_commit), now)
    tracer = tracing.tracer()
    if tracer is None:
        prepared = Prepared(plan, args, kwargs, outbox=where.in_outbox, link=link, job_id=job_id)
        job = _send(prepared, where, now)
    else:  # a PRODUCER span; its context travels with a job stored in Redis now
        with tracing.sending(tracer, plan.queue, plan.name) as (span, context):
            prepared = Prepared(plan, args, kwargs, where.in_outbox, link, job_id, trace=context)
            span.set_attribute("messaging.message.id", prepared.id)
            job = _send(prepared, where, now)
    membership.joined([job])
    return job


def _send(prepared: Prepared, where: Place, now: float) -> Job:
    """Send a prepared job where its plan placed it: Redis now, else the outbox."""
    if where is REDIS:
        return _store(prepared)
    return placement.to_outbox(prepared.for_outbox(), where, now)


def schedule_many(
    task: Task | str, calls: Iterable[tuple | list | dict], **options: Any
) -> list[Job]:
    """Schedule many jobs of one task, one round trip per 1,000.

    Each call is a tuple/list of positional arguments, or a dict with ``args``,
    ``kwargs`` and per-job ``delay`` / ``at`` / ``key`` / ``priority`` / ``group`` /
    ``expires`` overriding ``options`` (a relative ``expires`` counts from this call, the
    same moment for every job of it).
    Every call is validated before anything is stored. Jobs without a unique key
    or group go to Redis in one script call per queue and chunk (schedule_many.lua),
    jobs with either through schedule.lua, all in the chunk's one round trip. A chunk whose
    reply was lost is sent again (it is idempotent), so no job is stored twice.
    """
    if "on_commit" in options:
        raise TypeError(
            "schedule_many() takes no on_commit=: it stores its jobs when it is called. To "
            "store them only if a transaction commits, call it from transaction.on_commit(), "
            "or schedule each job with schedule(..., on_commit=True)"
        )
    base = cached_plan(task, options)
    tracer = tracing.tracer()
    if tracer is None:
        return _schedule_many(task, base, calls, options)
    # One PRODUCER span for the call: the creation context of each of its jobs.
    with tracing.sending(tracer, base.queue, base.name) as (span, context):
        jobs = _schedule_many(task, base, calls, options, context)
        span.set_attribute("messaging.batch.message_count", len(jobs))
        return jobs


def _schedule_many(
    task: Task | str,
    base: Plan,
    calls: Iterable[tuple | list | dict],
    options: dict[str, Any],
    trace: str = "",
) -> list[Job]:
    now = time.time()
    prepared: list[Prepared] = []
    first: Prepared | None = None  # of the calls of `base` by position: the others are alike
    for call in calls:  # validate every call first
        if isinstance(call, (tuple, list)):
            if first is not None:
                prepared.append(first.alike(call))
                continue
            plan, args, kwargs = base, call, {}
        else:
            args, kwargs, merged = _split_call(call, options)
            plan = base if merged is options else cached_plan(task, merged)
        prepared.append(Prepared(plan, args, kwargs, outbox=plan.far(now), trace=trace, now=now))
        if plan is base and not kwargs and isinstance(call, (tuple, list)):
            first = prepared[-1]
    keys = [p.plan.key for p in prepared if p.plan.key is not None]
    if delayq_settings.HORIZON is None and not (keys and outbox.holds_any_key(keys)):
        jobs = _bulk_redis(prepared)
        membership.joined(jobs)
        return jobs
    # With a horizon, or a key a row holds (rows a past horizon left, on_commit rows not
    # relayed yet): jobs with unique keys one by one (the key may be held in either
    # place), jobs beyond the horizon as rows, the rest to Redis in bulk.
    placed: dict[int, Job] = {}
    rows: list[tuple[int, Prepared]] = []
    bulk: list[tuple[int, Prepared]] = []
    for i, p in enumerate(prepared):
        if p.plan.key is not None:  # placed now: an earlier call may have taken its key
            at = time.time()
            placed[i] = _send(p, p.plan.place(None, at), at)
        elif p.plan.far(now):
            rows.append((i, p))
        else:
            bulk.append((i, p))
    placed.update(placement.bulk_rows(rows, now))
    placed.update(zip((i for i, _ in bulk), _bulk_redis([p for _, p in bulk]), strict=True))
    jobs = [placed[i] for i in range(len(prepared))]
    membership.joined(jobs)
    return jobs


def _bulk_redis(prepared: list[Prepared]) -> list[Job]:
    """Store jobs in Redis, BULK_CHUNK per batch (batch.py), the next batch sent before
    this one's replies are read; job_scheduled for each."""
    if not prepared:
        return []
    store = get_store()
    chunks = list(_chunks(prepared, BULK_CHUNK))
    batches: list[Batch] = []

    def ops_of_chunks() -> Iterator[list]:
        for chunk in chunks:  # built lazily
            batches.append(Batch(store, [p.entry() for p in chunk]))
            yield batches[-1].ops

    jobs: list[Job] = []
    for done, replies in enumerate(store.stream(ops_of_chunks())):
        results, error = batches[done].results(replies)
        if error is not None:
            raise error
        made = jobs_of(chunks[done], results)
        for p, job in zip(chunks[done], made, strict=True):
            signals.send(signals.job_scheduled, p.sender, job=job)
        jobs += made
    return jobs


def _split_call(call: Any, options: dict[str, Any]) -> tuple[tuple, dict, dict]:
    """(args, kwargs, options) of one schedule_many() call; ``options`` itself when the
    call overrides none."""
    if isinstance(call, dict):
        unknown = set(call) - {
            "args",
            "kwargs",
            "delay",
            "at",
            "key",
            "priority",
            "group",
            "expires",
        }
        if unknown:
            raise TypeError(f"unknown key {sorted(unknown)[0]!r} in a schedule_many() call")
        args, kwargs = tuple(call.get("args", ())), dict(call.get("kwargs", {}))
        overrides = {k: v for k, v in call.items() if k not in ("args", "kwargs")}
        if not overrides:
            return args, kwargs, options
        merged = {**options, **overrides}
        if "at" in call:
            merged.pop("delay", None)
        if "delay" in call:
            merged.pop("at", None)
        return args, kwargs, merged
    if isinstance(call, (tuple, list)):
        return tuple(call), {}, options
    raise TypeError(f"a schedule_many() call must be a tuple, list or dict, got {call!r}")


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def search_queues(queue: str | None = None) -> Iterator[str]:
    """Queues to look for a job in: the given one; else the configured ones, the queues of
    registered tasks, then every queue Redis remembers (read each time, never cached)."""
    if queue is not None:
        yield check_queue_name(queue)
        return
    yield from iter_known_queues(get_store())


def get_job(job_id: str, queue: str | None = None, *, finished: bool = False) -> Job | None:
    """The job with that id as it is now, or None (finished, cancelled or unknown): in
    Redis, else in the database outbox (a job beyond DELAYQ["HORIZON"], an on_commit job
    inside the transaction that scheduled it or waiting for its relay, whatever HORIZON
    is now). A miss in Redis costs one indexed query per outbox database. ``finished=True``
    also returns a job that succeeded or was cancelled while it is kept
    (``DELAYQ["FINISHED_MAX_AGE"]``): status "succeeded" or "cancelled"."""
    if not isinstance(job_id, str):
        raise TypeError(f"job id must be a string, got {job_id!r}")
    raw = get_store().find(job_id, search_queues(queue), finished)
    if raw is not None:
        return job_from_raw(raw, delayq_settings.MAX_RETRIES)
    row = outbox.find(job_id, queue)
    if row is None or get_store().relayed(row.queue, [row.id]):
        return None  # a relayed row whose DELETE has not committed: the job is not there
    return placement.row_job(row, None)


def cancel(job_id: str | None = None, *, key: str | None = None, queue: str | None = None) -> bool:
    """Delete a pending job, by id or unique key, in Redis or in the database outbox. True
    if it was pending and is now gone. ``key=`` removes both a row holding the key (in the
    caller's transaction when one is open on its database: job_cancelled is sent when it
    commits) and a Redis job holding it (at once)."""
    if (job_id is None) == (key is None):
        raise TypeError("cancel() takes a job id or key=, exactly one of them")
    in_queue = None if queue is None else check_queue_name(queue)
    for attempt in range(2):
        found = any(_cancel_redis(name, job_id=job_id, key=key) for name in search_queues(queue))
        if found and key is None:
            return True
        if attempt == 0 and placement.cancel_rows(in_queue, job_id, key):
            return True
        if found:
            return True
    return False


def cancel_in(queue: str, *, job_id: str | None = None, key: str | None = None) -> bool:
    """Cancel a pending job of one queue and send ``job_cancelled``; True if it was pending.
    (The admin's cancel action uses it too.)"""
    found = _cancel_redis(queue, job_id=job_id, key=key)
    if found and key is None:
        return True
    return (
        placement.cancel_rows(queue, job_id, key)
        or found
        or _cancel_redis(queue, job_id=job_id, key=key)
    )


def _cancel_redis(queue: str, *, job_id: str | None = None, key: str | None = None) -> bool:
    found = get_store().cancel(queue, job_id=job_id, key=key)
    if found is None:
        return False
    announce_cancelled(queue, [found])
    return True


def announce_cancelled(queue: str, cancelled: list[tuple[str, bytes]]) -> None:
    """Jobs cancel.lua removed ((id, record) pairs): job_cancelled for each; the ends of
    linked ones go to their batches and chains (batches/forwarding.py)."""
    linked = []
    for cancelled_id, record in cancelled:
        fields = decode_fields(record)
        if FLAG_LINKED in fields.flags:
            linked.append((queue, cancelled_id))
        job = make_job(cancelled_id, queue, "cancelled", fields, delayq_settings.MAX_RETRIES)
        signals.send(signals.job_cancelled, sender(job.task), job=job)
    if linked:
        forward_cancelled(get_store(), linked)


def _no_forwarding(store: Any, ended: list[tuple[str, str]]) -> None:
    """Replaced by batches/forwarding.py's forward_ids when it is imported (the package's
    __init__ does): scheduling never imports batches."""


forward_cancelled = _no_forwarding


def use_forwarding(function: Any) -> None:
    global forward_cancelled
    forward_cancelled = function


registry.use_scheduler(schedule)  # Task.schedule() (registry.py cannot import this module)
use_call_scheduler("schedule", schedule_call)  # Call.schedule() (nor can calls.py)
