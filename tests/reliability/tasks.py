"""Tasks of the reliability suite. Each records its runs in the "runs" Redis (a separate
server that no scenario restarts), never in worker memory.

Worker processes import this module because ``tests.reliability.settings`` installs
``tests.reliability`` as an app; the test process imports it directly.
"""

from __future__ import annotations

import time

from django_delayq import task
from tests.testapp.tasks import runs_client


@task(retry_backoff=0, max_retries=20)
def mark(tag: str, value: str) -> None:
    """Record one run under runs:<tag>."""
    runs_client().rpush(f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=20)
def stamp(tag: str, value: str) -> None:
    """Record one run with the runs server's clock: "<value> <epoch seconds>"."""
    client = runs_client()
    seconds, micros = client.time()
    client.rpush(f"runs:{tag}", f"{value} {seconds + micros / 1e6:.6f}")


@task(retry_backoff=0, max_retries=3)
def stall(tag: str, value: str, seconds: float) -> None:
    """Record the start, sleep ``seconds`` on the first start only, record the finish."""
    client = runs_client()
    starts = client.rpush(f"runs:{tag}:started", value)
    if starts == 1:
        time.sleep(seconds)
    client.rpush(f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=3)
def slow(tag: str, value: str, seconds: float) -> None:
    """Record the start, sleep ``seconds``, record the finish."""
    client = runs_client()
    client.rpush(f"runs:{tag}:started", value)
    time.sleep(seconds)
    client.rpush(f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=1)
def explode(tag: str, value: str) -> None:
    """Fail on purpose (every attempt), after recording the attempt."""
    runs_client().rpush(f"runs:{tag}:failed", value)
    raise RuntimeError(f"{value} fails on purpose")
