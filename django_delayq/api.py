"""The public API: schedule(), schedule_many(), cancel(), get_job().

Validates and serializes in the caller's process (so bad input fails where it is
written, not later in a worker), calls the store, sends signals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import signals
from .conf import delayq_settings
from .connection import get_store
from .exceptions import ConnectionError as DelayQConnectionError
from .job import (
    DEFERRED,
    PENDING,
    Job,
    decode_record,
    encode_record,
    id_timestamp,
    job_from_raw,
    new_job_id,
    to_datetime,
)
from .registry import Task, _registry
from .store import Op, Scheduled, Store, check_queue_name, resend

TASK_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_<>][\w<>]*)+$")
BULK_CHUNK = 1000


def _resolve_task(task: Task | str | Callable[..., Any]) -> tuple[str, Task | None]:
    if isinstance(task, Task):
        return task.name, task
    if isinstance(task, str):
        if task in _registry:
            return task, _registry[task]
        if not TASK_NAME.match(task):
            raise ValueError(f"{task!r} is not a dotted task name like 'shop.tasks.cancel_order'")
        return task, None  # registered in the worker's process, not this one
    if callable(task):
        raise TypeError(
            f"{getattr(task, '__qualname__', task)!r} is not a task: decorate it with "
            "@django_delayq.task so workers are allowed to run it"
        )
    raise TypeError(f"schedule() needs a task, a task name or a @task function, got {task!r}")


def _when(delay: Any, at: Any) -> dict[str, float]:
    """Translate delay/at into the store's keyword (seconds or epoch)."""
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
        return {"at": at.timestamp()}
    if delay is None:
        return {"delay": 0.0}
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise TypeError(
            f"delay= must be a timedelta or a number of seconds, got {type(delay).__name__} "
            f"{delay!r}"
        )
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"delay= must be finite, got {delay!r}")
    return {"delay": max(seconds, 0.0)}


def _check_key(key: Any, on_conflict: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key or len(key) > 1024):
        raise TypeError(f"key= must be a non-empty string of at most 1024 characters, got {key!r}")
    if on_conflict not in ("replace", "keep"):
        raise ValueError(f"on_conflict= must be 'replace' or 'keep', got {on_conflict!r}")


