"""Batches: ``with django_delayq.batch(on_success=..., on_complete=..., on_death=...)``.

Every job a schedule(), Task.schedule(), Call.schedule(), Chain.schedule(), schedule_many()
or aschedule() call stores inside the block (in that thread or coroutine) joins the batch: its
record has flag 'l' and its link names the batch (links.py). When the block ends the batch
is sealed: its members and their count are recorded (storage/batches.py, batch_seal.lua);
inside a transaction whose on_commit members wait in the outbox, the seal is itself an
on_commit job (``django_delayq.batches.seal``), so it commits, or rolls back, with them.

Each member's end (succeeded, dead, cancelled) is written by the script that ends it, in its
own queue, and forwarded to the batch by the worker (forwarding.py), which decides the
callbacks there, once each: ``on_death`` at the first dead member, ``on_success`` once every
member succeeded (a dead member requeued from the admin that then succeeds counts as
succeeded: ``on_success`` may run after ``on_death``, as in Sidekiq; a chain's dead step
requeued goes on with its chain, forwarding.py), ``on_complete`` once every member ended.
The seal counts the members whose rows stand when the block ends (a savepoint rolled back
takes its rows' members: :meth:`Batch.committed_members`). A callback is a
:class:`~django_delayq.Call` (or a Chain); its task reads the batch's id from
``current_job().batch_id``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from django_delayq.batches import links
from django_delayq.batches.steps import spec_of
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import to_datetime
from django_delayq.scheduling import membership
from django_delayq.scheduling.calls import Call, Chain
from django_delayq.scheduling.registry import task
from django_delayq.storage.connection import get_store

SEAL_TASK = "django_delayq.batches.seal"
KINDS = ("death", "success", "complete")
CANCEL_CHUNK = 500  # cancel.lua calls per round trip of cancel_batch()


class Batch:
    """The batch open in a ``with batch(...)`` block: ``id``, and the members joined so far
    (``members``: job id -> queue)."""

    def __init__(self, batch_id: str) -> None:
        self.id = batch_id
        self._link = links.dumps({"b": batch_id})
        self.members: dict[str, str] = {}
        self.deferred = False  # a member waits in the outbox for the transaction's commit
        self.closed = False  # the block ended: nothing joins any more
        # job id -> (alias, the commit hook) of each write of its row inside a transaction
        self._rows: dict[str, list[tuple[str, _Written]]] = {}

    @property
    def link(self) -> str:
        """The link of a member; "" once the block ended (an asyncio task made in the block
        keeps a copy of its context, and may schedule after it: such a job joins nothing)."""
        return "" if self.closed else self._link

    def joined(self, job_id: str, queue: str, in_database: bool) -> None:
        if not self.closed:
            self.members[job_id] = queue
            self.deferred = self.deferred or in_database

    def row_written(self, job_id: str, alias: str) -> None:
        if not self.closed and connections[alias].in_atomic_block:
            mark = _Written()
            transaction.on_commit(mark, using=alias)
            self._rows.setdefault(job_id, []).append((alias, mark))

    def committed_members(self) -> dict[str, str]:
        """The members whose rows a savepoint rolled back are not members: a member joined
        through rows only counts while one of its rows' writes stands. A write stands while
        the hook registered with it is still registered (Django discards the hooks of a
        savepoint it rolls back, at once) or has run (its transaction committed)."""
        return {
            job_id: queue
            for job_id, queue in self.members.items()
            if job_id not in self._rows
            or any(mark.ran or _registered(alias, mark) for alias, mark in self._rows[job_id])
        }

    def __repr__(self) -> str:
        return f"<Batch {self.id}: {len(self.members)} members>"


class _Written:
    """The commit hook of a member's row written in a transaction: it only notes the commit."""

    ran = False

    def __call__(self) -> None:
        self.ran = True


def _registered(alias: str, mark: _Written) -> bool:
    return any(mark in hook for hook in connections[alias].run_on_commit)


@dataclass(frozen=True)
class BatchState:
    """What :func:`get_batch` reads: ``total`` (None until the block ended), ``pending``
    (members not ended), ``succeeded``, ``dead``, ``cancelled``, ``done`` (every member ended,
    or the batch was cancelled), and each callback's state: ``callbacks`` maps 'success',
    'complete', 'death' to None (not decided), 'decided' or 'scheduled'."""

    id: str
    total: int | None
    pending: int | None
    succeeded: int
    dead: int
    cancelled: int
    done: bool
    created_at: datetime | None
    sealed_at: datetime | None
    cancelled_at: datetime | None
    callbacks: dict[str, str | None]
    expired: int = 0  # members not started before their expiry: ended as cancelled ones


