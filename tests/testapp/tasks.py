"""Tasks used by the tests. Each records its runs in Redis (not in worker memory), so
tests that run workers in subprocesses can count executions."""

from __future__ import annotations

import os
import threading
import time

import redis
from django.conf import settings

from django_delayq import task

_client: redis.Redis | None = None


def runs_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ.get("DELAYQ_RUNS_URL", settings.REDIS_URL))
    return _client


def record_run(tag: str, value: str) -> None:
    runs_client().rpush(f"runs:{tag}", value)


@task
def add(a, b):
    return a + b


@task(max_retries=2, retry_backoff=0)
def always_fails(message="boom"):
    raise ValueError(message)


CALLS: list = []


@task(retry_backoff=0)
def remember(*args, **kwargs):
    CALLS.append((args, kwargs))


@task(retry_backoff=0)
def record(tag, value):
    """Record one execution in Redis under runs:<tag>."""
    record_run(tag, value)


@task(retry_backoff=0, max_retries=3)
def sleepy(tag, value, seconds):
    record_run(f"{tag}:started", value)
    time.sleep(seconds)
    record_run(tag, value)


@task(queue="emails")
def send_mail(to):
    CALLS.append(("send_mail", to))


async def _coro(x):
    return x * 2


@task
async def async_double(x):
    CALLS.append(("async_double", x))
    return await _coro(x)


GATES: dict[str, threading.Event] = {}


def gate(name: str) -> threading.Event:
    return GATES.setdefault(name, threading.Event())


@task(retry_backoff=0)
def wait_for_gate(name, seconds=30):
    """Run until the test opens gate(name) (in-process workers only), at most ``seconds``."""
    gate(name).wait(seconds)


@task(timeout=0.2, max_retries=1, retry_backoff=0)
def hangs_first(name):
    """Its first attempt waits for gate(name), past its timeout; the next returns at once."""
    from django_delayq.worker.execution import current_job

    attempt = current_job().attempts
    CALLS.append(("hangs_first", attempt))
    if attempt == 1:
        gate(name).wait(30)
    return attempt


@task(timeout=0.2, max_retries=1, retry_backoff=0)
def always_hangs(name):
    """Every attempt waits for gate(name), past its timeout."""
    CALLS.append(("always_hangs", name))
    gate(name).wait(30)


@task(timeout=30, retry_backoff=0)
def within_timeout(x):
    CALLS.append(("within_timeout", x))
    return x


@task(timeout=0.2, max_retries=1, retry_backoff=0)
async def async_hangs(name):
    """Awaits far past its timeout: cancelled at it."""
    import asyncio

    CALLS.append(("async_hangs", name))
    await asyncio.sleep(30)


@task(timeout=0.2, max_retries=0, retry_backoff=0)
async def async_blocks(name):
    """Blocks its event loop (a sync wait inside async def): cancellation cannot reach it."""
    CALLS.append(("async_blocks", name))
    gate(name).wait(30)


# -- the worker's event loop (worker/aio.py) ----------------------------------------------

IN_FLIGHT: dict[str, list[int]] = {}  # name -> [in flight now, most at once]
EVENTS: dict[tuple, object] = {}  # (name, loop) -> an asyncio.Event of that loop


@task(retry_backoff=0)
async def async_together(name, expected, seconds=20):
    """Counts the attempts in flight at once; all wait until ``expected`` of them are (or
    ``seconds`` passed): the most at once is what the loop could hold."""
    import asyncio

    counts = IN_FLIGHT.setdefault(name, [0, 0])
    counts[0] += 1
    counts[1] = max(counts[1], counts[0])
    event = EVENTS.setdefault((name, asyncio.get_running_loop()), asyncio.Event())
    if counts[0] >= expected:
        event.set()
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        pass
    finally:
        counts[0] -= 1
    CALLS.append(("async_together", name))
    return counts[1]


@task(max_retries=2, retry_backoff=0)
async def async_always_fails(x):
    import asyncio

    from django_delayq.worker.execution import current_job

    await asyncio.sleep(0)
    CALLS.append(("async_always_fails", current_job().attempts))
    raise ValueError(f"async nope {x}")


@task(retry_backoff=0)
async def async_waits_for_gate(name, seconds=30):
    """Awaits (polling, without blocking the loop) until gate(name) opens."""
    import asyncio

    CALLS.append(("async_waits_for_gate", name))
    for _ in range(int(seconds * 100)):
        if gate(name).is_set():
            return name
        await asyncio.sleep(0.01)
    return None


@task(retry_backoff=0)
async def async_sleeps(seconds):
    import asyncio

    await asyncio.sleep(seconds)
    CALLS.append(("async_sleeps", seconds))
    return seconds


def _thread_name():
    return threading.current_thread().name


@task(retry_backoff=0)
async def async_sync_call(x):
    """Makes a thread-sensitive sync_to_async call, as the async ORM does."""
    from asgiref.sync import sync_to_async

    CALLS.append(("async_sync_call", x, await sync_to_async(_thread_name)()))


@task(retry_backoff=0)
def record_batch(tag):
    """Record one execution under runs:<tag>: the batch id its job reads from current_job()."""
    from django_delayq import current_job

    job = current_job()
    record_run(tag, (job.batch_id if job is not None else None) or "-")


@task(max_retries=0, retry_backoff=0)
def fails_once_then_records(tag, value):
    """Fails (no retries: dead) while runs:<tag>:armed holds a value, then records."""
    if runs_client().lpop(f"runs:{tag}:armed") is not None:
        raise ValueError(f"armed: {tag}")
    record_run(tag, value)


@task(max_retries=2, retry_backoff=0)
def fails_first_attempt(tag):
    """Raises on its first attempt, succeeds on the next (retried at once)."""
    from django_delayq import current_job

    if current_job().attempts == 1:
        raise ValueError(f"first attempt of {tag}")
    CALLS.append(((tag,), {}))
