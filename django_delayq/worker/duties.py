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

While Redis fails, the worker's :class:`Outage` (one for all its threads) says at INFO every
``STILL_EVERY`` seconds that it is still retrying, where, for how long and which of its
parts wait, so an outage never looks like a hung worker (``-v 0`` shows only the WARNING
lines); the first try that gets through says once, at WARNING, that Redis is reachable again
after how long.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from django.db import DatabaseError

from django_delayq.exceptions import DelayQError, NotMigrated

logger = logging.getLogger("django_delayq.worker")

BACKOFF_FIRST = 0.1  # seconds: the first pause after a failure (before the jitter)
BACKOFF_MAX = 5.0  # seconds: the pause doubles up to this (before the jitter)
OUTAGES = (DelayQError, DatabaseError)  # failures logged without their traceback
STILL_EVERY = 5.0  # seconds between two "still retrying" lines of one Redis outage


class Outage:
    """One worker's view of Redis being down, shared by its threads' :class:`Backoff`: since
    when (``clock``: seconds, monotonic), which parts wait, and when it last said so."""

    def __init__(
        self,
        address: str = "",
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger = logger,
    ) -> None:
        self.where = f"Redis at {address}" if address else "Redis"
        self.clock = clock
        self.log = log
        self.since: float | None = None  # the first failure of the outage under way
        self.waiting: set[str] = set()  # the parts whose last try failed
        self._next = 0.0  # when the next "still retrying" line is due
        self._lock = threading.Lock()

    def down(self, what: str) -> None:
        """``what``'s try failed: the outage starts, or goes on (said if a line is due)."""
        with self._lock:
            now = self.clock()
            self.waiting.add(what)
            if self.since is None:
                self.since, self._next = now, now + STILL_EVERY
                return
            if now < self._next:
                return
            down_for = now - self.since
            self._next = self.since + (down_for // STILL_EVERY + 1) * STILL_EVERY
            parts = ", ".join(sorted(self.waiting))
        self.log.info(
            "%s unreachable or failing for %.0f s, still retrying (%s waiting)",
            self.where,
            down_for,
            parts,
        )

    def up(self, what: str) -> bool:
        """``what``'s try got through: True (the outage said so) if it ended one."""
        with self._lock:
            self.waiting.discard(what)
            if self.since is None:
                return False
            down_for, self.since = self.clock() - self.since, None
            self.waiting.clear()  # a part still failing says so at its next try
        self.log.warning("%s: %s reachable again after %.0f s", what, self.where, down_for)
        return True

    def down_for(self) -> float:
        """Seconds since the outage under way began (0.0: none)."""
        with self._lock:
            return 0.0 if self.since is None else self.clock() - self.since


class Backoff:
    """Exponential backoff with jitter for a thread whose work keeps failing (each pause
    50-100 % of a delay doubling from BACKOFF_FIRST to BACKOFF_MAX), and the way such a
    thread logs it (see the module docstring)."""

    def __init__(
        self, what: str, log: logging.Logger = logger, outage: Outage | None = None
    ) -> None:
        """``outage``: the worker's, which its threads share (else one of its own)."""
        self.what = what
        self.log = log
        self.outage = Outage(log=log) if outage is None else outage
        self.delay = 0.0
        self.failures = 0  # in the current streak
        self._last: type | None = None  # the type of the last failure logged at WARNING
        self._down = False  # a failure of this streak was Redis's (told to the outage)

    def failed(self, exc: Exception, retry_in: Callable[[float], float] | None = None) -> float:
        """The pause before the next try (``retry_in`` turns the backoff's pause into the
        caller's own), after logging ``exc``."""
        self.delay = min(max(self.delay * 2, BACKOFF_FIRST), BACKOFF_MAX)
        pause = self.delay * random.uniform(0.5, 1.0)
        if retry_in is not None:
            pause = retry_in(pause)
        self.failures += 1
        outage = isinstance(exc, OUTAGES)
        if isinstance(exc, NotMigrated):  # a DelayQError, not Redis's: it says what to run
            reason = str(exc)
        elif isinstance(exc, DatabaseError):
            # a missing table is the common first-hour cause: the outbox's (migration 0002)
            # or the schedules' (0004)
            reason = f"the database unreachable or failing ({exc}; has migrate run?)"
        elif isinstance(exc, DelayQError):
            self.outage.down(self.what)
            self._down = True
            reason = f"Redis unreachable or failing ({exc})"
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
            # Redis's return is the outage's line (said once, by the first part back):
            # each part's own end is DEBUG then.
            if self._down:
                self.outage.up(self.what)
            self.log.log(
                logging.DEBUG if self._down else logging.WARNING,
                "%s: working again (after %d failed tries)",
                self.what,
                self.failures,
            )
            self._down = False
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

    def __init__(self, duty: Duty, stopped: threading.Event, outage: Outage | None = None) -> None:
        self.duty = duty
        self.stopped = stopped
        self.backoff = Backoff(duty.what, duty.log, outage)

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


def duty_thread(
    duty: Duty, stopped: threading.Event, outage: Outage | None = None
) -> threading.Thread:
    """A thread (not started) running ``duty`` until ``stopped`` (``outage``: its worker's)."""
    return DutyLoop(duty, stopped, outage).thread()
