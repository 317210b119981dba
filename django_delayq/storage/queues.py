"""Queue names: what a valid one is, and a list of them read from an option.

A leaf module (it imports nothing of django-delayq), so whatever needs the rule (the task
registry, the settings' checks, the commands, the store's key names) can import it without
pulling in the storage layer. Which queues exist is
:func:`django_delayq.monitoring.health.iter_known_queues`.
"""

from __future__ import annotations

import re
from typing import Any

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def check_queue_name(queue: Any) -> str:
    """``queue`` if it is a valid queue name, else ValueError naming it."""
    if type(queue) is not str or not QUEUE_NAME.fullmatch(queue):
        raise ValueError(f"invalid queue name {queue!r}: use 1-64 letters, digits, '_', '-' or '.'")
    return queue


def queue_list(option: str) -> list[str]:
    """A comma-separated list of queue names (a command's ``--queues``), each stripped and
    checked: ValueError names the first invalid one (an empty one too)."""
    return [check_queue_name(q.strip()) for q in option.split(",")]
