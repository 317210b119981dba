"""A producer process of the batch-in-a-transaction scenario
(tests/reliability/test_batch_commit.py): in one transaction it opens a batch whose
on_complete and on_success record under ``<tag>:cb``, schedules ``count`` members of
``timed`` with ``on_commit=True`` (so the batch's seal is an on_commit job too), prints the
batch's id, and SIGKILLs itself right after the COMMIT, before any job is relayed (a commit
hook registered before the jobs' own: Django runs them in order). The rows wait for a
worker's relay.

Usage: ``python -m tests.reliability.batch_producer <tag> <count>``, with the environment
of a worker (tests.reliability.settings, DELAYQ_DATABASE).
"""

from __future__ import annotations

import os
import signal
import sys

import django

django.setup()

from django.db import transaction  # noqa: E402

from django_delayq import batch  # noqa: E402
from tests.reliability.tasks import timed  # noqa: E402


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    tag, count = sys.argv[1], int(sys.argv[2])
    callbacks = {f"on_{kind}": timed.call(f"{tag}:cb", kind) for kind in ("success", "complete")}
    with transaction.atomic():
        transaction.on_commit(die)
        with batch(**callbacks) as opened:
            for i in range(count):
                timed.schedule(tag, str(i), on_commit=True)
        print(opened.id, flush=True)
    print("the producer was not killed", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
