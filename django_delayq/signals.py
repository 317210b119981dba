"""django-delayq's signals. All are sent with ``send_robust``: a receiver that raises is
logged and never breaks ``schedule()`` or the worker.

The sender is the :class:`~django_delayq.scheduling.registry.Task` when the task is registered in
this process, else the task's name (a string).

- ``job_scheduled(job)``: schedule() answered; ``job.outcome`` says what it did: created,
  replaced or deferred (stored), or kept / throttled (stored nothing: ``job`` is the key's
  job, pending or running, or the one that succeeded within its ``unique_for`` window)
- ``job_started(job)``: a worker is about to run it (``job.attempts`` counts this one)
- ``job_succeeded(job, result, duration)``: returned normally (duration in seconds)
- ``job_failed(job, exception, traceback, will_retry)``: every failed attempt
- ``job_dead(job, error)``: moved to the dead-letter set (attempts used up, corrupt
  record, or lease expired on the last attempt)
- ``job_cancelled(job)``: removed by ``cancel()`` or an admin action
- ``job_released(job)``: a stopping worker handed it back to pending unfinished (the attempt
  is not counted; it runs again)
- ``job_expired(job)``: a worker ended it "expired", never run: it was claimed after its
  ``expires_at`` (``job.status == "expired"``, ``job.attempts`` the attempts made before)
- ``job_rescheduled(job)``: ``reschedule()``, ``areschedule()`` or the admin's "Postpone" moved
  it (``job.due_at`` the new due time, ``job.outcome == "rescheduled"``); for a job in the
  database outbox once the move commits
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
job_expired = Signal()
job_rescheduled = Signal()


# The package's own per-job hooks (recurring/hooks.py), called by send() before the
# signal's receivers without Django's dispatch, which would cost every job two
# send_robust calls for what is, but for recurring occurrences, one id check:
# signal -> [(hook, only)]: the hook is called only for a job that ``only(job)`` accepts
# (None: for every job). Hooks may be called on a worker's event loop: they must neither
# block nor use the ORM. The check costs an ordinary job one call.
_HOOKS: dict[Signal, list[tuple[Callable[..., Any], Callable[[Any], bool] | None]]] = {}


def hook(
    signal: Signal, func: Callable[..., Any], only: Callable[[Any], bool] | None = None
) -> None:
    """Call ``func(sender, **kwargs)`` on ``send(signal, ...)`` of the jobs ``only(job)``
    accepts (every job when None), before the signal's receivers (once, however often
    this is called)."""
    hooks = _HOOKS.setdefault(signal, [])
    if all(existing is not func for existing, _ in hooks):
        hooks.append((func, only))


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    for func, only in _HOOKS.get(signal, ()):
        if only is not None and not only(kwargs.get("job")):
            continue
        try:
            func(sender, **kwargs)
        except Exception as exc:
            _log_error(func, exc)
    if not signal.receivers:
        return
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            _log_error(receiver, response)


def _log_error(receiver: Any, exc: Exception) -> None:
    logger.error(
        "signal receiver %r raised %r",
        receiver,
        exc,
        exc_info=(type(exc), exc, exc.__traceback__),
    )


# Receivers the package connects (by dispatch_uid) that may be called on a worker's event
# loop (worker/aio.py): they neither block long nor use the ORM, except for the jobs their
# predicate names (sent through a thread).
_LOOP_SAFE: dict[str, Callable[[Any], bool] | None] = {}


def loop_safe(dispatch_uid: str, unless: Callable[[Any], bool] | None = None) -> None:
    """Declare the receiver connected with ``dispatch_uid`` safe to call on an event loop,
    ``unless(job)`` says otherwise for a job."""
    _LOOP_SAFE[dispatch_uid] = unless


def needs_thread(signal: Signal, job: Any) -> bool:
    """Whether sending ``signal`` for ``job`` from an event loop must go through a thread
    (``sync_to_async``): a receiver is not known to be loop-safe (a user's may use the ORM,
    which Django refuses on an event loop), or says so for this job (hooks never block)."""
    for entry in signal.receivers:
        uid = entry[0][0]
        if not isinstance(uid, str) or uid not in _LOOP_SAFE:
            return True
        unless = _LOOP_SAFE[uid]
        if unless is not None and unless(job):
            return True
    return False
