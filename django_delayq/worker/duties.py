"""The one loop of a worker's background duties (heartbeat, recovery, presence, the outbox
relay, the recurring passes): each duty is a small object with a ``step()``, and
:class:`DutyLoop` runs it on a thread of its own until the worker's stop event, with one
backoff after failures and one way to log them (Oban's plugins, huey's single
``BaseProcess.loop``). A duty states only what is its own: when it runs first, the pause
after a step, the pause after a failure (its ``retry_in``, given the backoff's pause).

:class:`Backoff` is also what the dispatcher and the layout check use while Redis is down.
Logging a failure (:meth:`Backoff.failed`): the first failure of a streak at WARNING, with
the traceback unless it is an outage (Redis's or the database's: the message says what is
wrong, and every thread would print the same traceback); a repeat (an error of the same
type) at DEBUG, another type at WARNING again; one WARNING line when a try works again.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from functools import partial
from typing import Protocol

from django.db import DatabaseError

from django_delayq.exceptions import DelayQError

logger = logging.getLogger("django_delayq.worker")

BACKOFF_FIRST = 0.1  # seconds: the first pause after a failure (before the jitter)
BACKOFF_MAX = 5.0  # seconds: the pause doubles up to this (before the jitter)
OUTAGES = (DelayQError, DatabaseError)  # failures logged without their traceback


class Backoff:
    """Exponential backoff with jitter for a thread whose work keeps failing (each pause
    50-100 % of a delay doubling from BACKOFF_FIRST to BACKOFF_MAX), and the way such a
    thread logs it (see the module docstring)."""

    def __init__(self, what: str, log: logging.Logger = logger) -> None:
        self.what = what
        self.log = log
        self.delay = 0.0
        self.failures = 0  # in the current streak
        self._last: type | None = None  # the type of the last failure logged at WARNING

    def failed(self, exc: Exception, retry_in: Callable[[float], float] | None = None) -> float:
        """The pause before the next try (``retry_in`` turns the backoff's pause into the
        caller's own), after logging ``exc``."""
        self.delay = min(max(self.delay * 2, BACKOFF_FIRST), BACKOFF_MAX)
        pause = self.delay * random.uniform(0.5, 1.0)
        if retry_in is not None:
            pause = retry_in(pause)
        self.failures += 1
        outage = isinstance(exc, OUTAGES)
        if isinstance(exc, DelayQError):
            reason = f"Redis unreachable or failing ({exc})"
        elif isinstance(exc, DatabaseError):
            # a missing table is the common first-hour cause: the outbox's (migration 0002)
            # or the schedules' (0004)
            reason = f"the database unreachable or failing ({exc}; has migrate run?)"
        else:
            reason = f"failed ({type(exc).__name__}: {exc})"
        level = logging.DEBUG if type(exc) is self._last else logging.WARNING
        self._last = type(exc)
        self.log.log(
            level,
            "%s: %s; trying again in %.2g s",
            self.what,
            reason,
            pause,
            exc_info=exc if level == logging.WARNING and not outage else None,
        )
        return pause

    def ok(self) -> None:
        """The last try worked: one line if it ended a streak of failures."""
        if self.failures:
            redis = self._last is not None and issubclass(self._last, DelayQError)
            back = "Redis is back" if redis else "working again"
            self.log.warning("%s: %s (after %d failed tries)", self.what, back, self.failures)
        self.delay = 0.0
        self.failures = 0
        self._last = None

    @property
    def failing(self) -> bool:
        return self.failures > 0


class Duty(Protocol):
    """A background duty, run by :class:`DutyLoop`."""

    name: str  # its thread is "delayq-<name>"
    what: str  # what its log lines start with
    log: logging.Logger  # where its failures are logged
    first: float  # seconds before the first step

    def step(self) -> float:
        """One turn of the duty; the seconds until the next."""
        ...

    def retry_in(self, exc: Exception, backoff: float) -> float:
        """The seconds until the next step after ``step`` raised ``exc`` (``backoff``: the
        backoff's pause)."""
        ...


class DutyLoop:
    """Runs ``duty.step()`` until ``stopped`` is set: never lets an error end the thread (a
    heartbeat that died would let every lease expire), and waits on ``stopped`` between
    steps, so a stop is seen at once."""

    def __init__(self, duty: Duty, stopped: threading.Event) -> None:
        self.duty = duty
        self.stopped = stopped
        self.backoff = Backoff(duty.what, duty.log)

    def thread(self) -> threading.Thread:
        """The thread that runs the loop (not started)."""
        return threading.Thread(target=self.run, name=f"delayq-{self.duty.name}", daemon=True)

    def run(self) -> None:
        pause = self.duty.first
        while not self.stopped.wait(pause):
            pause = self.turn()

    def turn(self) -> float:
        """One step; the seconds until the next."""
        try:
            pause = self.duty.step()
        except Exception as exc:
            return self.backoff.failed(exc, partial(self.duty.retry_in, exc))
        self.backoff.ok()
        return pause


def duty_thread(duty: Duty, stopped: threading.Event) -> threading.Thread:
    """A thread (not started) running ``duty`` until ``stopped``."""
    return DutyLoop(duty, stopped).thread()