class _Plan:
    """What a schedule() call decides before looking at the task's arguments: task,
    queue, retries, unique key and due time. schedule_many() works it out once."""

    __slots__ = ("key", "max_retries", "name", "options", "queue", "retries", "task")

    def __init__(self, task: Any, options: dict[str, Any]) -> None:
        if not _OPTION_NAMES.issuperset(options):
            unknown = set(options) - _OPTION_NAMES
            raise TypeError(f"unknown schedule() option {sorted(unknown)[0]!r}")
        self.name, self.task = _resolve_task(task)
        key, on_conflict = options.get("key"), options.get("on_conflict", "replace")
        _check_key(key, on_conflict)
        queue = options.get("queue") or (self.task and self.task.queue)
        self.queue = check_queue_name(queue or delayq_settings.DEFAULT_QUEUE)
        max_retries = options.get("max_retries")
        if max_retries is None and self.task is not None:
            max_retries = self.task.max_retries
        if max_retries is not None and (type(max_retries) is not int or max_retries < 0):
            raise ValueError(f"max_retries= must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries  # None: the record leaves it to the MAX_RETRIES setting
        self.retries = delayq_settings.MAX_RETRIES if max_retries is None else max_retries
        self.key = key
        self.options = {
            **_when(options.get("delay"), options.get("at")),
            "key": key,
            "on_conflict": on_conflict,
        }


class _Prepared:
    """A validated, encoded schedule() call, ready for the store."""

    __slots__ = ("args", "id", "kwargs", "plan", "record")

    def __init__(self, plan: _Plan, args: tuple | list, kwargs: dict) -> None:
        if plan.task is not None:
            plan.task.check_call(args, kwargs)
        self.plan = plan
        self.args, self.kwargs = list(args), kwargs
        self.record = encode_record(plan.name, self.args, kwargs, plan.key, plan.max_retries)
        self.id = new_job_id()

    def job(self, result: Scheduled | None, dates: dict[float | None, Any] | None = None) -> Job:
        """The Job this call stored (or kept). ``dates``: a memo of epoch -> datetime for
        bulk calls, whose jobs mostly share a due time and a creation millisecond."""
        plan = self.plan
        args, kwargs, name, key, retries = self.args, self.kwargs, plan.name, plan.key, plan.retries
        if result is not None and result.record:  # kept: describe the existing job
            fields = decode_record(result.record)
            args, kwargs, name = fields["args"], fields["kwargs"], fields["task"]
            key, retries = fields["key"], fields["max_retries"]
            if retries is None:
                retries = delayq_settings.MAX_RETRIES
        job_id = result.id if result else self.id
        due = result.due_at if result else None
        created = id_timestamp(job_id)
        if dates is None:
            due_at, created_at = to_datetime(due), to_datetime(created)
        else:
            due_at = dates.get(due) or dates.setdefault(due, to_datetime(due))
            created_at = dates.get(created) or dates.setdefault(created, to_datetime(created))
        return Job(
            id=job_id,
            task=name,
            args=args,
            kwargs=kwargs,
            queue=plan.queue,
            status=PENDING,
            due_at=due_at,
            max_retries=retries,
            key=key,
            created_at=created_at,
            outcome=result.outcome if result else DEFERRED,
        )

    def store(self) -> Job:
        plan = self.plan
        result = get_store().schedule(plan.queue, self.id, self.record, **plan.options)
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
    prepared = _Prepared(_Plan(task, options), args, kwargs)
    if not on_commit:
        return prepared.store()
    using = on_commit if isinstance(on_commit, str) else None
    stored: list[Job] = []
    transaction.on_commit(lambda: stored.append(prepared.store()), using=using)
    # Outside an atomic block Django runs the callback at once.
    return stored[0] if stored else prepared.job(None)


_OPTION_NAMES = frozenset({"delay", "at", "key", "on_conflict", "queue", "max_retries"})


def schedule_many(
    task: Task | str, calls: Iterable[tuple | list | dict], **options: Any
) -> list[Job]:
    """Schedule many jobs of one task, one round trip per 1,000 (pipelined).

    Each call is a tuple/list of positional arguments, or a dict with ``args``,
    ``kwargs`` and per-job ``delay`` / ``at`` / ``key`` overriding ``options``.
    Every call is validated before anything is stored. Jobs without a unique key
    go to Redis in one script call per queue and chunk (schedule_many.lua), jobs
    with one through schedule.lua, all in the chunk's one round trip.
    """
    base = _Plan(task, options)
    prepared = []
    for call in calls:
        if isinstance(call, (tuple, list)):
            prepared.append(_Prepared(base, call, {}))
        else:
            args, kwargs, merged = _split_call(call, options)
            prepared.append(
                _Prepared(base if merged is options else _Plan(task, merged), args, kwargs)
            )
    store = get_store()
    chunks = list(_chunks(prepared, BULK_CHUNK))
    built: list[tuple[list[Op], list[list[_Prepared]]]] = []

    def ops_of_chunks() -> Iterator[list[Op]]:
        for chunk in chunks:  # built lazily: while Redis runs the chunk sent before
            ops, owners = _bulk_ops(store, chunk)
            built.append((ops, owners))
            yield ops

    jobs: list[Job] = []
    done = 0
    try:
        for results in store.stream(ops_of_chunks()):
            jobs += _bulk_jobs(chunks[done], built[done][1], results)
            done += 1
    except DelayQConnectionError:
        # Idempotent writes: send the unanswered chunks again, one by one (see resend()).
        for chunk in chunks[done:]:
            ops, owners = _bulk_ops(store, chunk)
            jobs += _bulk_jobs(chunk, owners, resend(lambda ops=ops: store.run(ops)))
    return jobs


def _bulk_ops(store: Store, chunk: list[_Prepared]) -> tuple[list[Op], list[list[_Prepared]]]:
    """A chunk's script calls: one schedule_many op per queue for jobs without a unique
    key, one schedule op per job with one; and the jobs each op is for."""
    ops, owners = [], []
    batches: dict[str, list[_Prepared]] = {}
    for p in chunk:
        store.remember_queue(p.plan.queue)
        if p.plan.key is None:
            batches.setdefault(p.plan.queue, []).append(p)
        else:
            ops.append(store.schedule_op(p.plan.queue, p.id, p.record, **p.plan.options))
            owners.append([p])
    for queue, group in batches.items():
        ops.append(store.schedule_many_op(queue, [(p.id, p.record, p.plan.options) for p in group]))
        owners.append(group)
    return ops, owners


def _bulk_jobs(chunk: list[_Prepared], owners: list[list[_Prepared]], replies: list) -> list[Job]:
    results: dict[str, Scheduled] = {}
    for group, result in zip(owners, replies, strict=True):
        if isinstance(result, Exception):
            raise result
        if len(group) == 1 and isinstance(result, Scheduled):
            results[group[0].id] = result
        else:
            results.update(zip((p.id for p in group), result, strict=True))
    jobs = []
    dates: dict[float | None, Any] = {}
    for p in chunk:
        job = p.job(results[p.id], dates)
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


def known_queues(queue: str | None = None) -> list[str]:
    """Queues to search for a job: the given one, else the configured and seen ones."""
    if queue is not None:
        return [check_queue_name(queue)]
    names = [delayq_settings.DEFAULT_QUEUE, *delayq_settings.QUEUES]
    names += [t.queue for t in _registry.values() if t.queue]
    names += sorted(get_store()._seen_queues)
    return list(dict.fromkeys(names))


def _all_queues(queue: str | None) -> Iterator[str]:
    local = known_queues(queue)
    yield from local
    if queue is None:
        yield from (q for q in get_store().queues() if q not in local)


def get_job(job_id: str, queue: str | None = None) -> Job | None:
    """The job with that id as it is now, or None (finished, cancelled or unknown)."""
    if not isinstance(job_id, str):
        raise TypeError(f"job id must be a string, got {job_id!r}")
    raw = get_store().find(job_id, _all_queues(queue))
    return None if raw is None else job_from_raw(raw, delayq_settings.MAX_RETRIES)


def cancel(job_id: str | None = None, *, key: str | None = None, queue: str | None = None) -> bool:
    """Delete a pending job, by id or unique key. True if it was pending and is now gone."""
    if (job_id is None) == (key is None):
        raise TypeError("cancel() takes a job id or key=, exactly one of them")
    store = get_store()
    for name in _all_queues(queue):
        found = store.cancel(name, job_id=job_id, key=key)
        if found is not None:
            _cancelled(name, *found)
            return True
    return False


def _cancelled(queue: str, job_id: str, record: bytes) -> None:
    from .store import RawJob

    job = job_from_raw(RawJob(job_id, queue, None, None, record, None), delayq_settings.MAX_RETRIES)
    job = Job(**{**job.__dict__, "status": "cancelled"})
    sender = _registry.get(job.task) or job.task
    signals.send(signals.job_cancelled, sender, job=job)
