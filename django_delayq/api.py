"""The public API: schedule(), schedule_many(), cancel(), get_job().

Validates and serializes in the caller's process (so bad input fails where it is written,
not later in a worker), decides the job's policy once (its ``max_retries`` goes into the
record's header, where workers, recovery, ``get_job()`` and the admin all read it), calls the
store, sends signals.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from . import outbox, placement, signals
from .conf import delayq_settings
from .connection import get_store
from .exceptions import OutcomeUnknown
from .job import (
    DEFERRED,
    FLAG_TOMBSTONE,
    FLAG_UNDECIDED,
    PENDING,
    Fields,
    Job,
    decode_fields,
    encode_record,
    job_from_raw,
    make_job,
    new_job_id,
)
from .registry import Task, discovered, find_task, registered, sender, unknown_task
from .store import DONE_TTL, Op, Scheduled, Store, check_queue_name

logger = logging.getLogger("django_delayq.api")

TASK_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_<>][\w<>]*)+")
BULK_CHUNK = 1000
# Due times are kept before 2200 (a lease score of a not-started job is lease_until - 1e10,
# which must stay negative) and delays at most 100 years.
LATEST_DUE = datetime(2200, 1, 1, tzinfo=UTC)
MAX_DELAY = 100 * 365.25 * 24 * 3600
# A job due this soon may finish before a schedule() re-sent after a lost reply reaches
# Redis, so it keeps a tombstone when it finishes (flag 'i'); `at=` allows an hour of clock
# difference between this process and Redis.
_SOON = DONE_TTL
_SKEW = 3600.0


def _resolve_task(task: Task | str | Callable[..., Any]) -> tuple[str, Task | None]:
    if isinstance(task, Task):
        return task.name, task
    if isinstance(task, str):
        found = find_task(task)
        if found is not None:
            return task, found
        if not TASK_NAME.fullmatch(task):
            raise ValueError(f"{task!r} is not a dotted task name like 'shop.tasks.cancel_order'")
        if discovered() and delayq_settings.CHECK_NAMES:
            raise unknown_task(task)
        return task, None  # CHECK_NAMES is off: a task of another code base's workers
    if callable(task):
        raise TypeError(
            f"{getattr(task, '__qualname__', task)!r} is not a task: decorate it with "
            "@django_delayq.task so workers are allowed to run it"
        )
    raise TypeError(f"schedule() needs a task, a task name or a @task function, got {task!r}")


def _when(delay: Any, at: Any) -> dict[str, float]:
    """Translate delay/at into the store's keyword (seconds or epoch), refusing what no
    due time can be."""
    if delay is not None and at is not None:
        raise TypeError("pass either delay= or at=, not both")
    if at is not None:
        if not isinstance(at, datetime):
            raise TypeError(f"at= must be a datetime, got {type(at).__name__} {at!r}")
        if timezone.is_naive(at):
            if settings.USE_TZ:
                raise ValueError(
                    f"at={at!r} is a naive datetime while USE_TZ is on: pass an aware datetime "
                    "(django.utils.timezone.now() + timedelta(...), or timezone.make_aware(at))"
                )
            at = timezone.make_aware(at, timezone.get_default_timezone())
        if at >= LATEST_DUE:
            raise ValueError(
                f"at={at!r} is too far ahead: django-delayq keeps due times before 2200"
            )
        return {"at": at.timestamp()}
    if delay is None:
        return {"delay": 0.0}
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        try:
            seconds = float(delay)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    else:
        raise TypeError(
            f"delay= must be a timedelta or a number of seconds, got {type(delay).__name__} "
            f"{delay!r}"
        )
    if not math.isfinite(seconds) or seconds > MAX_DELAY:
        raise ValueError(
            f"delay= must be a finite number of seconds up to 100 years ({MAX_DELAY:.0f}), "
            f"got {delay!r}"
        )
    return {"delay": max(seconds, 0.0)}


def _check_queue(queue: str) -> str:
    """``queue`` if workers of this code base serve it: in QUEUES (when the settings give
    it), the DEFAULT_QUEUE or a registered task's queue; else ValueError naming the known
    ones (CHECK_NAMES=False skips this)."""
    configured = delayq_settings.QUEUES
    if queue in configured or queue == delayq_settings.DEFAULT_QUEUE:
        return queue
    if not delayq_settings.is_set("QUEUES") or not delayq_settings.CHECK_NAMES:
        return queue
    known = [*configured, delayq_settings.DEFAULT_QUEUE]
    known += [t.queue for t in registered().values() if t.queue]
    if queue in known:
        return queue
    known = list(dict.fromkeys(str(k) for k in known))
    close = difflib.get_close_matches(queue, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(
        f"queue {queue!r} is not one this code base's workers serve (known: "
        f"{', '.join(known)}: DELAYQ['QUEUES'], DEFAULT_QUEUE and the queues of registered "
        f"tasks): {hint}Fix the name or add it to DELAYQ['QUEUES'], or set "
        "DELAYQ['CHECK_NAMES'] = False to schedule to queues of another code base's workers"
    )


def _soon(when: dict[str, float]) -> bool:
    if "at" in when:
        return when["at"] - time.time() < _SOON + _SKEW
    return when["delay"] < _SOON


def _check_key(key: Any, on_conflict: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key or len(key) > 1024):
        raise TypeError(f"key= must be a non-empty string of at most 1024 characters, got {key!r}")
    if key is not None:
        try:
            key.encode()
        except UnicodeEncodeError:
            raise TypeError(f"key= must be encodable as UTF-8, got {key!r}") from None
    if on_conflict not in ("replace", "keep"):
        raise ValueError(f"on_conflict= must be 'replace' or 'keep', got {on_conflict!r}")


_OPTION_NAMES = frozenset({"delay", "at", "key", "on_conflict", "queue", "max_retries"})


class _Plan:
    """What a schedule() call decides before looking at the task's arguments: task,
    queue, retries, unique key and due time. schedule_many() works it out once."""

    __slots__ = ("flags", "key", "max_retries", "name", "options", "policy", "queue", "task")

    def __init__(self, task: Any, options: dict[str, Any]) -> None:
        if not _OPTION_NAMES.issuperset(options):
            unknown = set(options) - _OPTION_NAMES
            raise TypeError(f"unknown schedule() option {sorted(unknown)[0]!r}")
        self.name, self.task = _resolve_task(task)
        key, on_conflict = options.get("key"), options.get("on_conflict", "replace")
        _check_key(key, on_conflict)
        queue = options.get("queue")
        if queue:
            self.queue = _check_queue(check_queue_name(queue))
        else:
            default = self.task.queue if self.task is not None else None
            self.queue = check_queue_name(default or delayq_settings.DEFAULT_QUEUE)
        max_retries = options.get("max_retries")
        # A task this process does not import: its max_retries is unknown here; the setting
        # goes in the header with flag 'u', and the worker writes the task's (job.py).
        self.policy = FLAG_UNDECIDED if max_retries is None and self.task is None else ""
        if max_retries is None and self.task is not None:
            max_retries = self.task.max_retries
        if max_retries is None:
            max_retries = delayq_settings.MAX_RETRIES
        if type(max_retries) is not int or not 0 <= max_retries < 10**9:
            raise ValueError(f"max_retries= must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries  # decided here, once: the record's header carries it
        self.key = key
        when = _when(options.get("delay"), options.get("at"))
        self.flags = (FLAG_TOMBSTONE if _soon(when) else "") + self.policy
        self.options = {**when, "key": key, "on_conflict": on_conflict}

    def due(self, now: float) -> float:
        """The due time (epoch seconds) as this process's clock sees it."""
        return self.options["at"] if "at" in self.options else now + self.options["delay"]

    def far(self, now: float) -> bool:
        """Whether the job is due beyond DELAYQ["HORIZON"] (so it waits in the database)."""
        horizon = delayq_settings.HORIZON
        return horizon is not None and self.due(now) > now + horizon


