"""The set a list pages through, read by rank whichever it is: a queue's pending, running or
dead set (the store's :class:`~django_delayq.storage.reads.Reads`), or its finished jobs,
kept a while (:data:`FINISHED`, ``store.finished``: newest first).

The lists (:mod:`django_delayq.admin.views`), their task filter and their search
(:mod:`django_delayq.admin.search`) read through these functions, so the finished list pages,
filters and searches as the others do, at the same cost: one ZCARD, one ZRANGE by rank and
one HMGET a page. A finished job reads as a :class:`RawJob` with status None and its kept
entry (``kept``), which ``job_from_raw`` turns into a succeeded or cancelled Job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_delayq.jobs.finished import FINISHED as OUTCOMES
from django_delayq.storage.milliseconds import ms
from django_delayq.storage.reads import RawJob
from django_delayq.storage.store import Store

FINISHED = "finished"  # the list of the finished jobs kept (not a job's status: OUTCOMES)


def list_of(raw: RawJob) -> str:
    """The list a job read by ``store.fetch(..., finished=True)`` is in."""
    return FINISHED if raw.status is None and raw.kept else raw.status or ""


def is_finished(status: str) -> bool:
    """Whether a job status (succeeded, cancelled) or a list is the finished one."""
    return status == FINISHED or status in OUTCOMES


def kept_record(entry: bytes | None) -> bytes | None:
    """The record framed inside a kept entry (jobs/finished.py), without decoding anything
    else: None for a missing or damaged entry."""
    if not entry:
        return None
    try:
        first = entry.index(b"\n")
        second = entry.index(b"\n", first + 1)
        length = int(entry[first + 1 : second])
    except ValueError:
        return None
    end = second + 1 + length
    return entry[second + 1 : end] if length >= 0 and end <= len(entry) else None


def size(store: Store, queue: str, status: str) -> int:
    if status == FINISHED:
        return store.finished.count(queue)
    return store.size(queue, status)


def ranks(store: Store, queue: str, status: str, offset: int, limit: int) -> list[tuple[str, Any]]:
    """(id, score in epoch ms) of ranks [offset, offset + limit): for the finished list,
    the newest first, scored by when they ended."""
    if status != FINISHED:
        return store.ranks(queue, status, offset, limit)
    if limit < 1 or offset < 0:
        return []
    return [(job_id, ms(ended)) for job_id, ended in store.finished.page(queue, offset, limit)]


def page_ids(store: Store, queue: str, status: str, offset: int, limit: int) -> list[str]:
    if status != FINISHED:
        return store.page_ids(queue, status, offset, limit)
    return [job_id for job_id, _ in ranks(store, queue, status, offset, limit)]


def records(store: Store, queue: str, status: str, ids: Sequence[str]) -> list[bytes | None]:
    """The records of ``ids`` (None for a job gone): of a kept job, the one it holds."""
    if status != FINISHED:
        return store.records(queue, ids)
    return [kept_record(entry) for entry in store.finished.kept(queue, ids)]


def fetch_many(
    store: Store, queue: str, status: str, ids_scores: Sequence[tuple[str, Any]]
) -> list[RawJob]:
    """The jobs of ``ids_scores`` (what :func:`ranks` gives) as the list shows them."""
    if status != FINISHED:
        return store.fetch_many(queue, status, ids_scores)
    ids = [job_id for job_id, _ in ids_scores]
    return [
        RawJob(job_id, queue, None, None, None, kept=entry)
        for job_id, entry in zip(ids, store.finished.kept(queue, ids), strict=True)
    ]


def page(store: Store, queue: str, status: str, offset: int, limit: int) -> list[RawJob]:
    return fetch_many(store, queue, status, ranks(store, queue, status, offset, limit))
