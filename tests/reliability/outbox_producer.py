"""A producer process of the outbox scenarios (tests/reliability/test_outbox.py): it schedules
``count`` jobs of ``mark`` with ``on_commit=True`` in one transaction, then SIGKILLs itself
at the moment named:

- ``commit``: right after the COMMIT, before any relay (a commit hook registered before the
  jobs' own, and Django runs them in order);
- ``relayed``: in the first job's fast path, after Redis took its row and before the row's
  delete (the rest are never relayed by this process).

Or, with moment ``rows``, it inserts ``count`` rows due now straight into the outbox (no
fast path) and exits 0: what the relay race starts from.

Usage: ``python -m tests.reliability.outbox_producer <tag> <count> <moment>``, with the
environment of a worker (tests.reliability.settings, DELAYQ_DATABASE).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import django

django.setup()

from django.db import transaction  # noqa: E402

from django_delayq.jobs.ids import new_job_id  # noqa: E402
from django_delayq.jobs.record import encode_record  # noqa: E402
from django_delayq.outbox import rows as outbox  # noqa: E402
from tests.reliability.tasks import mark  # noqa: E402


def die(*args: object, **kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    tag, count, moment = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if moment == "rows":
        now = time.time()
        record = mark.name, 20, "i"
        rows = [
            (
                outbox.Row(
                    new_job_id(),
                    "default",
                    now,
                    encode_record(record[0], [tag, str(i)], {}, None, record[1], record[2]),
                ),
                now,
            )
            for i in range(count)
        ]
        outbox.save_many(outbox.write_alias(), rows, now)
        return 0
    if moment == "relayed":
        outbox.delete = die  # the fast path deletes the row once Redis has it
    with transaction.atomic():
        if moment == "commit":
            transaction.on_commit(die)
        for i in range(count):
            mark.schedule(tag, str(i), on_commit=True)
    print("the producer was not killed", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