class _Prepared:
    """A validated, encoded schedule() call, ready for the store."""

    __slots__ = ("args", "id", "kwargs", "plan", "record")

    def __init__(self, plan: _Plan, args: tuple | list, kwargs: dict, outbox: bool = False) -> None:
        if plan.task is not None:
            plan.task.check_call(args, kwargs)
        self.plan = plan
        self.args, self.kwargs = list(args), kwargs
        # A record bound for the outbox may be relayed twice: flag 'i' makes a finished job
        # leave a tombstone, so the second relay never stores it again.
        flags = FLAG_TOMBSTONE + plan.policy if outbox else plan.flags
        self.record = encode_record(plan.name, self.args, kwargs, plan.key, plan.max_retries, flags)
        self.id = new_job_id()

    def job(self, result: Scheduled | None) -> Job:
        """The Job this call stored (or kept)."""
        plan = self.plan
        fields = Fields(plan.name, self.args, self.kwargs, plan.key, plan.max_retries)
        if result is not None and result.record:  # kept: describe the existing job
            fields = decode_fields(result.record)
        status = PENDING if result is None or result.outcome != "done" else "done"
        return make_job(
            result.id if result else self.id,
            plan.queue,
            status,
            fields,
            delayq_settings.MAX_RETRIES,
            score=result.due_at if result else None,
            outcome=DEFERRED
            if result is None
            else "created"
            if status == "done"
            else result.outcome,
        )

    def store(self) -> Job:
        plan = self.plan
        try:
            result = get_store().schedule(plan.queue, self.id, self.record, **plan.options)
        except OutcomeUnknown as exc:
            raise OutcomeUnknown(
                f"{exc}; the job may have been stored: get_job({self.id!r}) tells"
            ) from exc
        job = self.job(result)
        signals.send(signals.job_scheduled, plan.task or plan.name, job=job)
        return job


