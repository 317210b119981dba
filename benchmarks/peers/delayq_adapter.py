"""django-delayq: ``benchmarks.settings`` (django-redis cache connection, the defaults), the
``@task`` ``benchmarks.tasks.record``, one ``schedule()`` call per job.

Only the public API is used (``task(...).schedule(delay=/at=)`` and the
``delayq_worker`` command). ``pending()`` counts the documented key layout
(``{prefix}:{<queue>}:pending``) with a plain client: it is a check, not a workload.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from importlib.metadata import version

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from benchmarks.tasks import record  # noqa: E402 (needs django.setup())

WORKER = ["python", "-m", "django", "delayq_worker", "--concurrency", "1"]
SETUP = (
    "python -m django delayq_worker --concurrency 1 (verbosity 1: a log line per finished attempt)"
)


def versions() -> dict[str, str]:
    return {"system": version("django-delayq"), "django": django.get_version()}


def schedule_in(tag: str, seconds: float) -> None:
    record.schedule(tag, delay=seconds)


def schedule_at(tag: str, epoch: float) -> None:
    record.schedule(tag, at=datetime.fromtimestamp(epoch, UTC))


def pending() -> int:
    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    prefix = os.environ.get("DELAYQ_BENCH_PREFIX", "delayq-bench")
    return sum(client.zcard(key) for key in client.scan_iter(match=f"{prefix}:*:pending"))
