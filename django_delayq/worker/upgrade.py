"""Upgrading queues from Redis layout 1 (django-delayq 0.1): what ``manage.py
delayq_upgrade`` runs, and what a worker and the ``delayq.W004`` check look for.

A queue is converted by calling ``upgrade.lua`` (through ``store.old_layout.step``) until
it answers 0 left. The script converts scores, leases, states and errors itself; a job whose
record is still JSON (format 1 or 2) is converted only once its record is format 3, which
Python writes: the script hands those records out, :func:`reencode` re-encodes them here
(Lua would have to decode and re-encode user arguments, and cjson changes numbers and empty
lists), and the next call stores them, if the job still holds the old record, and converts
their entries. See docs/internals.rst, "Upgrading from layout 1".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import CorruptJob, DelayQError, SerializationError
from django_delayq.jobs.record import decode_record, encode_record
from django_delayq.scheduling.registry import find_task
from django_delayq.storage.old_layout import OldData
from django_delayq.storage.store import Store
from django_delayq.worker.duties import Backoff, Outage

logger = logging.getLogger("django_delayq.upgrade")

BATCH = 500  # layout-1 entries per upgrade.lua call


@dataclass
class QueueUpgrade:
    """What ``upgrade_queue`` found in a queue and what it converted."""

    queue: str
    found: OldData
    pending: int = 0
    running: int = 0
    dead: int = 0
    records: int = 0  # records re-encoded to format 3
    kept: int = 0  # records that do not decode, kept as they are (the worker dead-letters them)
    orphans: int = 0  # meta fields of no job, deleted
    calls: int = 0

    @property
    def converted(self) -> int:
        return self.pending + self.running + self.dead


def max_retries_of(task: str, recorded: int | None) -> int:
    """What a 0.1 worker retried a failure of the job up to: the record's ``r``, else the
    task's ``max_retries`` (when it is registered here), else the ``MAX_RETRIES`` setting.
    The upgrade writes it into the record's header, so scripts and Python agree on it."""
    if recorded is not None:
        return recorded
    found = find_task(task)
    if found is not None and found.max_retries is not None:
        return found.max_retries
    return int(delayq_settings.MAX_RETRIES)


def reencode(raw: bytes) -> bytes | None:
    """A layout-1 record (format 1 or 2) as format 3 with its unique key and max_retries in
    the header; None when it does not decode (it is then kept as it is)."""
    try:
        fields = decode_record(raw)
        return encode_record(
            fields.task,
            fields.args,
            fields.kwargs,
            fields.key,
            max_retries_of(fields.task, fields.max_retries),
        )
    except (CorruptJob, SerializationError):
        return None


def upgrade_queue(
    store: Store,
    queue: str,
    *,
    limit: int = BATCH,
    progress: Callable[[QueueUpgrade], None] | None = None,
) -> QueueUpgrade:
    """Convert ``queue`` from layout 1, ``limit`` entries per script call, until none is
    left. Idempotent: on converted data it changes nothing; after an interrupted run it
    finishes the work. ``progress`` is called after each call. Raises DelayQError when Redis
    cannot be reached (run it again: it goes on where it stopped)."""
    (found,) = store.old_layout.data([queue])
    report = QueueUpgrade(queue, found)
    records: list[tuple[str, bytes, bytes]] = []
    while True:
        step = store.old_layout.step(queue, limit, records)
        report.calls += 1
        report.pending += step.pending
        report.running += step.running
        report.dead += step.dead
        report.records += step.records
        report.orphans += step.orphans
        records = []
        for job_id, old in step.legacy:
            new = reencode(old)
            if new is None:
                logger.warning(
                    "queue %r: job %s has a record that does not decode; kept as it is "
                    "(a worker dead-letters it as CorruptJob): %r",
                    queue,
                    job_id,
                    old[:80],
                )
                report.kept += 1
            records.append((job_id, old, new or b""))
        if progress is not None:
            progress(report)
        if step.left == 0 and not records:
            return report


def refusal(store: Store, queues: Sequence[str]) -> str | None:
    """Why a worker must not serve ``queues`` (a queue holds layout-1 data, which it would
    misread), or None. One round trip of O(log N) reads, and two more when low scores are
    found: only entries whose records are 0.1's (or a meta hash) count, never orphans."""
    old = store.old_layout.confirmed([data for data in store.old_layout.data(queues) if data.found])
    if not old:
        return None
    names = ", ".join(f"{d.queue!r} ({d.describe()})" for d in old)
    which = f"queue {names} holds" if len(old) == 1 else f"queues {names} hold"
    return (
        f"{which} data in the Redis layout of django-delayq 0.1, which this "
        "version would misread (jobs due later run at once, dead jobs are deleted): stop "
        "every worker, run 'python manage.py delayq_upgrade', then start them again"
    )


class Starting(Protocol):
    """What :func:`refuse_old_layout` needs of a worker about to start (a
    :class:`~django_delayq.worker.dispatch.Worker` is one)."""

    @property
    def store(self) -> Store: ...
    @property
    def queues(self) -> Sequence[str]: ...
    @property
    def name(self) -> str: ...
    @property
    def burst(self) -> bool: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def outage(self) -> Outage: ...


def refuse_old_layout(worker: Starting, outage_limit: float) -> int | None:
    """A worker's check before it starts anything: None to go on; 1 (one error line logged)
    when a queue it serves holds layout-1 data; 0 when asked to stop meanwhile; 2 when
    ``--burst`` met an unreachable Redis for ``outage_limit`` seconds (as its claims do).
    An unreachable Redis is waited out with backoff: no queue is served unchecked."""
    outage = Backoff("layout check", outage=worker.outage)
    while not worker.stopping:
        try:
            refused = refusal(worker.store, worker.queues)
        except DelayQError as exc:
            if worker.burst and worker.outage.down_for() > outage_limit:
                logger.error(
                    "--burst: Redis unreachable or failing for %.0f s (%s); giving up",
                    outage_limit,
                    exc,
                )
                return 2
            time.sleep(outage.failed(exc))
            continue
        outage.ok()
        if refused:
            logger.error("worker %s refuses to start: %s", worker.name, refused)
            return 1
        return None
    return 0
