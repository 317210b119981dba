"""The outbox side of schedule(), schedule_many() and cancel() (api.py): a job the plan
placed in the database (:meth:`~django_delayq.scheduling.plan.Plan.place`) stored as a row
(:func:`to_outbox`), and one job per unique key kept across Redis and the database
(docs/internals.rst, "The database outbox"). Rows are read and written through rows.py,
Redis through the store."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from django.db import transaction

from django_delayq import signals
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import DelayQError
from django_delayq.jobs.job import (
    DEFERRED,
    IN_DATABASE,
    KEPT,
    PENDING,
    Job,
    decode_fields,
    job_from_raw,
    make_job,
)
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.outbox.database_time import When
from django_delayq.scheduling import membership
from django_delayq.scheduling.plan import Place, beyond_horizon, relay_beyond_horizon
from django_delayq.scheduling.prepared import Prepared
from django_delayq.scheduling.registry import sender
from django_delayq.storage.connection import get_store
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.api")


def _no_ends(alias: str, row: outbox.Row) -> None:
    """Replaced by batches/outbox_ends.py's when it is imported (the package's __init__
    does): the outbox never imports batches."""


row_ended: outbox.Ended = _no_ends  # a linked row cancelled, or its link replaced


def use_row_ends(function: outbox.Ended) -> None:
    global row_ended
    row_ended = function


def _ended(alias: str, row: outbox.Row) -> None:
    row_ended(alias, row)


def row_job(row: outbox.Row, outcome: str | None) -> Job:
    return make_job(
        row.id,
        row.queue,
        PENDING,
        decode_fields(row.record),
        delayq_settings.MAX_RETRIES,
        score=row.due_at,
        outcome=outcome,
        waits_in=IN_DATABASE,
    )


def store_row(prepared: Prepared, alias: str | None, far: bool, now: float) -> Job:
    """Store a job as an outbox row: in the transaction of ``alias`` (on_commit), else in the
    routers' database (a job beyond the horizon, in the caller's transaction if one is open).
    After the commit (at once without a transaction): a row not beyond the horizon is
    relayed to Redis (the fast path), and job_scheduled is sent."""
    plan = prepared.plan
    target = alias or outbox.write_alias()
    due = plan.due(now)
    on_conflict = plan.options["on_conflict"]
    delay = plan.options.get("delay")  # None for at=: the row keeps the absolute time
    row = outbox.Row(
        prepared.id, plan.queue, due, prepared.record, plan.key, on_conflict, delay, prepared.link
    )
    row = replace(row, max_wait=plan.max_wait, group=plan.group)
    who = prepared.sender
    displaced: str | None = None  # a pending job in Redis whose unique key this row takes
    if plan.key is not None and (far or on_conflict == "keep"):
        # A near replace needs no look: its relay adopts the key (schedule.lua ARGV[9]).
        holder = _pending_in_redis(plan.queue, plan.key)
        if holder is not None and outbox.find_key(plan.queue, plan.key) is None:
            if on_conflict == "keep":
                job = replace(holder, outcome=KEPT)
                signals.send(signals.job_scheduled, who, job=job)
                return job
            displaced = holder.id  # far: the holder must not run before the row is due
            if plan.max_wait is not None:  # a debounce: the holder's first due time caps it
                row, far, displaced = _capped_by(row, holder, now)
    # On the database's clock (outbox promise I7): never the producer's for a delay.
    relay_at = relay_beyond_horizon(due, delay) if far else When(outbox.GRACE)
    outcome, row = outbox.save(target, row, relay_at, now, _ended)
    job = row_job(row, DEFERRED if alias is not None and outcome != KEPT else outcome)
    if outcome == KEPT:
        signals.send(signals.job_scheduled, who, job=job)
        return job
    membership.row_written(prepared.link, row.id, target)

    def committed() -> None:
        store = get_store()
        if displaced is not None:
            _displace(store, plan.queue, plan.key, displaced)
        # The row as the table holds it at commit (see relaying.relay_now); a debounce's
        # cap may have brought a far row within the horizon (it is relayed, else left).
        if not far or plan.max_wait is not None:
            relaying.relay_now(store, target, [row.id])
        signals.send(signals.job_scheduled, who, job=job)

    transaction.on_commit(committed, using=target)
    return job


def _pending_in_redis(queue: str, key: str) -> Job | None:
    """The pending job in Redis that holds a unique key, or None (also when Redis does not
    answer: the row is stored anyway, and its relay applies ``on_conflict`` in Redis)."""
    store = get_store()
    try:
        holder = store.id_for_key(queue, key)
        raw = store.fetch(queue, holder) if holder else None
    except DelayQError as exc:
        logger.warning("unique key %r: Redis not asked for its holder (%s)", key, exc)
        return None
    if raw is None or raw.status != PENDING:
        return None
    return job_from_raw(raw, delayq_settings.MAX_RETRIES)


def _capped_by(row: outbox.Row, holder: Job, now: float) -> tuple[outbox.Row, bool, str | None]:
    """A far debounced replace of ``holder``, a job pending in Redis (outbox/debounce.py):
    due no later than the holder's first due time plus max_wait. (The row, whether it is
    still beyond the horizon, the id of the Redis job to cancel after the commit.) Still
    beyond: the row keeps that first due time and the holder is cancelled; within: the row
    is relayed at commit, its relay capping it in Redis and adopting the key."""
    assert row.key is not None and row.max_wait is not None and holder.due_at is not None
    try:
        first = get_store().first_due(row.queue, row.key, holder.id)
    except DelayQError:  # its due time then, as schedule.lua counts without a first kept
        first = None
    first = holder.due_at.timestamp() if first is None else first
    cap = first + row.max_wait
    if cap >= row.due_at:
        return replace(row, first_due=first), True, holder.id
    row = replace(row, due_at=cap, delay=None, first_due=first)
    if beyond_horizon(cap - now):
        return row, True, holder.id
    return replace(row, first_due=None), False, None


def _displace(store: Store, queue: str, key: str | None, job_id: str) -> None:
    """Cancel the Redis job whose unique key a database row took (a replace across the two
    places); never raises (a commit hook runs it)."""
    try:
        store.cancel(queue, job_id=job_id)
    except DelayQError as exc:
        logger.warning(
            "job %s keeps unique key %r in Redis beside the database row that replaced it "
            "(%s): cancel it with django_delayq.cancel(%r)",
            job_id,
            key,
            exc,
            job_id,
        )


def replace_row(prepared: Prepared, alias: str, held: outbox.Row) -> Job:
    """A job due within the horizon whose unique key a database row holds: ``keep`` keeps
    the row; ``replace`` gives the row the new record and due time, and relays it now."""
    plan = prepared.plan
    who = prepared.sender
    if plan.options["on_conflict"] == "keep":
        job = row_job(held, KEPT)
        signals.send(signals.job_scheduled, who, job=job)
        return job
    now = time.time()
    delay = plan.options.get("delay")
    row = outbox.Row(
        prepared.id,
        plan.queue,
        plan.due(now),
        prepared.record,
        plan.key,
        "replace",
        delay,
        prepared.link,
        plan.max_wait,
        group=plan.group,
    )
    outcome, row = outbox.save(alias, row, When(0.0), now, _ended)
    job = row_job(row, outcome)
    membership.row_written(prepared.link, row.id, alias)

    def committed() -> None:
        relaying.relay_now(get_store(), alias, [row.id])
        signals.send(signals.job_scheduled, who, job=job)

    transaction.on_commit(committed, using=alias)
    return job


def bulk_rows(rows: list[tuple[int, Prepared]], now: float) -> dict[int, Job]:
    """Jobs without unique keys beyond the horizon: rows, in one transaction."""
    if not rows:
        return {}
    alias = outbox.write_alias()
    made = []
    for _, p in rows:
        due = p.plan.due(now)
        delay = p.plan.options.get("delay")
        row = outbox.Row(p.id, p.plan.queue, due, p.record, delay=delay, link=p.link)
        row = replace(row, group=p.plan.group)
        made.append((row, relay_beyond_horizon(due, delay)))
    outbox.save_many(alias, made, now)
    for (_, p), (row, _) in zip(rows, made, strict=True):
        membership.row_written(p.link, row.id, alias)
    jobs = {i: row_job(row, "created") for (i, _), (row, _) in zip(rows, made, strict=True)}

    def committed() -> None:
        for (_, p), job in zip(rows, jobs.values(), strict=True):
            signals.send(signals.job_scheduled, p.sender, job=job)

    transaction.on_commit(committed, using=alias)
    return jobs


def cancel_rows(queue: str | None, job_id: str | None, key: str | None) -> bool:
    """Cancel in the database: the rows of ``job_id`` or ``key``, in the caller's
    transaction where one is open (job_cancelled is sent when the deletion commits).
    For an id, the caller asks Redis again when nothing was found: a row a relay was moving
    (its lock is waited for) is in Redis by then, so a job is never missed in both places.
    (A row a crashed relay left behind beside its copy in Redis: the copy is cancelled
    first, leaving a tombstone that makes the row's next relay a no-op.)
    Once the deletion commits, the job is kept as finished in Redis (cancelled), as a job
    cancelled there is; a Redis that refuses it costs that, never the cancel (logged). The
    end of a linked row goes to its batch and chain durably: see batches/outbox_ends.py."""

    def committed(row: outbox.Row) -> None:
        try:
            get_store().finished.keep_cancelled(row.queue, [(row.id, row.record, row.due_at)])
        except DelayQError as exc:
            logger.warning(
                "job %s was cancelled but could not be kept as finished: %s", row.id, exc
            )
        job = make_job(
            row.id,
            row.queue,
            "cancelled",
            decode_fields(row.record),
            delayq_settings.MAX_RETRIES,
            waits_in=IN_DATABASE,
        )
        signals.send(signals.job_cancelled, sender(job.task), job=job)

    gone = outbox.cancel(job_id, key, queue, committed, relayed_rows, _ended)
    return bool(gone)


def relayed_rows(rows: list[outbox.Row]) -> set[str]:
    """Ids of ``rows`` that a relay already stored in Redis (marked relayed; their DELETE
    was refused): deleting them cancels nothing (the job is in Redis, or ran)."""
    stale: set[str] = set()
    for queue in {row.queue for row in rows}:
        stale |= get_store().relayed(queue, [row.id for row in rows if row.queue == queue])
    return stale


def to_outbox(prepared: Prepared, where: Place, now: float) -> Job:
    """Store a job the plan placed in the outbox (``where.in_outbox``; ``prepared``
    encoded for it): the row holding its unique key replaced (or kept), else a new row."""
    if where.held is not None:
        return replace_row(prepared, *where.held)
    return store_row(prepared, where.alias, where.far, now)
