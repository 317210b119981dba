"""The async API: aschedule(), acancel(), aget_job(), for async views.

The path is the sync API's (api.py): the plan validates and says where the job goes
(:meth:`~.plan.Plan.place`), the call is encoded for that place (:class:`~.prepared.Prepared`),
and sent there. Redis is reached on a ``redis.asyncio`` client under the same retry policy
(:mod:`.storage.async_store`). What needs the database (the place of a keyed job: does a row
hold its key; an outbox row: a job beyond ``DELAYQ["HORIZON"]``; a miss of aget_job(); the
rows acancel() removes) runs through ``sync_to_async``, as Django runs the ORM from async
code; so do signal receivers (when any are connected).

``on_commit=`` is refused: no transaction can be open in async code (Django's ``atomic()``
is sync only), so there is nothing to join; Django would run the hook at once, and accepting
it would let a reader believe the job waits for a commit.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.dispatch import Signal

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import OutcomeUnknown
from django_delayq.jobs.job import Job, decode_fields, job_from_raw, make_job
from django_delayq.monitoring import tracing
from django_delayq.monitoring.health import named_queues, new_names
from django_delayq.outbox import placement
from django_delayq.outbox import rows as outbox
from django_delayq.scheduling import membership, registry
from django_delayq.scheduling.calls import Call
from django_delayq.scheduling.calls import use_scheduler as use_call_scheduler
from django_delayq.scheduling.plan import REDIS, Plan, mixed_plan
from django_delayq.scheduling.prepared import Prepared
from django_delayq.scheduling.registry import Task, sender
from django_delayq.scheduling.rescheduling import job_of, move_rows, reschedule_options
from django_delayq.storage.async_store import AsyncStore, get_async_store
from django_delayq.storage.queues import check_queue_name

ON_COMMIT_REFUSED = (
    "aschedule() takes no on_commit=: no transaction can be open in async code (Django's "
    "atomic() is sync only), so there is none to join. Call schedule(..., on_commit=True) "
    "inside the sync function that opens the transaction (run it with "
    "asgiref.sync.sync_to_async), or await aschedule() after that call returned (the "
    "transaction has committed then)"
)


async def aschedule(task: Task | str, /, *args: Any, **kwargs: Any) -> Job:
    """Store a job that runs ``task(*args, **kwargs)`` later, from async code.

    The options, validation, errors and the Job returned are those of
    :func:`~django_delayq.schedule`, except ``on_commit=``, which raises TypeError (no
    transaction can be open in async code). A job beyond ``DELAYQ["HORIZON"]`` and a job
    with a unique ``key`` consult the database outbox through ``sync_to_async``.
    """
    plan, on_commit = mixed_plan(task, kwargs)
    if on_commit:
        raise TypeError(ON_COMMIT_REFUSED)
    return await _aschedule_planned(plan, args, kwargs)


async def aschedule_call(call: Call, options: dict[str, Any]) -> Job:
    """Store a job of ``call`` from async code (:meth:`Call.aschedule`)."""
    if options.pop("on_commit", False):
        raise TypeError(ON_COMMIT_REFUSED)
    return await _aschedule_planned(Plan(call.task, options), call.args, dict(call.kwargs))


async def _aschedule_planned(plan: Plan, args: tuple | list, kwargs: dict) -> Job:
    now = time.time()
    if plan.key is None:  # placed without the database
        where = plan.place(None, now)
    else:
        where = await sync_to_async(plan.place)(None, now)
    if where is not REDIS:
        prepared = Prepared(plan, args, kwargs, outbox=where.in_outbox)
        job = await sync_to_async(placement.to_outbox)(prepared, where, now)
        membership.joined([job])
        return job
    tracer = tracing.tracer()
    if tracer is None:
        return await _store(plan, Prepared(plan, args, kwargs))
    # A PRODUCER span; its context travels with the job (monitoring/tracing.py).
    with tracing.sending(tracer, plan.queue, plan.name) as (span, context):
        prepared = Prepared(plan, args, kwargs, trace=context)
        span.set_attribute("messaging.message.id", prepared.id)
        return await _store(plan, prepared)


async def _store(plan: Plan, prepared: Prepared) -> Job:
    """Store a job in Redis now and send job_scheduled."""
    try:
        result = await get_async_store().schedule(
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
            f"{exc}; the job may have been stored: aget_job({prepared.id!r}) tells"
        ) from exc
    job = prepared.job(result)
    membership.joined([job])
    await _send(signals.job_scheduled, prepared.sender, job=job)
    return job


async def _send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """signals.send() in a thread, as Django runs sync receivers from async code."""
    if signal.receivers:
        await sync_to_async(signals.send)(signal, sender, **kwargs)


async def _first(
    store: AsyncStore, queue: str | None, probe: Callable[[str], Awaitable[Any]]
) -> Any:
    """``probe(name)`` for each queue to search, in api.search_queues's order (the given
    queue; else the named ones, then those Redis remembers, read only when the search gets
    that far) until one answers; that answer, or None."""
    if queue is not None:
        return await probe(check_queue_name(queue))
    seen: set[str] = set()
    for name in named_queues(seen):
        if found := await probe(name):
            return found
    for name in new_names(await store.queues(), seen):
        if found := await probe(name):
            return found
    return None


async def aget_job(job_id: str, queue: str | None = None, *, finished: bool = False) -> Job | None:
    """:func:`~django_delayq.get_job` from async code: the job with that id, or None. A
    miss in Redis asks the database outbox through ``sync_to_async``."""
    if not isinstance(job_id, str):
        raise TypeError(f"job id must be a string, got {job_id!r}")
    store = get_async_store()
    raw = await _first(store, queue, lambda name: store.fetch(name, job_id, finished))
    if raw is not None:
        return job_from_raw(raw, delayq_settings.MAX_RETRIES)
    row = await sync_to_async(outbox.find)(job_id, queue)
    if row is None or await store.relayed(row.queue, [row.id]):
        return None  # a relayed row whose DELETE has not committed: the job is not there
    return placement.row_job(row, None)


async def acancel(
    job_id: str | None = None, *, key: str | None = None, queue: str | None = None
) -> bool:
    """:func:`~django_delayq.cancel` from async code: True if the job was pending and is
    now gone. Rows of the database outbox are removed through ``sync_to_async``."""
    if (job_id is None) == (key is None):
        raise TypeError("cancel() takes a job id or key=, exactly one of them")
    in_queue = None if queue is None else check_queue_name(queue)
    store = get_async_store()
    for attempt in range(2):
        found = bool(await _first(store, queue, lambda name: _cancel(store, name, job_id, key)))
        if found and key is None:
            return True
        if attempt == 0 and await sync_to_async(placement.cancel_rows)(in_queue, job_id, key):
            return True
        if found:
            return True
    return False


async def _cancel(store: AsyncStore, queue: str, job_id: str | None, key: str | None) -> bool:
    found = await store.cancel(queue, job_id=job_id, key=key)
    if found is None:
        return False
    cancelled_id, record = found
    job = make_job(
        cancelled_id, queue, "cancelled", decode_fields(record), delayq_settings.MAX_RETRIES
    )
    await _send(signals.job_cancelled, sender(job.task), job=job)
    return True


async def areschedule(
    job_id: str | None = None,
    *,
    key: str | None = None,
    queue: str | None = None,
    delay: Any = None,
    at: Any = None,
) -> Job | None:
    """:func:`~django_delayq.reschedule` from async code: the Job with its new ``due_at``,
    or None when it was not pending. Rows of the database outbox are moved through
    ``sync_to_async``."""
    options = reschedule_options(job_id, key, delay, at)
    in_queue = None if queue is None else check_queue_name(queue)
    rows = sync_to_async(move_rows)
    if key is not None and (moved := await rows(in_queue, None, key, options)) is not None:
        return moved
    store = get_async_store()
    for attempt in range(2):

        async def probe(name: str) -> Job | None:
            found = await store.reschedule(name, job_id, key, **options)
            if found is None:
                return None
            job = job_of(name, found)
            if job is not None:
                await _send(signals.job_rescheduled, sender(job.task), job=job)
            return job

        if (job := await _first(store, queue, probe)) is not None:
            return job
        if attempt == 1 or key is not None:
            return None
        if (moved := await rows(in_queue, job_id, None, options)) is not None:
            return moved
    return None


registry.use_async_scheduler(aschedule)  # Task.aschedule()
use_call_scheduler("aschedule", aschedule_call)  # Call.aschedule()
