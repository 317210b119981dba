"""The checks of a job's options that @task and schedule() share: priority, concurrency, rate,
and the limits per group (``group=``, ``@task(group_concurrency=, group_rate=)``).

A priority (``schedule(..., priority=N)``, ``@task(priority=N)``) is an int in -100..100,
Django's range: among due jobs, higher is claimed first (``storage/control.py``). The
concurrency and rate of a task hold across all workers of a queue, checked inside the claim;
its group limits hold for each group (a string key such as ``"shop:42"``) on its own.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django_delayq.conf.queues import is_fair
from django_delayq.jobs import job as _job
from django_delayq.storage.control import PRIORITY_MAX, PRIORITY_MIN


def check_priority(priority: Any, where: str = "priority=") -> int:
    """``priority`` if it is an int in -100..100, else an error naming it."""
    if type(priority) is not int:
        raise TypeError(
            f"{where} must be an int from {PRIORITY_MIN} to {PRIORITY_MAX} (higher runs first), "
            f"got {priority!r} ({type(priority).__name__})"
        )
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(
            f"{where} must be from {PRIORITY_MIN} to {PRIORITY_MAX} (higher runs first), "
            f"got {priority!r}"
        )
    return priority


_PERIODS = {"s": 1000, "m": 60_000, "h": 3_600_000}


def parse_rate(rate: Any, option: str = "rate") -> tuple[int, int] | None:
    """``"10/s"`` (also ``/m``, ``/h``) -> (10, 1000): at most 10 claims of the task (of one
    group, for ``group_rate``) in any second, across all workers of a queue; None for None."""
    if rate is None:
        return None
    count, _, unit = rate.partition("/") if isinstance(rate, str) else ("", "", "")
    if unit in _PERIODS and count.isdigit() and 0 < int(count) <= 10**6:
        return int(count), _PERIODS[unit]
    raise ValueError(
        f"@task({option}=...) must be a string like '10/s', '100/m' or '1000/h' (a count from "
        f"1 to 1,000,000 per second, minute or hour), got {rate!r}"
    )


def check_concurrency(concurrency: Any, option: str = "concurrency") -> int | None:
    """``concurrency`` if it is None or an int >= 1, else an error naming it."""
    if concurrency is None:
        return None
    if type(concurrency) is not int or concurrency < 1:
        what = "of one group " if option.startswith("group") else ""
        raise ValueError(
            f"@task({option}=...) must be an int >= 1 (attempts of the task {what}running at "
            f"once across all workers), got {concurrency!r}"
        )
    return concurrency


GROUP_MAX = 256  # characters of a group name


def check_group(group: Any) -> str | None:
    """``group`` if it is None or a usable group name: a str of 1 to 256 characters without
    control characters (a newline separates the names in Redis), encodable as UTF-8."""
    if group is None:
        return None
    if type(group) is not str:
        raise TypeError(
            f"group= must be a str such as 'shop:42' (the key the task's group limits count "
            f"by), got {type(group).__name__} {group!r}"
        )
    if not 0 < len(group) <= GROUP_MAX or not group.isprintable():
        raise ValueError(
            f"group= must be 1 to {GROUP_MAX} printable characters (no newline or other "
            f"control character), got {group!r}"
        )
    try:
        group.encode()
    except UnicodeEncodeError:
        raise ValueError(f"group= must be encodable as UTF-8, got {group!r}") from None
    return group


def plan_group(group: Any, task: Any, name: str, queue: str) -> str | None:
    """A schedule() call's ``group=``, checked: a task this process imports must declare
    limits per group (``@task(group_concurrency=..., group_rate=...)``) or go to a fair
    queue (``DELAYQ['QUEUES'][queue]['fair']``: its groups take turns), else the group
    would do nothing and is refused as a mistake. A task scheduled by name that this
    process does not import (``CHECK_NAMES`` off) is trusted: its workers know its limits."""
    group = check_group(group)
    limited = task is None or task.group_concurrency or task.group_rate
    if group is not None and not limited and not is_fair(queue):
        raise ValueError(
            f"group={group!r} given for task {name}, which has no limits per group and whose "
            f"queue {queue!r} is not fair: declare @task(group_concurrency=N) and/or "
            f"@task(group_rate='10/s') on it, set DELAYQ['QUEUES'][{queue!r}]['fair'] = True "
            f"(its groups then take turns), or schedule it without group="
        )
    return group


def _group_lookup(queue: str, job_id: str) -> str | None:
    """Job.group (jobs/job.py): the group stored beside the job in Redis."""
    from django_delayq.storage.connection import get_store

    return get_store().control.group_of(queue, job_id)


_job.group_lookup = _group_lookup


MAX_SECONDS = 100 * 365.25 * 24 * 3600  # as delays (plan.py): at most 100 years


def positive_seconds(
    value: Any, where: str, kinds: str = "a number of seconds or a timedelta"
) -> float:
    """``value`` (a number of seconds or a timedelta) as seconds, more than 0 and at most 100
    years; else an error naming ``where`` and the value (``kinds``: what ``where`` takes)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    else:
        raise TypeError(f"{where} must be {kinds}, got {type(value).__name__} {value!r}")
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise ValueError(
            f"{where} must be more than 0 seconds and at most 100 years "
            f"({MAX_SECONDS:.0f} s), got {value!r}"
        )
    return seconds


