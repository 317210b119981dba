"""The task body every system runs ("task 1"): one Redis round trip on its own client.

``record(tag)`` takes the wall clock the moment it starts, then RPUSHes ``"<tag>
<started>"`` to :data:`DONE_KEY` on a redis-py client created once per process (per job
under RQ's fork-per-job worker, since each job runs in a fresh work horse). The
benchmark reads the list to get start times (lateness) and counts (drain).

``arecord(tag)`` is the same task for the asyncio systems (arq, saq), whose tasks are
coroutines: the same RPUSH, awaited on a ``redis.asyncio`` client created once per
process, as an async task does its I/O without blocking the worker's event loop.
"""

from __future__ import annotations

import os
import time
from typing import Any

DONE_KEY = "bench:done"
URL_ENV = "BENCH_REDIS_URL"

_client: Any = None
_async_client: Any = None


def client() -> Any:
    """The process's own redis-py client for ``$BENCH_REDIS_URL``."""
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(os.environ[URL_ENV])
    return _client


def record(tag: str) -> None:
    started = time.time()
    client().rpush(DONE_KEY, f"{tag} {started:.6f}")


async def arecord(tag: str) -> None:
    global _async_client
    started = time.time()
    if _async_client is None:
        import redis.asyncio

        _async_client = redis.asyncio.Redis.from_url(os.environ[URL_ENV])
    await _async_client.rpush(DONE_KEY, f"{tag} {started:.6f}")
