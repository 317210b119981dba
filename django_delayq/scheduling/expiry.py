"""``expires=`` of schedule() and @task: when a job not started yet is no longer worth running.

Celery's ``expires``, RQ's ``ttl`` and huey's ``expires`` are the models. A number of seconds
or a timedelta counts from the schedule() call (not from the due time, as Celery's does); an
aware datetime is a moment. The absolute expiry (epoch ms) goes into the job's record (flag
'x', jobs/record.py), so a retry, a relay from the outbox or a requeue carries it; the worker
that claims the job after it never runs it (worker/expiry.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from django_delayq.scheduling.options import positive_seconds

# As due times (plan.py): before 2200, and at most 100 years ahead (options.positive_seconds).
LATEST = datetime(2200, 1, 1, tzinfo=UTC)

Expires = tuple[str, float] | None  # ("in", seconds) or ("at", epoch s); None: never


def check_expires(expires: Any, where: str = "expires=") -> Expires:
    """``expires`` checked: ("in", seconds) for a positive number of seconds or timedelta,
    ("at", epoch s) for an aware datetime, None for None; else an error naming the value."""
    if expires is None:
        return None
    if isinstance(expires, datetime):
        if timezone.is_naive(expires):
            raise ValueError(
                f"{where} got the naive datetime {expires!r}: pass an aware one "
                "(django.utils.timezone.now() + timedelta(...), or timezone.make_aware(...)), "
                "or a number of seconds or a timedelta counted from the schedule() call"
            )
        if expires >= LATEST:
            raise ValueError(f"{where}{expires!r} is too far ahead: expiries are before 2200")
        return ("at", expires.timestamp())
    kinds = "a number of seconds, a timedelta or an aware datetime"
    return ("in", positive_seconds(expires, where, kinds))


def expires_ms(expires: Expires, now: float) -> int | None:
    """The absolute expiry (epoch ms) of ``expires`` for a schedule() call at ``now`` (epoch
    s, this process's clock), None for none."""
    if expires is None:
        return None
    kind, value = expires
    return int((value if kind == "at" else now + value) * 1000)
