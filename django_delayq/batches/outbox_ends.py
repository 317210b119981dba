"""The ends of linked jobs that wait in the database (an on_commit row not relayed yet, a row
beyond ``HORIZON``): cancelled there, or replaced by their unique key under another link, they
end for their batch and chain as the same operations in Redis do (cancel.lua, schedule.lua
write a 'cancelled' forward entry in the script that ends the job).

A row's end cannot be written to Redis in the transaction that deletes or rewrites the row,
and written before the commit it would be wrong after a rollback. So the end is itself an
outbox job, of the internal task ``django_delayq.batches.row_ended``, written in that
transaction (outbox/placement.py calls :func:`row_ended` there): it commits, or rolls back,
with the row's change. After the commit it is relayed at once (the on_commit fast path) and a
worker of the row's queue runs it: it writes the row's forward entry into its queue's
``forward`` hash (field ``<id>#<tag>``, a tag drawn when the end was written, so a second run
writes the same entry), then forwards it (forwarding.py). Nothing is lost on the way: a
Redis that refuses the fast path leaves the job's row for the workers' relay (after
``GRACE``); a refused entry write fails the attempt, which is retried; a forwarding that
fails leaves the entry for the recovery duty's sweep. Run twice, it forwards the same end
twice, which changes nothing the second time (a member's outcome is recorded once, a
callback decided once; a chain's end deletes a hash already deleted).
"""

from __future__ import annotations

import time

from django_delayq.batches.forwarding import forward
from django_delayq.jobs.ids import new_job_id
from django_delayq.outbox import placement
from django_delayq.outbox.rows import Row
from django_delayq.scheduling import membership
from django_delayq.scheduling.registry import task
from django_delayq.storage.connection import get_store

ROW_END_TASK = "django_delayq.batches.row_ended"


@task(name=ROW_END_TASK, max_retries=25)
def forward_row_end(in_queue: str, job_id: str, at_ms: int, link: str, tag: str) -> None:
    """The 'cancelled' end of the linked row ``job_id`` of ``in_queue`` (see the module
    docstring; no parameter is named like an option of schedule(): delayq.W006)."""
    store = get_store()
    field = f"{job_id}#{tag}"
    store.call(store.batches.write_forward_op(in_queue, field, "cancelled", at_ms, link))
    forward(store, store.batches.read_forward(in_queue, [field]))


def row_ended(alias: str, row: Row) -> None:
    """A linked row was deleted or given another link in the open transaction of ``alias``:
    its end, an on_commit job of that transaction (joining no batch)."""
    token = membership.enter(None)
    try:
        at_ms = int(time.time() * 1000)
        call = forward_row_end.call(row.queue, row.id, at_ms, row.link, new_job_id())
        call.schedule(on_commit=alias, queue=row.queue)
    finally:
        membership.leave(token)


placement.use_row_ends(row_ended)
