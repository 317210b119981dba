"""arq: ``ArqRedis.enqueue_job("record", tag, _defer_by=/_defer_until=)``, one call per
job, each awaited through ``loop.run_until_complete`` on one event loop (the producer is
synchronous code, as a Django view is; about 10 us a call here). A job is a pickled
``arq:job:<id>`` string and an entry in the ``arq:queue`` sorted set scored with its due
time in milliseconds; delayed and due jobs share that one set. A call is three round
trips: ``WATCH``, ``EXISTS`` (the job id must be new), then ``MULTI`` ``PSETEX`` ``ZADD``
``EXEC``.

The worker is ``arq benchmarks.peers.arq_adapter.WorkerSettings``: one process, one
event loop, the task a coroutine (:func:`~benchmarks.peers.recorder.arecord`). Every
``poll_delay`` (0.5 s, the default) it reads the due ids and starts jobs while fewer than
``max_jobs`` run; at ``max_jobs`` 1 that is one job per poll, as the job it started has
not run yet when it checks for the next. ``max_jobs`` is 1 here, the concurrency of every
other worker in the table, unless ``$BENCH_ARQ_MAX_JOBS`` says otherwise (arq's default is
10: the ``arq-10`` system).
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from benchmarks.peers.recorder import URL_ENV, arecord

QUEUE = "arq:queue"  # arq's default queue name
MAX_JOBS = int(os.environ.get("BENCH_ARQ_MAX_JOBS", "1"))


async def record(ctx: dict[str, Any], tag: str) -> None:
    await arecord(tag)


class WorkerSettings:
    functions = [record]
    redis_settings = RedisSettings.from_dsn(os.environ[URL_ENV])
    max_jobs = MAX_JOBS


WORKER = ["arq", "benchmarks.peers.arq_adapter.WorkerSettings"]
SETUP = (
    f"arq WorkerSettings (max_jobs {MAX_JOBS}; poll_delay 0.5 s and INFO logging, two lines "
    "per job: the defaults)"
)

_loop: asyncio.AbstractEventLoop | None = None
_pool: Any = None


def _run(coroutine: Any) -> Any:
    """Run one call on the producer's event loop, made (with the pool) on first use."""
    global _loop, _pool
    if _loop is None:
        _loop = asyncio.new_event_loop()
        _pool = _loop.run_until_complete(create_pool(WorkerSettings.redis_settings))
    return _loop.run_until_complete(coroutine(_pool))


def versions() -> dict[str, str]:
    return {"system": version("arq"), "hiredis": version("hiredis")}


def schedule_in(tag: str, seconds: float) -> None:
    _run(lambda pool: pool.enqueue_job("record", tag, _defer_by=timedelta(seconds=seconds)))


def schedule_at(tag: str, epoch: float) -> None:
    when = datetime.fromtimestamp(epoch, UTC)
    _run(lambda pool: pool.enqueue_job("record", tag, _defer_until=when))


def pending() -> int:
    return _run(lambda pool: pool.zcard(QUEUE))