@contextlib.contextmanager
def batch(
    *,
    on_success: Call | Chain | None = None,
    on_complete: Call | Chain | None = None,
    on_death: Call | Chain | None = None,
) -> Iterator[Batch]:
    """Open a batch: every job scheduled inside the block joins it (see the module
    docstring). Yields the :class:`Batch`; its callbacks are checked (task, arguments,
    options) before anything is stored."""
    specs = {
        kind: spec_of(value, f"on_{kind}")
        for kind, value in (("death", on_death), ("success", on_success), ("complete", on_complete))
        if value is not None
    }
    opened = Batch(new_job_id())
    store = get_store()
    store.batches.run_all(store.batches.open_ops(opened.id, specs, int(time.time() * 1000)))
    token = membership.enter(opened)
    try:
        yield opened
    finally:
        membership.leave(token)
        opened.closed = True
        _seal(opened)


def _seal(opened: Batch) -> None:
    # Sealed with the members that stand now: a member's row rolled back with a savepoint
    # is no member. A savepoint that holds a member's row but not this seal's (written
    # after every member) was closed before the block ended, so what stands now commits
    # with the seal, or rolls back with it.
    members = [list(pair) for pair in opened.committed_members().items()]
    open_on = [c.alias for c in connections.all(initialized_only=True) if c.in_atomic_block]
    if opened.deferred and open_on:
        # Members wait in the outbox: the seal commits (or rolls back) with them (with the
        # default database's transaction when several are open).
        alias = DEFAULT_DB_ALIAS if DEFAULT_DB_ALIAS in open_on else open_on[0]
        seal_job.call(opened.id, members).schedule(
            on_commit=alias, queue=next(iter(opened.members.values()))
        )
        return
    seal(opened.id, members)


def seal(batch_id: str, members: list[list[str]]) -> None:
    """Seal a batch and store the callbacks that decides (all its members may have ended)."""
    from django_delayq.batches.forwarding import place_decided

    store = get_store()
    decided = store.call(store.batches.seal_op(batch_id, [tuple(m) for m in members]))
    place_decided(store, batch_id, decided)


@task(name=SEAL_TASK, max_retries=25)
def seal_job(batch_id: str, members: list[list[str]]) -> None:
    """The seal of a batch whose members were scheduled with on_commit (see _seal)."""
    seal(batch_id, members)


def get_batch(batch_id: str) -> BatchState | None:
    """The batch's state now, or None when it is unknown (never opened, or expired a week
    after it finished)."""
    if not isinstance(batch_id, str):
        raise TypeError(f"batch id must be a string, got {batch_id!r}")
    fields = get_store().batches.read(batch_id)
    return None if fields is None else state_of(batch_id, fields)


def state_of(batch_id: str, fields: dict[str, str]) -> BatchState:
    def number(name: str) -> int:
        try:
            return int(fields.get(name) or 0)
        except ValueError:
            return 0

    def moment(name: str) -> datetime | None:
        value = fields.get(name)
        return to_datetime(int(value) / 1000) if value and value.isdigit() else None

    total = int(fields["total"]) if fields.get("total", "").isdigit() else None
    ended = number("n:succeeded") + number("n:dead") + number("n:cancelled") + number("n:expired")
    callbacks: dict[str, str | None] = {}
    for kind in KINDS:
        if f"cb:{kind}" in fields:
            callbacks[kind] = (
                "scheduled"
                if f"placed:{kind}" in fields
                else "decided"
                if f"fire:{kind}" in fields
                else None
            )
    return BatchState(
        id=batch_id,
        total=total,
        pending=None if total is None else max(total - ended, 0),
        succeeded=number("n:succeeded"),
        dead=number("n:dead"),
        cancelled=number("n:cancelled"),
        done=(total is not None and ended >= total) or "cancelled" in fields,
        created_at=moment("created"),
        sealed_at=moment("sealed"),
        cancelled_at=moment("cancelled"),
        callbacks=callbacks,
        expired=number("n:expired"),
    )


def cancel_batch(batch_id: str) -> int:
    """Cancel a batch: no callback is decided any more (one decided before is still
    scheduled), its pending members are cancelled (a running member finishes; a member chain
    stores no further step), in one round trip per CANCEL_CHUNK members. Returns how many
    members were cancelled. Members of a block that has not ended are not known yet: cancel
    those yourself, or cancel after the block."""
    from django_delayq.scheduling.api import announce_cancelled, cancel_in

    store = get_store()
    found, members = store.call(store.batches.cancel_op(batch_id))
    if not found:
        raise LookupError(f"no batch {batch_id!r} (never opened, or expired)")
    cancelled = 0
    for start in range(0, len(members), CANCEL_CHUNK):
        chunk = members[start : start + CANCEL_CHUNK]
        replies = store.run([store.cancel_op(queue, job_id, None) for job_id, queue in chunk])
        for (job_id, queue), reply in zip(chunk, replies, strict=True):
            if isinstance(reply, Exception) or reply is None:
                # not pending in Redis (a row of the outbox, or running, or an outage)
                cancelled += cancel_in(queue, job_id=job_id)
            else:
                announce_cancelled(queue, [reply])
                cancelled += 1
    return cancelled
