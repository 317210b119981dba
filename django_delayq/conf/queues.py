"""Per-queue options of ``DELAYQ['QUEUES']`` (issue 20).

``QUEUES`` is a list of queue names, or a dict of queue name -> options, like Django's
``CACHES`` and ``DATABASES``::

    DELAYQ = {"QUEUES": {"default": {}, "emails": {"concurrency": 5}}}

``concurrency`` (an int >= 1, or None: the default, no limit) lets at most N attempts of the
queue's jobs run at once across all workers; claim.lua enforces it, with the slots of
``@task(concurrency=N)`` (``storage/control.py``). Workers publish it to Redis before their
first claim (``worker/limits.py``). ``finished_max_age`` (seconds) and ``finished_max_count``
keep the queue's finished jobs longer, shorter or not at all (0), in place of
``DELAYQ["FINISHED_MAX_AGE"]`` and ``["FINISHED_MAX_COUNT"]`` (None: those;
storage/finished.py). ``fair`` (a bool, default False) claims the queue's due jobs in turns,
group by group (``group=``; jobs without a group take one turn together), in place of
priority then due time across the whole queue (lua/include/fair.lua); workers publish it
with the concurrency limit. The system checks ``delayq.E012`` (a bad option value) and
``delayq.E013`` (options that are not a dict, or an unknown option) report what
:func:`queue_options` refuses.
"""

from __future__ import annotations

import math
from typing import Any

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConfigurationError

OPTIONS = ("concurrency", "fair", "finished_max_age", "finished_max_count")
MAXIMUM = 10**9  # as the number settings (checks.py)


class QueueSettingError(ConfigurationError):
    """A bad entry of ``DELAYQ['QUEUES']``; ``check_id`` is the system check reporting it."""

    check_id = "delayq.E013"


class BadQueueOptions(QueueSettingError):
    """``DELAYQ['QUEUES']`` gives a queue options that are not a dict or name an unknown
    option (delayq.E013)."""


class BadQueueOption(QueueSettingError):
    """An option of ``DELAYQ['QUEUES']`` has a bad value (delayq.E012)."""

    check_id = "delayq.E012"


def _keep_option(queue: str, options: dict, name: str, kinds: tuple[type, ...]) -> Any:
    """``finished_max_age`` / ``finished_max_count``: None, or a finite number >= 0."""
    value = options.get(name)
    if value is None:
        return None
    # 0, or at least a millisecond (the scripts count in ms) and below MAXIMUM
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and (value == 0 or 0.001 <= value < MAXIMUM)):
        kind = "an int" if kinds == (int,) else "a number of seconds"
        at_least = " (at least 0.001 when not 0)" if kinds != (int,) else ""
        raise BadQueueOption(
            f"DELAYQ['QUEUES'][{queue!r}][{name!r}] must be {kind} >= 0{at_least} and below "
            f"1e+09 (0 keeps none of the queue's finished jobs) or None (DELAYQ's "
            f"{name.upper()!r}), got {value!r}"
        )
    return value


def queue_options(queue: str, options: Any) -> dict[str, Any]:
    """The options of ``queue`` as ``{"concurrency": int | None, "fair": bool, "finished_max_age":
    number | None, "finished_max_count": int | None}``; ConfigurationError naming the
    queue and the bad value otherwise."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise BadQueueOptions(
            f"DELAYQ['QUEUES'][{queue!r}] must be a dict of options (such as "
            f"{{'concurrency': 5}}) or None, got {options!r}"
        )
    unknown = sorted(str(name) for name in options if name not in OPTIONS)
    if unknown:
        raise BadQueueOptions(
            f"DELAYQ['QUEUES'][{queue!r}] has an unknown option {unknown[0]!r} "
            f"(known: {', '.join(OPTIONS)})"
        )
    concurrency = options.get("concurrency")
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise BadQueueOption(
            f"DELAYQ['QUEUES'][{queue!r}]['concurrency'] must be an int >= 1 (attempts of "
            f"the queue's jobs running at once across all workers) or None (no limit), got "
            f"{concurrency!r}"
        )
    fair = options.get("fair", False)
    if type(fair) is not bool:
        raise BadQueueOption(
            f"DELAYQ['QUEUES'][{queue!r}]['fair'] must be True (claim the queue's due jobs in "
            f"turns, group by group) or False (the default: priority, then due time), got "
            f"{fair!r}"
        )
    return {
        "concurrency": concurrency,
        "fair": fair,
        "finished_max_age": _keep_option(queue, options, "finished_max_age", (int, float)),
        "finished_max_count": _keep_option(queue, options, "finished_max_count", (int,)),
    }


def own_options(queue: str) -> dict[str, Any]:
    """The options ``DELAYQ['QUEUES']`` gives ``queue`` (:func:`queue_options`; {} when it
    gives none); raises ConfigurationError for a bad entry of that queue."""
    configured = delayq_settings.QUEUES
    if not isinstance(configured, dict) or queue not in configured:
        return {}
    return queue_options(queue, configured[queue])


def queue_limits(queues: list[str]) -> dict[str, int | None]:
    """The concurrency limit of each of ``queues`` (None: none) from ``DELAYQ['QUEUES']``;
    a queue the setting does not list, or a list setting, has none. Raises
    ConfigurationError for a bad entry of those queues."""
    configured = delayq_settings.QUEUES
    if not isinstance(configured, dict):
        return dict.fromkeys(queues)
    return {
        queue: queue_options(queue, configured[queue])["concurrency"]
        if queue in configured
        else None
        for queue in queues
    }


def fair_queues(queues: list[str]) -> dict[str, bool]:
    """Whether each of ``queues`` is fair (``DELAYQ['QUEUES'][q]['fair']``; False for a queue
    the setting does not list). Raises ConfigurationError for a bad entry of those queues."""
    return {queue: bool(own_options(queue).get("fair")) for queue in queues}


def is_fair(queue: str) -> bool:
    """Whether ``queue`` is fair, False for a bad entry too (the system check reports it)."""
    try:
        return bool(own_options(queue).get("fair"))
    except ConfigurationError:
        return False


def problems() -> list[QueueSettingError]:
    """Every bad entry of ``DELAYQ['QUEUES']`` (for the system checks)."""
    configured = delayq_settings.QUEUES
    if not isinstance(configured, dict):
        return []
    found: list[QueueSettingError] = []
    for queue, options in configured.items():
        try:
            queue_options(queue, options)
        except QueueSettingError as exc:
            found.append(exc)
    return found