def schedule(
    task: Task | str,
    /,
    *args: Any,
    on_commit: bool | str = False,
    **kwargs: Any,
) -> Job:
    """Store a job that runs ``task(*args, **kwargs)`` later.

    Options (taken out of ``kwargs``): ``delay`` (timedelta or seconds) or ``at``
    (aware datetime); ``key`` (unique key) with ``on_conflict`` ("replace" or
    "keep"); ``queue``; ``max_retries``; ``on_commit`` (True, or a database alias:
    store when the current transaction commits). Returns the Job; its ``outcome``
    says whether it was created, replaced, kept, or deferred to the commit.
    """
    options = {name: kwargs.pop(name) for name in _OPTION_NAMES.intersection(kwargs)}
    return _schedule_planned(_Plan(task, options), args, kwargs, on_commit)


def _schedule_planned(
    plan: _Plan, args: tuple | list, kwargs: dict, on_commit: bool | str = False
) -> Job:
    alias = placement.transaction_alias(on_commit)
    now = time.time()
    far = plan.far(now)
    if alias is None and not far:
        # Outside a transaction on_commit stores at once, as Django runs the hook at once.
        if plan.key is not None:  # one indexed query, whatever HORIZON is (rows it left)
            held = outbox.find_key(plan.queue, plan.key)
            # The key's job waits in the database: it stays one job (unless the row is a
            # relay's leftover: its job is in Redis, where this call replaces it, or ran).
            if held is not None and not outbox.leftover(plan.queue, held[1].id):
                return placement.replace_row(_Prepared(plan, args, kwargs, True), *held)
        return _Prepared(plan, args, kwargs).store()
    prepared = _Prepared(plan, args, kwargs, outbox=True)
    return placement.store_row(prepared, alias, far, now)


def schedule_many(
    task: Task | str, calls: Iterable[tuple | list | dict], **options: Any
) -> list[Job]:
    """Schedule many jobs of one task, one round trip per 1,000.

    Each call is a tuple/list of positional arguments, or a dict with ``args``,
    ``kwargs`` and per-job ``delay`` / ``at`` / ``key`` overriding ``options``.
    Every call is validated before anything is stored. Jobs without a unique key
    go to Redis in one script call per queue and chunk (schedule_many.lua), jobs
    with one through schedule.lua, all in the chunk's one round trip. A chunk whose
    reply was lost is sent again (it is idempotent), so no job is stored twice.
    """
    base = _Plan(task, options)
    now = time.time()
    planned: list[tuple[_Plan, tuple | list, dict]] = []
    prepared: list[_Prepared] = []
    for call in calls:  # validate every call first
        if isinstance(call, (tuple, list)):
            plan, args, kwargs = base, call, {}
        else:
            args, kwargs, merged = _split_call(call, options)
            plan = base if merged is options else _Plan(task, merged)
        planned.append((plan, args, kwargs))
        prepared.append(_Prepared(plan, args, kwargs, outbox=plan.far(now)))
    if delayq_settings.HORIZON is None:
        return _bulk_redis(prepared)
    # With a horizon: jobs with unique keys one by one (the key may be held in either
    # place), jobs beyond the horizon as rows, the rest to Redis in bulk.
    placed: dict[int, Job] = {}
    rows: list[tuple[int, _Prepared]] = []
    bulk: list[tuple[int, _Prepared]] = []
    for i, (p, (plan, args, kwargs)) in enumerate(zip(prepared, planned, strict=True)):
        if plan.key is not None:
            placed[i] = _schedule_planned(plan, args, kwargs)
        elif plan.far(now):
            rows.append((i, p))
        else:
            bulk.append((i, p))
    placed.update(placement.bulk_rows(rows, now))
    placed.update(zip((i for i, _ in bulk), _bulk_redis([p for _, p in bulk]), strict=True))
    return [placed[i] for i in range(len(prepared))]


