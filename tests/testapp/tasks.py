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
