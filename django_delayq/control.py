"""Queue control: pause and resume a queue, and the priority of a job.

``pause(queue)`` stops every worker from claiming the queue's jobs within one claim round
trip (the state lives in Redis, checked inside ``claim.lua``, and survives worker
restarts); jobs can still be scheduled, running jobs finish and are acknowledged, workers
keep heartbeating and extending their leases. ``resume(queue)`` lifts it and wakes the
workers. A priority (``schedule(..., priority=N)``, ``@task(priority=N)``) is an int in
-100..100, Django's range: among due jobs, higher is claimed first (``storage/control.py``).
"""

from __future__ import annotations

from typing import Any

from django_delayq.storage import control as storage
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name

PRIORITY_MIN, PRIORITY_MAX = storage.PRIORITY_MIN, storage.PRIORITY_MAX


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


def pause(queue: str) -> bool:
    """Pause ``queue``: no worker claims its jobs until :func:`resume`. True if it was
    running, False if it was paused already."""
    return storage.pause(get_store(), check_queue_name(queue))


def resume(queue: str) -> bool:
    """Resume ``queue`` and wake its workers. True if it was paused."""
    return storage.resume(get_store(), check_queue_name(queue))


def is_paused(queue: str) -> bool:
    """Whether ``queue`` is paused."""
    return storage.paused_since(get_store(), check_queue_name(queue)) is not None


_PERIODS = {"s": 1000, "m": 60_000, "h": 3_600_000}


def parse_rate(rate: Any) -> tuple[int, int] | None:
    """``"10/s"`` (also ``/m``, ``/h``) -> (10, 1000): at most 10 claims of the task in any
    second, across all workers of a queue; None for None."""
    if rate is None:
        return None
    count, _, unit = rate.partition("/") if isinstance(rate, str) else ("", "", "")
    if unit in _PERIODS and count.isdigit() and 0 < int(count) <= 10**6:
        return int(count), _PERIODS[unit]
    raise ValueError(
        f"@task(rate=...) must be a string like '10/s', '100/m' or '1000/h' (a count from 1 "
        f"to 1,000,000 per second, minute or hour), got {rate!r}"
    )


def check_concurrency(concurrency: Any) -> int | None:
    """``concurrency`` if it is None or an int >= 1, else an error naming it."""
    if concurrency is None:
        return None
    if type(concurrency) is not int or concurrency < 1:
        raise ValueError(
            f"@task(concurrency=...) must be an int >= 1 (attempts of the task running at "
            f"once across all workers), got {concurrency!r}"
        )
    return concurrency
