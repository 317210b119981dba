"""Pausing a queue: pause, resume, is_paused.

``pause(queue)`` stops every worker from claiming the queue's jobs within one claim round
trip (the state lives in Redis, checked inside ``claim.lua``, and survives worker
restarts); jobs can still be scheduled, running jobs finish and are acknowledged, workers
keep heartbeating and extending their leases. ``resume(queue)`` lifts it and wakes the
workers (the keys and scripts: ``storage/control.py``).
"""

from __future__ import annotations

from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name


def pause(queue: str) -> bool:
    """Pause ``queue``: no worker claims its jobs until :func:`resume`. True if it was
    running, False if it was paused already."""
    return get_store().control.pause(check_queue_name(queue))


def resume(queue: str) -> bool:
    """Resume ``queue`` and wake its workers. True if it was paused."""
    return get_store().control.resume(check_queue_name(queue))


def is_paused(queue: str) -> bool:
    """Whether ``queue`` is paused."""
    return get_store().control.paused_since(check_queue_name(queue)) is not None
