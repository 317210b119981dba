"""Finished jobs kept a while: the queue's ``finished`` set and ``kept`` hash
(lua/include/keeping.lua).

Jobs that succeeded (ack.lua, claim.lua's acks) or were cancelled (cancel.lua) are kept, when
``DELAYQ["FINISHED_MAX_AGE"]`` and ``DELAYQ["FINISHED_MAX_COUNT"]`` are both above 0, with
their record, their errors and the attempt that ended them; the scripts that add an entry
trim the oldest (by age, then by count). This module gives the scripts their keep arguments
and reads the kept jobs back (``store.finished``; :mod:`django_delayq.jobs.finished` decodes an
entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_delayq.conf import delayq_settings
from django_delayq.conf.queues import own_options
from django_delayq.storage.calls import Calls
from django_delayq.storage.milliseconds import ms
from django_delayq.storage.replies import pairs

Keep = tuple[int, int]  # (max age in ms, max count); (0, 0): keep none


def keep_setting(queue: str | None = None) -> Keep:
    """The scripts' keep arguments from the settings: (0, 0) when either is 0. For a
    ``queue``, its own ``finished_max_age`` / ``finished_max_count`` in ``DELAYQ["QUEUES"]``
    win where given (conf/queues.py)."""
    age, count = delayq_settings.FINISHED_MAX_AGE, delayq_settings.FINISHED_MAX_COUNT
    if queue is not None:
        own = own_options(queue)
        age = age if own.get("finished_max_age") is None else own["finished_max_age"]
        count = count if own.get("finished_max_count") is None else own["finished_max_count"]
    if not age or not count:
        return (0, 0)
    return (ms(age), int(count))


def attempt_summary(
    number: int, started: float, duration: float, worker: str, due: float | None = None
) -> str:
    """What a kept job holds of the attempt that ended it: its number, start (epoch seconds),
    duration (seconds), due time (epoch seconds; None: not known) and the worker that ran
    it (jobs/finished.py parses it)."""
    due_ms = "-" if due is None else round(due * 1000)
    return f"{number} {round(started * 1000)} {duration * 1000:.3f} {due_ms} {worker}"


class FinishedStore:
    """A Store's finished jobs kept (``store.finished``): reads of the kept jobs, and the
    keeping of jobs cancelled in the outbox, built and sent through the Store."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def keep_cancelled(self, queue: str, jobs: Sequence[tuple[str, bytes, float | None]]) -> int:
        """Keep (job id, record, due time in epoch seconds or None) of jobs whose outbox
        rows a cancel deleted as finished, outcome "cancelled" (lua/keep.lua), with the
        queue's keep setting; how many were kept (0 when keeping is off)."""
        keep = keep_setting(queue)
        if not jobs or not keep[0]:
            return 0
        argv: list[Any] = [b"", *keep]
        for job_id, record, due in jobs:
            argv += [job_id, record, b"" if due is None else ms(due)]
        return int(self._store.call(self._store.op("keep", queue, argv, int)))

    def count(self, queue: str) -> int:
        key = self._store.key(queue, "finished")
        return int(self._store.call(self._store.command(b"ZCARD", key, route=key)) or 0)

    def page(self, queue: str, offset: int, limit: int) -> list[tuple[str, float]]:
        """(id, ended at in epoch seconds) of kept jobs, the newest first."""
        if limit <= 0:
            return []
        key = self._store.key(queue, "finished")
        reply = self._store.call(
            self._store.command(
                b"ZRANGE", key, offset, offset + limit - 1, b"REV", b"WITHSCORES", route=key
            )
        )
        return [(_text(job_id), float(score) / 1000) for job_id, score in pairs(reply)]

    def kept(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        """The kept entries of ``ids`` (None for an id not kept, or no longer)."""
        if not ids:
            return []
        key = self._store.key(queue, "kept")
        reply = self._store.call(self._store.command(b"HMGET", key, *ids, route=key))
        return [value if value else None for value in reply]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
