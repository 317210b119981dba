"""Time one search of the admin's pending list (``?q=``) with 100,000 and 1,000,000 pending jobs.

    REDIS_URL=redis://127.0.0.1:6379/0 python benchmarks/admin_search.py [--runs 10] \\
        [--sizes 100000,1000000]

Uses admin_scale.py's setup: a real Redis under a prefix of its own
(``delayq-bench-<random>``, deleted when done, even on Ctrl-C), jobs written the way
``schedule()`` stores them, pipelined 10,000 at a time (``cancel_order(i,
reason="unpaid")``, due from an hour ago to thirty days ahead). Each search is a request
through Django's test client as a logged-in superuser; the table gives the median of
``--runs`` requests (after two warm-up requests):

- *no match*: a query no job matches, so the search reads its whole bound
  (``SEARCH_LIMIT`` jobs, 10,000) and says where it stopped: the worst case;
- *argument*: a query one argument of the most urgent jobs matches (``"reason":"unpaid"``
  is in every job: every job read matches; 50 shown);
- *exact id*: the id of the last job in the set, found by its direct lookup.

The time of a search is bounded by what it reads, not by the size of the set, so the
1M / 100k ratio should stay near 1.
"""

from __future__ import annotations

import argparse
import random
import time
from urllib.parse import urlencode

import admin_scale  # configures Django
from admin_scale import PREFIX, QUEUE, REDIS_URL, cleanup, fill
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_delayq.admin import search
from django_delayq.storage.connection import get_store
from django_delayq.storage.store import Store

WARMUP = 2


def median_ms(client: Client, url: str, runs: int, expect: str) -> float:
    return admin_scale.median_ms(client, url, runs, expect, WARMUP)


def measure(client: Client, store: Store, runs: int) -> dict[str, float]:
    base = reverse("admin:django_delayq_job_pending")
    size = store.size(QUEUE, "pending")
    last_id = store.page_ids(QUEUE, "pending", size - 1, 1)[0]

    def page(q: str) -> str:
        return f"{base}?{urlencode({'queue': QUEUE, 'q': q})}"

    return {
        "no match (reads the bound)": median_ms(
            client, page("no-such-customer"), runs, "0 jobs match"
        ),
        "argument (every job read matches)": median_ms(
            client, page('reason="unpaid"'), runs, "jobs match"
        ),
        "exact id (direct lookup)": median_ms(client, page(last_id), runs, "1 job matches"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed requests per search")
    parser.add_argument("--sizes", default="100000,1000000", help="pending jobs, ascending")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]

    call_command("migrate", verbosity=0)
    user = User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    store = get_store()
    store.client.ping()
    rng = random.Random(42)
    print(f"Redis {REDIS_URL}, prefix {PREFIX}, median of {options.runs} requests per search")
    print(f"one search reads at most {search.SEARCH_LIMIT:,} jobs, {search.SEARCH_CHUNK:,} a chunk")
    results: dict[int, dict[str, float]] = {}
    try:
        filled = 0
        for size in sizes:
            started = time.perf_counter()
            fill(store, size - filled, rng)
            filled = size
            took = time.perf_counter() - started
            print(f"filled {store.size(QUEUE, 'pending'):,} pending jobs ({took:.1f} s)")
            results[size] = measure(client, store, options.runs)
    finally:
        cleanup(store)
    head = f"{'search':<36}" + "".join(f"{f'{s:,} jobs':>16}" for s in sizes) + f"{'ratio':>8}"
    print()
    print(head)
    print("-" * len(head))
    for name in results[sizes[0]]:
        row = "".join(f"{results[s][name]:>13.1f} ms" for s in sizes)
        ratio = results[sizes[-1]][name] / results[sizes[0]][name]
        print(f"{name:<36}{row}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
