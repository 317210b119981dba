"""The durable records of claimed occurrences, decided and committed off the dispatcher's
thread.

A claim (claims.py) hands its occurrences to the recorder and gives its attempts the
batch's event; the runner that takes an attempt waits for that event before calling the
task (``Executor.prepare``). On the recorder's thread, in one turn for every claim handed in
since the last: the schedules' states are read (one SELECT), each occurrence is decided
(``attempt.skip``), the fire times are committed (one UPDATE, rule R of docs/internals.rst),
the events are set, and then the successors are stored. So the dispatcher goes on claiming
while the database works (on SQLite, where a read waits for any writer of the file, a
claim's SELECT used to hold it for tens of milliseconds), and claims of that time share one
read and one commit (an fsync: milliseconds) instead of one each. Records handed in as
records (``submit``) go into the next commit the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

logger = logging.getLogger("django_delayq.recurring")
Records = dict[int, tuple[int, str, str]]  # name hash -> (fire ms, job id, outcome)
# What deciding a turn's claims gives: their records, and what to do once they are committed
# and the events set (store the successors).
Decided = tuple[Records, Callable[[], None]]
WAIT = 30.0  # seconds a runner waits for a record's commit before it runs the task anyway


class Recorder:
    """One thread that decides the claims handed in (``decide``) and commits their records
    and those submitted (``write`` does the UPDATE)."""

    def __init__(
        self,
        write: Callable[[Records], None],
        decide: Callable[[list[Any]], Decided] | None = None,
    ) -> None:
        self.write = write
        self.decide = decide
        self._lock = threading.Lock()
        self._pending: Records = {}
        self._claims: list[Any] = []
        self._events: list[threading.Event] = []
        self._wake = threading.Event()
        self._idle = threading.Event()  # set while nothing is queued or under way
        self._idle.set()
        self._thread: threading.Thread | None = None

    def submit(self, records: Records) -> threading.Event:
        """Queue ``records`` for the next commit; the event is set once it is done (or
        failed: claims.py logs it and the occurrences run anyway)."""
        done = threading.Event()
        with self._lock:
            _merge(self._pending, records)
            self._queued(done)
        return done

    def hand(self, claim: Any) -> threading.Event:
        """Queue one claim's occurrences for the next turn: decided, recorded, and the event
        set once their records are committed (or could not be: they run anyway)."""
        done = threading.Event()
        with self._lock:
            self._claims.append(claim)
            self._queued(done)
        return done

    def _queued(self, done: threading.Event) -> None:
        """(lock held) Remember ``done`` and make sure the thread runs and wakes."""
        self._events.append(done)
        self._idle.clear()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._loop, name="delayq-recurring-records", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def idle(self, timeout: float) -> bool:
        """Wait until what was handed in is done, successors stored (a stopping worker, tests);
        whether it is."""
        return self._idle.wait(timeout)

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                records, claims, events = self._pending, self._claims, self._events
                self._pending, self._claims, self._events = {}, [], []
            after = None
            try:
                if records or claims:
                    close_old_connections()
                if claims and self.decide is not None:
                    decided, after = self.decide(claims)
                    _merge(records, decided)
                if records:
                    self.write(records)
            except Exception:  # never lose the thread: the occurrences run anyway
                logger.exception("recurring schedules: could not record claimed fire times")
            finally:
                for event in events:
                    event.set()
            if after is not None:
                try:
                    after()
                except Exception:
                    logger.exception("recurring schedules: could not store the successors")
            with self._lock:
                if not self._events:  # nothing handed in since this turn began
                    self._idle.set()


def _merge(into: Records, records: Records) -> None:
    """Each schedule's latest fire time of ``into`` and ``records``, in ``into``."""
    for hashed, record in records.items():
        queued = into.get(hashed)
        if queued is None or queued[0] < record[0]:
            into[hashed] = record
