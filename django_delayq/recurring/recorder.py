"""The durable records of claimed occurrences, committed off the dispatcher's thread.

A claim (claims.py) hands its occurrences' records (each schedule's fire time, job and
outcome) to the recorder and gives its attempts the batch's event; the runner that takes an
attempt waits for that event before calling the task (``Executor.prepare``), so a fire time
is committed before its occurrence runs (rule R of docs/internals.rst) while the dispatcher
goes on claiming. Records handed in while a commit is under way go into the next one: one
commit (an fsync: milliseconds) for the claims of that time, not one per claim on the
thread that claims.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections

logger = logging.getLogger("django_delayq.recurring")
Records = dict[int, tuple[int, str, str]]  # name hash -> (fire ms, job id, outcome)
WAIT = 30.0  # seconds a runner waits for a record's commit before it runs the task anyway


class Recorder:
    """One thread that commits what claims hand in (``write`` does the UPDATE)."""

    def __init__(self, write: Callable[[Records], None]) -> None:
        self.write = write
        self._lock = threading.Lock()
        self._pending: Records = {}
        self._events: list[threading.Event] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, records: Records) -> threading.Event:
        """Queue ``records`` for the next commit; the event is set once it is done (or
        failed: claims.py logs it and the occurrences run anyway)."""
        done = threading.Event()
        with self._lock:
            for hashed, record in records.items():
                queued = self._pending.get(hashed)
                if queued is None or queued[0] < record[0]:
                    self._pending[hashed] = record
            self._events.append(done)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="delayq-recurring-records", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return done

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                records, events = self._pending, self._events
                self._pending, self._events = {}, []
            try:
                if records:
                    close_old_connections()
                    self.write(records)
            except Exception:  # never lose the thread: the occurrences run anyway
                logger.exception("recurring schedules: could not record claimed fire times")
            finally:
                for event in events:
                    event.set()
