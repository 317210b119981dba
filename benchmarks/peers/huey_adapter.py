"""huey: a ``RedisHuey`` with its defaults (blocking dequeue, results kept only when a
task returns something), ``task.schedule(args, delay=/eta=)``, one call per job.

The consumer is ``huey_consumer -w 1 -k thread``: one worker thread, and the consumer's
scheduler thread that moves due tasks to the queue once per second (its default
``--scheduler-interval 1``, and its minimum). A scheduled task is first pushed to the
queue; the consumer's worker then parks it in the schedule sorted set until due.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from importlib.metadata import version

from huey import RedisHuey

from benchmarks.peers.recorder import URL_ENV
from benchmarks.peers.recorder import record as _record

huey = RedisHuey("bench", url=os.environ[URL_ENV])

WORKER = ["huey_consumer", "benchmarks.peers.huey_adapter.huey", "-w", "1", "-k", "thread"]
SETUP = "huey_consumer -w 1 -k thread (scheduler interval 1 s, the default and minimum)"


@huey.task()
def record(tag: str) -> None:
    _record(tag)


def versions() -> dict[str, str]:
    return {"system": version("huey")}


def schedule_in(tag: str, seconds: float) -> None:
    record.schedule((tag,), delay=seconds)


def schedule_at(tag: str, epoch: float) -> None:
    record.schedule((tag,), eta=datetime.fromtimestamp(epoch, UTC))


def pending() -> int:
    return huey.pending_count() + huey.scheduled_count()
