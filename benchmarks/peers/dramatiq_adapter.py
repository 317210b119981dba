"""dramatiq: a ``RedisBroker`` with the default middleware, ``send_with_options(delay=ms)``,
one call per job. A delayed message goes to the queue's delay queue (``default.DQ``: a
list of ids and a hash of messages); the worker fetches up to 1,000 per worker thread
into memory, holds them until due, then moves each to ``default``.

The worker is ``dramatiq --processes 1 --threads 1``: a parent process and one worker
process with one worker thread (plus its consumer threads).
"""

from __future__ import annotations

import os
import time
from importlib.metadata import version

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.peers.recorder import URL_ENV
from benchmarks.peers.recorder import record as _record

broker = RedisBroker(url=os.environ[URL_ENV])
dramatiq.set_broker(broker)

WORKER = ["dramatiq", "benchmarks.peers.dramatiq_adapter", "--processes", "1", "--threads", "1"]
SETUP = "dramatiq --processes 1 --threads 1 (delay queue prefetch 1,000)"


@dramatiq.actor
def record(tag: str) -> None:
    _record(tag)


def versions() -> dict[str, str]:
    return {"system": version("dramatiq")}


def schedule_in(tag: str, seconds: float) -> None:
    record.send_with_options(args=(tag,), delay=round(seconds * 1000))


def schedule_at(tag: str, epoch: float) -> None:
    record.send_with_options(args=(tag,), delay=max(0, round((epoch - time.time()) * 1000)))


def pending() -> int:
    client = broker.client
    return client.hlen("dramatiq:default.DQ.msgs") + client.hlen("dramatiq:default.msgs")
