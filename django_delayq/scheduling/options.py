"""The checks of a job's options that @task and schedule() share: priority, concurrency, rate.

A priority (``schedule(..., priority=N)``, ``@task(priority=N)``) is an int in -100..100,
Django's range: among due jobs, higher is claimed first (``storage/control.py``). The
concurrency and rate of a task hold across all workers of a queue, checked inside the claim.
"""

from __future__ import annotations

from typing import Any

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