def check_max_wait(max_wait: Any, where: str = "max_wait=") -> float | None:
    """``max_wait`` (a debounce's cap: a replace never moves the key's job past its first due
    time plus this) as seconds > 0, None for None; else an error naming the value."""
    return None if max_wait is None else positive_seconds(max_wait, where)


def plan_max_wait(given: Any, task: Any, key: str | None, on_conflict: str) -> float | None:
    """A schedule() call's ``max_wait``: given, it needs ``key=`` and ``on_conflict="replace"``
    (a debounce replaces); the task's default (``@task(max_wait=...)``) applies to its keyed
    calls that replace, and to no other."""
    if given is None:
        default = getattr(task, "max_wait", None)
        return default if key is not None and on_conflict == "replace" else None
    seconds = check_max_wait(given)
    if key is None:
        raise ValueError(
            f"max_wait={given!r} needs key=: it caps how far replacing the key's pending job "
            "pushes it back (a debounce); give the job a unique key, or drop max_wait"
        )
    if on_conflict != "replace":
        raise ValueError(
            f"max_wait={given!r} needs on_conflict='replace' (a debounce replaces the key's "
            f"pending job), got on_conflict={on_conflict!r}"
        )
    return seconds


def check_retry_backoff(retry_backoff: Any) -> None:
    """``@task(retry_backoff=...)``: None or a finite number of seconds >= 0."""
    if retry_backoff is not None and (
        not isinstance(retry_backoff, (int, float))
        or isinstance(retry_backoff, bool)
        or not math.isfinite(retry_backoff)
        or retry_backoff < 0
    ):
        raise ValueError(
            f"retry_backoff must be a finite number of seconds >= 0, got {retry_backoff!r}"
        )


UNTIL = ("start", "end")


def check_unique_until(value: Any, where: str = "unique_until=") -> str:
    """``unique_until``: "start" (the key holds while its job is pending) or "end" (while it
    runs too: lua/include/followers.lua); else an error naming the value."""
    if value not in UNTIL:
        raise ValueError(
            f"{where} must be 'start' (the key holds until its job starts) or 'end' (until "
            f"it ended), got {value!r}"
        )
    return value


def plan_held(given: Any, task: Any, key: str | None) -> bool:
    """Whether a schedule() call's job holds its key through its run (record flag 'h'):
    ``unique_until="end"`` given (it needs ``key=``), or the task's default
    (``@task(unique_until="end")``) for its keyed calls."""
    if given is None:
        return key is not None and getattr(task, "unique_until", "start") == "end"
    if check_unique_until(given) == "end" and key is None:
        raise ValueError(
            "unique_until='end' needs key=: it holds the job's unique key while the job runs; "
            "give the job a key, or drop unique_until"
        )
    return given == "end" and key is not None


def plan_unique_for(given: Any, task: Any, key: str | None) -> int | None:
    """A schedule() call's ``unique_for`` in milliseconds: given, it needs ``key=`` (the
    window holds the key once the key's job succeeded); the task's default
    (``@task(unique_for=...)``) applies to its keyed calls only."""
    if given is None:
        default = getattr(task, "unique_for", None)
        return None if default is None or key is None else round(default * 1000)
    seconds = positive_seconds(given, "unique_for=")
    if key is None:
        raise ValueError(
            f"unique_for={given!r} needs key=: once the key's job succeeded, scheduling with "
            "the key within this window stores nothing; give the job a unique key, or drop "
            "unique_for"
        )
    return max(round(seconds * 1000), 1)


def unique_for_in_outbox(name: str, window_ms: int) -> str:
    """Why a job with unique_for cannot wait in the database outbox (yet)."""
    return (
        f"unique_for={window_ms / 1000:g} s (task {name}) cannot be used through the database "
        "outbox yet (on_commit=True in a transaction, or due beyond DELAYQ['HORIZON']): the "
        "window is checked when the job reaches Redis; schedule it with on_commit=False, due "
        "within the horizon"
    )


def check_unique_for(value: Any, where: str = "@task(unique_for=...)") -> float | None:
    """``@task(unique_for=...)`` as seconds > 0, None for None; else an error naming it."""
    return None if value is None else positive_seconds(value, where)
