"""The producer of the batch-edge scenarios whose members wait in the database
(tests/reliability/test_batch_outbox_edges.py), in a process of its own so it can use the
workers' database (PostgreSQL, or an SQLite file they share). Prints one JSON line:
{"batches": {name: batch id}, "gone": [ids that must never run]}.

- ``savepoint``: in one transaction, a batch whose on_commit members are "0", then "1"
  in a savepoint rolled back, then "2" in a savepoint released.
- ``outbox``: with HORIZON, five batches of a member due in an hour ("far", a row, keyed)
  and one due now; from outside the batches the far member is cancelled by id, by key,
  replaced by its key with a far job, with a near one; the fifth batch's members are
  on_commit rows, one cancelled in their transaction.
- ``outbox-down``: one batch as above, its far member cancelled in a transaction that
  prints "cancelled" and waits for a line on stdin before it commits (the test stops Redis
  meanwhile: the end cannot be written at the commit).

Usage: ``python -m tests.reliability.batch_edges_producer <tag> <scenario>``, with the
environment of a worker (tests.reliability.settings, DELAYQ_DATABASE, DELAYQ_HORIZON).
"""

from __future__ import annotations

import json
import sys

import django

django.setup()

from django.db import transaction  # noqa: E402

from django_delayq import batch, cancel  # noqa: E402
from tests.reliability.tasks import timed  # noqa: E402


class Rollback(Exception):
    pass


def callbacks(tag: str) -> dict[str, object]:
    return {f"on_{kind}": timed.call(f"{tag}:cb", kind) for kind in ("success", "complete")}


def savepoint(tag: str) -> dict:
    with transaction.atomic(), batch(**callbacks(f"{tag}:sp")) as opened:
        timed.schedule(tag, "0", on_commit=True)
        gone = None
        try:
            with transaction.atomic():
                gone = timed.schedule(tag, "1", on_commit=True)
                raise Rollback
        except Rollback:
            pass
        with transaction.atomic():
            timed.schedule(tag, "2", on_commit=True)
    return {"batches": {"sp": opened.id}, "gone": [gone.id]}


def far_batch(tag: str, name: str) -> tuple[str, object]:
    with batch(**callbacks(f"{tag}:{name}")) as opened:
        far = timed.schedule(tag, f"{name}-far", delay=3600, key=f"{tag}:{name}")
        timed.schedule(tag, f"{name}-now")
    assert far.waits_in == "database", far
    return opened.id, far


def outbox(tag: str) -> dict:
    batches, gone = {}, []
    for name in ("by-id", "by-key", "replaced-far", "replaced-near"):
        batches[name], far = far_batch(tag, name)
        gone.append(far.id)
        if name == "by-id":
            assert cancel(far.id)
        elif name == "by-key":
            assert cancel(key=f"{tag}:{name}")
        else:
            delay = 3600 if name == "replaced-far" else 0
            job = timed.schedule(f"{tag}:other", name, delay=delay, key=f"{tag}:{name}")
            assert (job.id, job.outcome) == (far.id, "replaced"), job
    with transaction.atomic(), batch(**callbacks(f"{tag}:commit")) as opened:
        timed.schedule(tag, "commit-0", on_commit=True)
        cancelled = timed.schedule(tag, "commit-1", on_commit=True)
        assert cancel(cancelled.id)
    batches["commit"] = opened.id
    gone.append(cancelled.id)
    return {"batches": batches, "gone": gone}


def outbox_down(tag: str) -> dict:
    batch_id, far = far_batch(tag, "down")
    with transaction.atomic():
        assert cancel(far.id)
        print("cancelled", flush=True)
        sys.stdin.readline()  # Redis is stopped now
    return {"batches": {"down": batch_id}, "gone": [far.id]}


def main() -> int:
    tag, scenario = sys.argv[1], sys.argv[2]
    made = {"savepoint": savepoint, "outbox": outbox, "outbox-down": outbox_down}[scenario](tag)
    print(json.dumps(made), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
