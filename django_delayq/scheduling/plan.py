"""Where a job goes, decided in one place: schedule() and schedule_many() (api.py),
aschedule() (async_api.py) and the django.tasks backend ask here, then send the job there
themselves; the outbox side (placement.py) gets a job the plan already placed.

A schedule() call is validated and decided before anything is stored: its task, queue,
retries (the record's header carries ``max_retries``, decided once), unique key and due
time (:class:`Plan`); where it goes (:meth:`Plan.place`, a :class:`Place`): to Redis now
(:data:`REDIS`), to Redis later (an on_commit job inside a transaction: an outbox row,
relayed when the transaction commits), or to the database outbox (a job due beyond
``DELAYQ["HORIZON"]``, or one whose unique key a row holds); then its arguments are checked
and encoded for that place (:class:`Prepared`). Nothing here writes to Redis or the
database; only a unique key's place is read there (which row holds it).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, transaction
from django.dispatch import receiver
from django.utils import timezone

from django_delayq.conf import delayq_settings
from django_delayq.outbox import rows as outbox
from django_delayq.outbox.database_time import When
from django_delayq.scheduling.expiry import check_expires
from django_delayq.scheduling.options import (
    check_priority,
    plan_group,
    plan_held,
    plan_max_wait,
    plan_unique_for,
)
from django_delayq.scheduling.registry import (
    SCHEDULE_OPTIONS,
    Task,
    discovered,
    find_task,
    registered,
    shadowing,
    unknown_task,
)
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.store import DONE_TTL
from django_delayq.wording import closest

TASK_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_<>][\w<>]*)+")
# Due times are kept before 2200 (a lease score of a not-started job is lease_until - 1e10,
# which must stay negative) and delays at most 100 years.
LATEST_DUE = datetime(2200, 1, 1, tzinfo=UTC)
MAX_DELAY = 100 * 365.25 * 24 * 3600
# A job due this soon may finish before a schedule() re-sent after a lost reply reaches
# Redis, so it keeps a tombstone when it finishes (flag 'i'); `at=` allows an hour of clock
# difference between this process and Redis.
_SOON = DONE_TTL
_SKEW = 3600.0

# The options a Plan takes: schedule()'s own, but on_commit (where the plan is sent).
OPTION_NAMES = SCHEDULE_OPTIONS - {"on_commit"}


def mixed_plan(task: Any, kwargs: dict[str, Any]) -> tuple[Plan, bool | str]:
    """The Plan and ``on_commit`` of a call that mixes the task's keyword arguments with
    schedule()'s options (``schedule(task, *args, **kwargs)``, aschedule(), Task.schedule()),
    the options taken out of ``kwargs``. An option given by the name of one of the task's
    parameters is refused: which of the two was meant cannot be told (a Call tells)."""
    options = {name: kwargs.pop(name) for name in SCHEDULE_OPTIONS.intersection(kwargs)}
    commit_given = "on_commit" in options
    on_commit = options.pop("on_commit") if commit_given else False
    plan = cached_plan(task, options)
    shadowed = plan.task.shadowed if plan.task is not None else None
    if shadowed and (options or commit_given):
        clash = shadowed.intersection([*options, "on_commit"] if commit_given else options)
        if clash:
            raise TypeError(shadowing(plan.name, sorted(clash)[0]))
    return plan, on_commit


def resolve_task(task: Task | str | Callable[..., Any]) -> tuple[str, Task | None]:
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


def _at(at: Any) -> dict[str, float]:
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
        raise ValueError(f"at={at!r} is too far ahead: django-delayq keeps due times before 2200")
    return {"at": at.timestamp()}


def when(delay: Any, at: Any) -> dict[str, float]:
    """Translate delay/at into the store's keyword (seconds or epoch), refusing what no
    due time can be."""
    if delay is not None and at is not None:
        raise TypeError("pass either delay= or at=, not both")
    if at is not None:
        return _at(at)
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


def check_queue(queue: str) -> str:
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
    close = closest(queue, known)
    hint = f"did you mean {close!r}? " if close else ""
    raise ValueError(
        f"queue {queue!r} is not one this code base's workers serve (known: "
        f"{', '.join(known)}: DELAYQ['QUEUES'], DEFAULT_QUEUE and the queues of registered "
        f"tasks): {hint}Fix the name or add it to DELAYQ['QUEUES'], or set "
        "DELAYQ['CHECK_NAMES'] = False to schedule to queues of another code base's workers"
    )


def check_key(key: Any, on_conflict: Any) -> None:
    if key is not None and (not isinstance(key, str) or not key or len(key) > 1024):
        raise TypeError(f"key= must be a non-empty string of at most 1024 characters, got {key!r}")
    if key is not None:
        try:
            key.encode()
        except UnicodeEncodeError:
            raise TypeError(f"key= must be encodable as UTF-8, got {key!r}") from None
        # the keys hash's own fields ("\0d" + key: max_wait's, "\0f" + key: a follower's)
        if key.startswith("\0"):
            raise ValueError(
                f"key= may not start with a NUL character (reserved for django-delayq's own"
                f" fields), got {key!r}"
            )
    if on_conflict not in ("replace", "keep"):
        raise ValueError(f"on_conflict= must be 'replace' or 'keep', got {on_conflict!r}")


def due_soon(due: dict[str, float]) -> bool:
    """Whether a job due ``due`` (``{"delay": s}`` or ``{"at": epoch}``) may finish before a
    schedule() re-sent after a lost reply reaches Redis: its record then asks for a
    tombstone (JobSpec.tombstone, flag 'i'), which a re-send reads."""
    return due["at"] - time.time() < _SOON + _SKEW if "at" in due else due["delay"] < _SOON


def beyond_horizon(due_in: float) -> bool:
    """Whether a job due in ``due_in`` seconds waits in the database outbox: beyond
    ``DELAYQ["HORIZON"]``."""
    horizon = delayq_settings.HORIZON
    return horizon is not None and due_in > horizon


def relay_beyond_horizon(due: float, delay: float | None) -> When:
    """When a row beyond the horizon is relayed: as it comes within the horizon, on the
    database's clock (outbox promise I7): its delay less the horizon, or for an ``at=`` job
    (``delay`` None) its due time less the horizon."""
    horizon = float(delayq_settings.HORIZON)
    if delay is None:
        return When(due - horizon, False)
    return When(delay - horizon)


def transaction_alias(on_commit: bool | str) -> str | None:
    """The database alias whose transaction an on_commit job joins, None when there is
    none (no on_commit, or no atomic block open on that alias)."""
    if not on_commit:
        return None
    alias = on_commit if isinstance(on_commit, str) else DEFAULT_DB_ALIAS
    if isinstance(on_commit, str):  # checked even outside a transaction: it names a database
        outbox.check_on_commit(alias, on_commit)
    if not transaction.get_connection(alias).in_atomic_block:
        return None
    if not isinstance(on_commit, str):
        outbox.check_on_commit(alias, on_commit)
    return alias


@dataclass(frozen=True)
class Place:
    """Where a job goes: Redis now (:data:`REDIS`, ``in_outbox`` False), or the database
    outbox: a new row (in the transaction of ``alias``, relayed when it commits, else in the
    routers' database; ``far``: beyond the horizon, relayed as it comes within it), or, when
    ``held`` is set, the row (alias, row) that holds its unique key."""

    in_outbox: bool
    alias: str | None = None
    far: bool = False
    held: tuple[str, outbox.Row] | None = None


REDIS = Place(False)  # the common place: callers test ``where is REDIS``


def place_unkeyed(alias: str | None, due_in: float) -> Place:
    """Where a job without a unique key goes, due in ``due_in`` seconds, joining the
    transaction of ``alias`` (see :func:`transaction_alias`): a row when it joins one or is
    due beyond the horizon, else Redis now. (The django.tasks backend's jobs have no key.)"""
    far = beyond_horizon(due_in)
    if alias is not None or far:
        return Place(True, alias, far)
    return REDIS


class Plan:
    """What a schedule() call decides before looking at the task's arguments: task,
    queue, retries, unique key and due time. schedule_many() works it out once."""

    __slots__ = (
        "created",
        "encodings",
        "expires",
        "group",
        "held",
        "key",
        "max_retries",
        "max_wait",
        "name",
        "options",
        "priority",
        "queue",
        "soon",
        "task",
        "undecided",
        "when",
        "window_ms",
    )

    def __init__(self, task: Any, options: dict[str, Any]) -> None:
        if not OPTION_NAMES.issuperset(options):
            unknown = set(options) - OPTION_NAMES
            raise TypeError(
                f"unknown schedule() option {sorted(unknown)[0]!r}: the options are "
                f"{', '.join(sorted(SCHEDULE_OPTIONS))}"
            )
        self.name, found = resolve_task(task)
        self.task = found
        key, on_conflict = options.get("key"), options.get("on_conflict", "replace")
        if key is not None or on_conflict != "replace":
            check_key(key, on_conflict)
        queue = options.get("queue")
        if queue:
            self.queue = check_queue(check_queue_name(queue))
        elif found is not None and found.queue:
            self.queue = found.queue  # checked when the task was registered
        else:
            self.queue = check_queue_name(delayq_settings.DEFAULT_QUEUE)
        max_retries = options.get("max_retries")
        # A task this process does not import: its max_retries is unknown here; the setting
        # goes in the header with flag 'u', and the worker writes the task's (job.py).
        self.undecided = max_retries is None and found is None
        if max_retries is None and found is not None:
            max_retries = found.max_retries
        if max_retries is None:
            max_retries = delayq_settings.MAX_RETRIES
        if type(max_retries) is not int or not 0 <= max_retries < 10**9:
            raise ValueError(f"max_retries= must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries  # decided here, once: the record's header carries it
        self.key = key
        priority = options.get("priority")
        if priority is None:
            priority = found.priority if found is not None else 0
        self.priority = check_priority(priority)
        self.when = when(options.get("delay"), options.get("at"))
        self.group = plan_group(options.get("group"), found, self.name, self.queue)
        expires = options.get("expires")
        # ("in", s) or ("at", epoch s): made absolute by each call (Prepared), or None
        self.expires = (
            check_expires(expires)
            if expires is not None
            else (found.expires if found is not None else None)
        )
        self.soon = due_soon(self.when)
        self.options = {**self.when, "key": key, "on_conflict": on_conflict, "group": self.group}
        # max_wait= (seconds): a debounce's cap, computed by schedule.lua on Redis's clock
        self.max_wait = plan_max_wait(options.get("max_wait"), found, key, on_conflict)
        if self.max_wait is not None:
            self.options["max_wait"] = self.max_wait
        # unique_for= (ms): rides in the record (flag 'w'); acks.lua opens the window
        self.window_ms = plan_unique_for(options.get("unique_for"), found, key)
        # unique_until="end": record flag 'h', the key held while the job runs too
        self.held = plan_held(options.get("unique_until"), found, key)
        # What the calls of this plan share, found by the first (prepared.py): the flags
        # encode_job decided, by (outbox, linked, traced); the fields of a Job it created.
        self.encodings: dict[tuple[bool, bool, bool], Any] = {}
        self.created: dict[str, Any] | None = None

    def due(self, now: float) -> float:
        """The due time (epoch seconds) as this process's clock sees it."""
        return self.options["at"] if "at" in self.options else now + self.options["delay"]

    def far(self, now: float) -> bool:
        """Whether the job is due beyond DELAYQ["HORIZON"] (so it waits in the database)."""
        return beyond_horizon(self.due(now) - now)

    def place(self, alias: str | None, now: float) -> Place:
        """Where the job goes, ``alias`` being the transaction it joins (see
        :func:`transaction_alias`). Reads the database only for a job with a unique key
        that would go to Redis now (one indexed query: does a row hold the key?)."""
        where = place_unkeyed(alias, self.due(now) - now)
        # Outside a transaction on_commit stores at once, as Django runs the hook at once.
        if where is not REDIS or self.key is None:
            return where
        # Whatever HORIZON is: rows it left may hold the key.
        held = outbox.find_key(self.queue, self.key)
        # The key's job waits in the database: it stays one job (unless the row is a
        # relay's leftover: its job is in Redis, where this call replaces it, or ran).
        if held is not None and not outbox.leftover(self.queue, held[1].id):
            return Place(True, held=held)
        return REDIS


# Plans by (id of the Task, its options): a Plan never changes once made, and what it
# decides depends only on the task, the options, the settings (cleared when they change)
# and, for ``at=``, the clock (not kept).
_plans: dict[tuple, tuple[Task, Plan]] = {}


def cached_plan(task: Any, options: dict[str, Any]) -> Plan:
    """``Plan(task, options)``, made once per Task and options (schedule() of a task with
    the same options, call after call); a task given by name, ``at=`` or options that
    cannot be a dict key make a new one each time."""
    if not isinstance(task, Task) or "at" in options:
        return Plan(task, options)
    try:
        key = (id(task), *sorted(options.items()))
        found = _plans.get(key)
    except TypeError:  # an unhashable option: Plan refuses it, or it is used once
        return Plan(task, options)
    if found is not None and found[0] is task:
        return found[1]
    plan = Plan(task, options)
    if len(_plans) >= 1000:
        _plans.clear()
    _plans[key] = (task, plan)
    return plan


@receiver(setting_changed)
def _forget_plans(**kwargs: Any) -> None:
    _plans.clear()
