"""saq: a Redis ``Queue`` named ``default`` with its defaults (JSON),
``queue.enqueue("record", tag=tag, scheduled=epoch)``, one call per job, each awaited
through ``loop.run_until_complete`` on one event loop (the producer is synchronous code,
as a Django view is). A job is a JSON string ``saq:job:default:<key>`` and an entry in
the ``saq:default:incomplete`` sorted set scored with its due time; a job due now is also
pushed to the ``saq:default:queued`` list at once.

The worker is ``saq benchmarks.peers.saq_adapter.settings``: one process, one event loop,
the task a coroutine (:func:`~benchmarks.peers.recorder.arecord`); ``concurrency`` 1, the
same as every other worker in the table, unless ``$BENCH_SAQ_CONCURRENCY`` says otherwise
(saq's default is 10). Its ``schedule`` timer (1 s, the default) moves due jobs from the
sorted set to the list, where the worker waits on a blocking ``BLMOVE``. ``scheduled``
is epoch seconds as a float, as in saq's README (``scheduled=time.time() + 10``): it is
the sorted-set score, compared with the float ``time.time()``, so it is not rounded.
"""

from __future__ import annotations

import asyncio
import os
import time
from importlib.metadata import version
from typing import Any

from saq import Queue

from benchmarks.peers.recorder import URL_ENV, arecord

CONCURRENCY = int(os.environ.get("BENCH_SAQ_CONCURRENCY", "1"))

queue = Queue.from_url(os.environ[URL_ENV])


async def record(ctx: dict[str, Any], *, tag: str) -> None:
    await arecord(tag)


settings = {"queue": queue, "functions": [record], "concurrency": CONCURRENCY}

WORKER = ["saq", "benchmarks.peers.saq_adapter.settings"]
SETUP = (
    f"saq settings (concurrency {CONCURRENCY}; schedule timer 1 s and WARNING logging, no "
    "line per job: the defaults)"
)

_loop: asyncio.AbstractEventLoop | None = None


def _run(coroutine: Any) -> Any:
    """Run one call on the producer's event loop, made (and connected) on first use."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        _loop.run_until_complete(queue.connect())
    return _loop.run_until_complete(coroutine)


def versions() -> dict[str, str]:
    return {"system": version("saq")}


def schedule_in(tag: str, seconds: float) -> None:
    _run(queue.enqueue("record", tag=tag, scheduled=time.time() + seconds))


def schedule_at(tag: str, epoch: float) -> None:
    _run(queue.enqueue("record", tag=tag, scheduled=epoch))


def pending() -> int:
    return _run(queue.count("incomplete"))
