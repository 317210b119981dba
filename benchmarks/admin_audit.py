"""What the admin log costs a bulk action: a confirmed "all matching" run-now of 10,000
pending jobs with its LogEntry rows written (one per job, admin/audit.py) and without.

    REDIS_URL=redis://127.0.0.1:6379/0 python benchmarks/admin_audit.py [--runs 5] \\
        [--jobs 10000]

Uses admin_scale.py's setup (a real Redis under a prefix of its own, deleted when done;
SQLite in memory, or PostgreSQL with DELAYQ_BENCH_PG_DB=<an empty database>). Each run
POSTs the confirmation page's form (the ids it counted, ``confirmed=yes``) through Django's
test client as a superuser, alternating a round with the log and one without (``audit.log``
and ``audit.task_names`` replaced by no-ops), then puts the jobs back in the future so the
next run changes all of them again. Run now is the action timed because it leaves the jobs
in place; cancel and delete write the same entries. The table gives the median per action
and per job.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from admin_scale import DATABASE, PREFIX, QUEUE, REDIS_URL, cleanup, fill  # configures Django
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_delayq.admin import audit
from django_delayq.storage.connection import get_store


def one_run(client: Client, store, ids: list[str]) -> float:
    later = {job_id: int((time.time() + 86400) * 1000) for job_id in ids}
    store.client.zadd(store.key(QUEUE, "pending"), later)  # not due: run now changes each
    data = {"queue": QUEUE, "action": "run_now", "job_ids": " ".join(ids), "confirmed": "yes"}
    started = time.perf_counter()
    response = client.post(reverse("admin:django_delayq_job_action"), data)
    took = time.perf_counter() - started
    assert response.status_code == 302, response.status_code
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed actions per variant")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per action")
    options = parser.parse_args()
    call_command("migrate", verbosity=0)
    user = User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    store = get_store()
    rng = random.Random(42)
    logged, real_log, real_names = [], audit.log, audit.task_names
    unlogged = []
    database = DATABASE["ENGINE"].rsplit(".", 1)[-1]
    print(f"Redis {REDIS_URL}, prefix {PREFIX}, {database}, {options.jobs:,} jobs an action")
    try:
        fill(store, options.jobs, rng)
        ids = store.page_ids(QUEUE, "pending", 0, options.jobs)
        for _ in range(options.runs):
            audit.log, audit.task_names = real_log, real_names
            logged.append(one_run(client, store, ids))
            audit.log = lambda *args, **kwargs: 0
            audit.task_names = lambda *args, **kwargs: {}
            unlogged.append(one_run(client, store, ids))
    finally:
        audit.log, audit.task_names = real_log, real_names
        cleanup(store)
    assert LogEntry.objects.count() == options.runs * options.jobs
    print()
    print(f"{'run now of N jobs':<28}{'median':>12}{'per job':>12}")
    for name, times in (("with the admin log", logged), ("without it", unlogged)):
        median = statistics.median(times)
        print(f"{name:<28}{median * 1000:>9.0f} ms{median / options.jobs * 1e6:>9.1f} us")
    extra = statistics.median(logged) - statistics.median(unlogged)
    print(f"{'the log adds':<28}{extra * 1000:>9.0f} ms{extra / options.jobs * 1e6:>9.1f} us")


if __name__ == "__main__":
    main()
