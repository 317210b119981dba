"""Which batch a schedule() call joins: the batch open in this thread or coroutine
(``with django_delayq.batch(...)``, :mod:`django_delayq.batches.api`), read where a call is
prepared (prepared.Prepared) and told of each job stored (api.py).

A leaf of scheduling/: it knows a link only as the JSON text stored beside the job
(``links``, lua/include/links.lua), so scheduling never imports the batches package.
"""

from __future__ import annotations

import contextvars
from typing import Protocol


class Membership(Protocol):
    """An open batch as the scheduling code sees it."""

    link: str  # the JSON every member's link carries

    def joined(self, job_id: str, queue: str, in_database: bool) -> None:
        """A job of this batch was stored (created or replaced: its id is the member's);
        ``in_database``: as an outbox row (an on_commit job, one beyond the horizon)."""

    def row_written(self, job_id: str, alias: str) -> None:
        """The row of a job of this batch was written (created or rewritten) in the
        transaction of ``alias``, if one is open: a savepoint rolled back may take it."""


_open: contextvars.ContextVar[Membership | None] = contextvars.ContextVar(
    "django_delayq_batch", default=None
)


def current() -> Membership | None:
    return _open.get()


def enter(membership: Membership | None) -> contextvars.Token:
    return _open.set(membership)


def leave(token: contextvars.Token) -> None:
    _open.reset(token)


def joined(jobs: list) -> None:
    """Tell the open batch, if any, of jobs a call stored (Job values: those created,
    replaced or deferred to a commit join it; one kept by its key or found finished does
    not)."""
    open_batch = _open.get()
    if open_batch is None:
        return
    for job in jobs:
        if job.outcome in ("created", "replaced", "deferred") and job.status == "pending":
            open_batch.joined(job.id, job.queue, job.waits_in == "database")


def row_written(link: str, job_id: str, alias: str) -> None:
    """Tell the open batch, if any, that the outbox wrote the row of one of its jobs (one
    whose record carries a link: scheduled in the block) in the database ``alias``."""
    open_batch = _open.get()
    if open_batch is not None and link:
        open_batch.row_written(job_id, alias)
