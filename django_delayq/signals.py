"""django-delayq's signals. All are sent with ``send_robust``: a receiver that raises is
logged and never breaks ``schedule()`` or the worker.

The sender is the :class:`~django_delayq.registry.Task` when the task is registered in
this process, else the task's name (a string).

- ``job_scheduled(job)``: stored (``job.outcome`` says created / replaced / kept)
- ``job_started(job)``: a worker is about to run it (``job.attempts`` counts this one)
- ``job_succeeded(job, result, duration)``: returned normally (duration in seconds)
- ``job_failed(job, exception, traceback, will_retry)``: every failed attempt
- ``job_dead(job, error)``: moved to the dead-letter set (attempts used up, corrupt
  record, or lease expired on the last attempt)
- ``job_cancelled(job)``: removed by ``cancel()`` or an admin action
- ``job_released(job)``: a stopping worker handed it back to pending unfinished (the attempt
  is not counted; it runs again)
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("django_delayq.signals")

job_scheduled = Signal()
job_started = Signal()
job_succeeded = Signal()
job_failed = Signal()
job_dead = Signal()
job_cancelled = Signal()
job_released = Signal()


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    if not signal.receivers:
        return
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "signal receiver %r raised %r",
                receiver,
                response,
                exc_info=(type(response), response, response.__traceback__),
            )
