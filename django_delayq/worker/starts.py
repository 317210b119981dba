"""A runner's start of an attempt: what Redis must know before the job's task runs.

From its start an attempt counts: a worker that dies while running it is charged the attempt
by the recovery (recover.lua), one that dies before starting it is not. A runner tells Redis
in one of two ways, just before it runs the job:

- most jobs: a start mark (``Store.mark_op``, a plain ZADD XX GT of the started score),
  written with no reply awaited (``StartMarks``), so it costs one socket write;
- a job whose record leaves ``max_retries`` undecided (flag ``u``, job.py: scheduled by name
  from a process that does not import the task): the worker knows the task, so it writes the
  task's ``max_retries`` into the record and marks the job started in one script call
  (lua/settle.lua), and waits for the answer before running it. A job still undecided was
  never started, so its recovery hands it back without counting an attempt.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django_delayq.exceptions import CorruptJob, DelayQError, OutcomeUnknown
from django_delayq.jobs.record import decode_record, settle_record, undecided
from django_delayq.scheduling.registry import find_task

if TYPE_CHECKING:
    from django_delayq.storage.marks import StartMarks
    from django_delayq.storage.store import Store
    from django_delayq.worker.execution import Attempt

logger = logging.getLogger("django_delayq.worker")


class Starts:
    """Starts attempts for one worker (thread-safe: it keeps no per-attempt state)."""

    def __init__(
        self,
        store: Store,
        marker: StartMarks,
        lease: float,
        default_max_retries: int,
    ) -> None:
        self.store, self.marker, self.lease = store, marker, lease
        self.default_max_retries = default_max_retries
        self.offset = 0.0  # Redis's clock minus this machine's (the worker sets it per claim)

    def redis_now(self) -> float:
        """Redis's clock, as this worker's clock and the offset of its last claim say."""
        return time.time() + self.offset

    def _lease_until(self) -> float:
        return time.time() + self.offset + self.lease

    def start(self, attempt: Attempt) -> bool:
        """Tell Redis the attempt starts; False when it must not run (see settle)."""
        if undecided(attempt.record):
            return self.settle(attempt)
        if not self.marker.mark(attempt.queue, attempt.id, self._lease_until()):
            logger.debug("job %s: start mark not written", attempt.id)
        return True

    def mark_all(self, attempts: list[Attempt]) -> list[Attempt]:
        """Mark the attempts whose record needs no settle started, in one write per queue
        (the event loop's batch, aio.py); returns the others, for :meth:`start` each."""
        by_queue: dict[str, list[tuple[str, float]]] = {}
        left = []
        until = self._lease_until()
        for attempt in attempts:
            if undecided(attempt.record):
                left.append(attempt)
            else:
                by_queue.setdefault(attempt.queue, []).append((attempt.id, until))
        for queue, marks in by_queue.items():
            if not self.marker.mark_many(queue, marks):
                logger.debug("%d start marks not written", len(marks))
        return left

    def max_retries(self, task_name: str, producers: int | None) -> int:
        """The policy of an undecided job: the task's own ``max_retries``, else this
        worker's setting; for a task unknown here too, the producer's setting stays."""
        task = find_task(task_name)
        if task is None:
            return producers or 0
        return self.default_max_retries if task.max_retries is None else task.max_retries

    def settle(self, attempt: Attempt) -> bool:
        """Write the task's ``max_retries`` into the record and mark the attempt started
        (settle.lua), waiting for the answer. False: do not run it (the lease was lost, or
        Redis refused: the recovery hands it back once the lease expires, no attempt
        counted)."""
        try:
            fields = decode_record(attempt.record)
        except CorruptJob:  # the executor dead-letters it
            self.marker.mark(attempt.queue, attempt.id, self._lease_until())
            return True
        max_retries = self.max_retries(fields.task, fields.max_retries)
        try:
            held = self.store.settle(
                attempt.queue, attempt.id, attempt.token, max_retries, self._lease_until()
            )
        except OutcomeUnknown as exc:
            # Redis may have settled and marked it: then running it is right, and not running
            # it would count an attempt it never had. The same risk as a plain start mark's.
            logger.warning("job %s: start not confirmed by Redis (%s); running it", attempt.id, exc)
            held = True
        except DelayQError as exc:
            logger.warning(
                "job %s: could not be started (%s); not run now: it goes back to pending when "
                "its lease expires, no attempt counted",
                attempt.id,
                exc,
            )
            return False
        if not held:
            logger.warning("job %s: lease lost before it started; not run here", attempt.id)
            return False
        attempt.record = settle_record(attempt.record, max_retries)
        attempt.fields = None  # decoded again, with the task's max_retries
        return True
