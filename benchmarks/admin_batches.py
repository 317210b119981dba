"""Time the admin's Batches pages: the list of batches, and a batch's page with 100 and with
10,000 members (its first, middle and last page of members).

    REDIS_URL=redis://127.0.0.1:6379/0 python benchmarks/admin_batches.py [--runs 25]

Runs against a real Redis under its own key prefix (admin_scale.py's settings: prefix
``delayq-bench-<random>``) and deletes its keys when done, even on Ctrl-C. The batches are
made through the API (``batch()`` around ``schedule_many()``, members due in an hour), so
their hashes are the ones a project has. A batch's page reads its two member hashes whole
(HGETALL) and sorts them, so it grows with the batch (up to MEMBERS_READ_LIMIT members);
the list costs the same whatever the number of batches. The table gives the median of
``--runs`` requests (after five warm-up requests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import admin_scale as base  # configures Django: settings, prefix, Redis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_delayq import batch, schedule_many, task
from django_delayq.storage.connection import get_store


@task(name="bench.batch_member", queue=base.QUEUE)
def member(i: int) -> None:
    """A member task (never run here)."""


def make_batch(size: int) -> str:
    with batch(on_complete=member.call(-1), on_death=member.call(-2)) as made:
        for start in range(0, size, 1000):
            schedule_many(member, [(i,) for i in range(start, min(start + 1000, size))], delay=3600)
    return made.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=25, help="timed requests per view")
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    client = Client()
    client.force_login(User.objects.create_superuser("bench", "bench@example.com", "bench"))
    store = get_store()
    print(f"Redis {base.REDIS_URL}, prefix {base.PREFIX}, median of {options.runs} requests")
    page = reverse("admin:django_delayq_job_batch")
    try:
        small, big = make_batch(100), make_batch(10_000)
        for _ in range(48):
            make_batch(1)
        views = {
            "list of batches (50 shown)": reverse("admin:django_delayq_job_batches"),
            "batch of 100, page 1": f"{page}?id={small}",
            "batch of 10,000, page 1": f"{page}?id={big}",
            "batch of 10,000, page 50": f"{page}?id={big}&p=50",
            "batch of 10,000, page 100": f"{page}?id={big}&p=100",
        }
        timings = {name: base.median_ms(client, url, options.runs) for name, url in views.items()}
    finally:
        keys = list(store.client.scan_iter(match=f"{base.PREFIX}:*", count=1000))
        if keys:
            store.client.unlink(*keys)
    head = f"{'view':<32}{'median':>12}"
    print()
    print(head)
    print("-" * len(head))
    for name, ms in timings.items():
        print(f"{name:<32}{ms:>9.2f} ms")


if __name__ == "__main__":
    main()
