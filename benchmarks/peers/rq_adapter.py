"""RQ: a ``Queue("default")`` with its defaults (pickle), ``enqueue_in(timedelta)`` /
``enqueue_at(datetime)``, one call per job; scheduled jobs wait in the queue's
``ScheduledJobRegistry`` (a sorted set) with a job hash each.

The worker is ``rq worker --with-scheduler``: the default ``Worker`` class, which forks a
work horse per job (RQ's documented production choice), and a scheduler process that
moves due jobs to the queue once per second.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from importlib.metadata import version

from redis import Redis
from rq import Queue
from rq.registry import ScheduledJobRegistry

from benchmarks.peers.recorder import URL_ENV
from benchmarks.peers.recorder import record as _record

queue = Queue("default", connection=Redis.from_url(os.environ[URL_ENV]))

WORKER = ["rq", "worker", "--with-scheduler", "--url", os.environ[URL_ENV], "default"]
SETUP = "rq worker --with-scheduler (Worker: a forked work horse per job; scheduler every 1 s)"


def record(tag: str) -> None:
    _record(tag)


def versions() -> dict[str, str]:
    return {"system": version("rq")}


def schedule_in(tag: str, seconds: float) -> None:
    queue.enqueue_in(timedelta(seconds=seconds), record, tag)


def schedule_at(tag: str, epoch: float) -> None:
    queue.enqueue_at(datetime.fromtimestamp(epoch, UTC), record, tag)


def pending() -> int:
    return ScheduledJobRegistry(queue=queue).count + queue.count
