"""Time the admin dashboard and the pending list with 1,000 and 1,000,000 pending jobs.

    REDIS_URL=redis://127.0.0.1:6379/0 python benchmarks/admin_scale.py [--runs 25] [--big 1000000]

Runs against a real Redis under its own key prefix (``delayq-bench-<random>``) and deletes
its keys when done, even on Ctrl-C. Jobs are written the way ``schedule()`` stores them
(record in the queue's ``jobs`` hash, id in ``pending`` scored by due time) but pipelined
in batches of 10,000, so filling a million takes well under a minute. Due times spread
from one hour ago to thirty days ahead, so there is a backlog and a lag to show.

Each view is requested through Django's test client as a logged-in superuser; the table
gives the median of ``--runs`` requests (after five warm-up requests) and the 1M / 1k ratio.
The pages read Redis with ZCARD / ZCOUNT / ZRANGE by rank, so the ratio should stay near 1.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django
from django.conf import settings

QUEUE = "bench"
BATCH = 10_000
WARMUP = 5
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = f"delayq-bench-{uuid.uuid4().hex[:10]}"
# SQLite in memory; DELAYQ_BENCH_PG_DB=<an existing, empty database> for PostgreSQL on
# 127.0.0.1:5432 (user postgres), as benchmarks/settings.py (its tables are left behind)
DATABASE = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
if os.environ.get("DELAYQ_BENCH_PG_DB"):
    DATABASE = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["DELAYQ_BENCH_PG_DB"],
        "HOST": os.environ.get("DELAYQ_BENCH_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("DELAYQ_BENCH_PG_PORT", "5432"),
        "USER": os.environ.get("DELAYQ_BENCH_PG_USER", "postgres"),
    }

settings.configure(
    DEBUG=False,
    SECRET_KEY="delayq-benchmark",
    USE_TZ=True,
    ALLOWED_HOSTS=["testserver"],
    INSTALLED_APPS=[
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.admin",
        "django_delayq",
    ],
    MIDDLEWARE=[
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    ROOT_URLCONF=__name__,
    TEMPLATES=[
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {
                "context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages",
                ]
            },
        }
    ],
    DATABASES={"default": DATABASE},
    PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    STATIC_URL="/static/",
    DELAYQ={"REDIS_URL": REDIS_URL, "PREFIX": PREFIX, "QUEUES": [QUEUE], "DEFAULT_QUEUE": QUEUE},
)
django.setup()

from django.contrib import admin  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import path, reverse  # noqa: E402

from django_delayq.jobs.ids import new_job_id  # noqa: E402
from django_delayq.jobs.record import encode_record  # noqa: E402
from django_delayq.storage.connection import get_store  # noqa: E402
from django_delayq.storage.store import Store  # noqa: E402

urlpatterns = [path("admin/", admin.site.urls)]


def fill(store: Store, count: int, rng: random.Random) -> None:
    """Add ``count`` pending jobs, pipelined (the records schedule() would store)."""
    jobs_key, pending_key = store.key(QUEUE, "jobs"), store.key(QUEUE, "pending")
    now = time.time()
    store.call(store.remember_queue_op(QUEUE))
    pipe = store.client.pipeline(transaction=False)
    done = 0
    while done < count:
        n = min(BATCH, count - done)
        records, scores = {}, {}
        for i in range(done, done + n):
            job_id = new_job_id()
            records[job_id] = encode_record("shop.tasks.cancel_order", [i], {"reason": "unpaid"})
            scores[job_id] = now + rng.uniform(-3600, 30 * 86400)
        pipe.hset(jobs_key, mapping=records)
        pipe.zadd(pending_key, scores)
        pipe.execute()
        done += n


def median_ms(
    client: Client, url: str, runs: int, expect: str | None = None, warmup: int = WARMUP
) -> float:
    """The median time of ``runs`` GETs of ``url`` after ``warmup`` ones, each answering
    200 (and, for the warm-up ones, holding ``expect`` when given)."""
    for _ in range(warmup):
        response = client.get(url)
        assert response.status_code == 200, url
        assert expect is None or expect in response.content.decode(), (url, expect)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, url
    return statistics.median(times)


def measure(client: Client, store: Store, runs: int) -> dict[str, float]:
    base = reverse("admin:django_delayq_job_pending")
    size = store.size(QUEUE, "pending")
    last = (size + 49) // 50
    views = {
        "dashboard": reverse("admin:django_delayq_job_changelist"),
        "pending list, page 1": f"{base}?queue={QUEUE}",
        "pending list, middle page": f"{base}?queue={QUEUE}&p={max(last // 2, 1)}",
        "pending list, last page": f"{base}?queue={QUEUE}&p={last}",
    }
    return {name: median_ms(client, url, runs) for name, url in views.items()}


def cleanup(store: Store) -> None:
    keys = [*store.keys(QUEUE), store.queues_key]
    store.client.unlink(*keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=25, help="timed requests per view")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    options = parser.parse_args()

    call_command("migrate", verbosity=0)
    user = User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    store = get_store()
    store.client.ping()
    rng = random.Random(42)
    print(f"Redis {REDIS_URL}, prefix {PREFIX}, median of {options.runs} requests per view")
    try:
        fill(store, options.small, rng)
        small = measure(client, store, options.runs)
        started = time.perf_counter()
        fill(store, options.big - options.small, rng)
        print(
            f"filled {store.size(QUEUE, 'pending'):,} pending jobs "
            f"in {time.perf_counter() - started:.1f} s"
        )
        big = measure(client, store, options.runs)
    finally:
        cleanup(store)
    head = f"{'view':<28}{options.small:>12,} jobs{options.big:>14,} jobs{'ratio':>9}"
    print()
    print(head)
    print("-" * len(head))
    for name in small:
        ratio = big[name] / small[name]
        print(f"{name:<28}{small[name]:>14.2f} ms{big[name]:>16.2f} ms{ratio:>9.2f}")


if __name__ == "__main__":
    main()