def _bulk_redis(prepared: list[_Prepared]) -> list[Job]:
    if not prepared:
        return []
    store = get_store()
    chunks = list(_chunks(prepared, BULK_CHUNK))
    owners: list[list[list[_Prepared]]] = []

    def ops_of_chunks() -> Iterator[list[Op]]:
        for chunk in chunks:  # built lazily
            ops, groups = _bulk_ops(store, chunk)
            owners.append(groups)
            yield ops

    jobs: list[Job] = []
    for done, results in enumerate(store.stream(ops_of_chunks())):
        jobs += _bulk_jobs(chunks[done], owners[done], results)
    return jobs


def _bulk_ops(store: Store, chunk: list[_Prepared]) -> tuple[list[Op], list[list[_Prepared]]]:
    """A chunk's calls: one SADD per queue, one schedule_many op per queue for jobs without a
    unique key, one schedule op per job with one; and the jobs each op is for."""
    ops: list[Op] = []
    owners: list[list[_Prepared]] = []
    batches: dict[str, list[_Prepared]] = {}
    for p in chunk:
        if p.plan.queue not in batches:
            batches[p.plan.queue] = []
            ops.append(store.remember_queue_op(p.plan.queue))
            owners.append([])
        if p.plan.key is None:
            batches[p.plan.queue].append(p)
        else:
            ops.append(store.schedule_op(p.plan.queue, p.id, p.record, **p.plan.options))
            owners.append([p])
    for queue, group in batches.items():
        if group:
            ops.append(
                store.schedule_many_op(queue, [(p.id, p.record, p.plan.options) for p in group])
            )
            owners.append(group)
    return ops, owners


def _bulk_jobs(chunk: list[_Prepared], owners: list[list[_Prepared]], replies: list) -> list[Job]:
    results: dict[str, Scheduled] = {}
    for group, result in zip(owners, replies, strict=True):
        if isinstance(result, Exception):
            raise result
        if not group:
            continue  # the queue registry's SADD
        if isinstance(result, Scheduled):
            results[group[0].id] = result
        else:
            results.update(zip((p.id for p in group), result, strict=True))
    jobs = []
    for p in chunk:
        job = p.job(results[p.id])
        signals.send(signals.job_scheduled, p.plan.task or p.plan.name, job=job)
        jobs.append(job)
    return jobs


def _split_call(call: Any, options: dict[str, Any]) -> tuple[tuple, dict, dict]:
    """(args, kwargs, options) of one schedule_many() call; ``options`` itself when the
    call overrides none."""
    if isinstance(call, dict):
        unknown = set(call) - {"args", "kwargs", "delay", "at", "key"}
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
    names = [delayq_settings.DEFAULT_QUEUE, *delayq_settings.QUEUES]
    names += [t.queue for t in registered().values() if t.queue]
    local = []
    for name in dict.fromkeys(names):
        try:
            local.append(check_queue_name(name))
        except ValueError:
            continue  # a bad setting: delayq.E005 reports it
    yield from local
    yield from (q for q in get_store().queues() if q not in local)


def get_job(job_id: str, queue: str | None = None) -> Job | None:
    """The job with that id as it is now, or None (finished, cancelled or unknown): in
    Redis, else in the database outbox (a job beyond DELAYQ["HORIZON"], an on_commit job
    inside the transaction that scheduled it or waiting for its relay, whatever HORIZON
    is now). A miss in Redis costs one indexed query per outbox database."""
    if not isinstance(job_id, str):
        raise TypeError(f"job id must be a string, got {job_id!r}")
    raw = get_store().find(job_id, search_queues(queue))
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
    cancelled_id, record = found
    job = make_job(
        cancelled_id, queue, "cancelled", decode_fields(record), delayq_settings.MAX_RETRIES
    )
    signals.send(signals.job_cancelled, sender(job.task), job=job)
    return True
