"""The benchmark tasks, registered with ``@task`` like any user's (workers import them
through ``autodiscover_modules("tasks")``)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from benchmarks.peers.recorder import record as push_record
from django_delayq import task
from django_delayq.recurring.ids import parse_occurrence_id
from django_delayq.worker.execution import current_job  # the public name may not exist yet

_stamps: Any = None
_stamps_lock = threading.Lock()


@task
def noop(*args: Any) -> None:
    """Does nothing: what is measured is the engine around it."""


@task(rate=os.environ.get("DELAYQ_BENCH_RATE") or None)
def noop_rated(*args: Any) -> None:
    """noop with ``@task(rate=$DELAYQ_BENCH_RATE)`` in the worker processes of the
    rate-limited drain (issue 20), and no rate anywhere else: a task with a limit puts its
    queue on the claim's general path, which the other drains must not measure."""


def _stamp_line(line: str) -> None:
    """Append ``line`` to ``$DELAYQ_BENCH_STAMPS/<pid>.txt`` (opened once per process,
    line-buffered: a line is in the file as soon as the task has written it)."""
    global _stamps
    with _stamps_lock:
        if _stamps is None:
            path = os.path.join(os.environ["DELAYQ_BENCH_STAMPS"], f"{os.getpid()}.txt")
            _stamps = open(path, "a", buffering=1)  # noqa: SIM115 (kept open for the process)
        _stamps.write(line)


@task
def stamp(n: int) -> None:
    """Append ``"<n> <time.time()>"`` to ``$DELAYQ_BENCH_STAMPS/<pid>.txt`` the moment it
    starts, so run.py can compare start times with the due times schedule() returned."""
    _stamp_line(f"{n} {time.time():.6f}\n")


@task
def hand_chain(n: int, last: int) -> None:
    """``stamp(n)``, then schedule ``hand_chain(n + 1, last)`` unless n is ``last``: a chain
    made by hand, one plain schedule() per step, as the baseline of Call.then() chains
    (bench/batches.py)."""
    _stamp_line(f"{n} {time.time():.6f}\n")
    if n < last:
        hand_chain.schedule(n + 1, last)


@task
def occurrence_probe(*args: Any) -> None:
    """Append ``"<fire_ms> <start_ms> <job id>"`` to ``$DELAYQ_BENCH_STAMPS/<pid>.txt`` the
    moment it starts (bench/recurring_scale.py): the fire time is the one in an
    occurrence's id, 0 for any other job. A run's start before its fire time is early;
    the same fire time of the same schedule twice is a duplicate."""
    started = time.time()
    job = current_job()
    job_id = job.id if job is not None else "-"
    parsed = parse_occurrence_id(job_id) if job is not None else None
    _stamp_line(f"{parsed[0] if parsed else 0} {started * 1000:.3f} {job_id}\n")


# -- real tasks (issue 11): one Redis round trip, one ORM query, 10 ms of I/O ---------------

_push_client: Any = None


def pushed_key() -> str:
    """The list ``redis_push`` appends to (under the benchmark's key prefix)."""
    return f"{os.environ.get('DELAYQ_BENCH_PREFIX', 'delayq-bench')}:pushed"


@task
def redis_push(n: int) -> None:
    """One RPUSH on a client of its own (created once per process, like a task module's
    client), to the Redis at ``$REDIS_URL``. The value ``"<n> <time.time()>"`` is taken
    when the task starts, so run.py gets throughput and lateness from the list alone."""
    started = time.time()
    global _push_client
    if _push_client is None:
        import redis
        from django.conf import settings
        from django.utils.module_loading import import_string

        parser = getattr(settings, "BENCH_PARSER_CLASS", None)  # DELAYQ_BENCH_PARSER
        _push_client = redis.Redis.from_url(
            os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
            client_name="delayq-bench-task",
            **({"parser_class": import_string(parser)} if parser else {}),
        )
    _push_client.rpush(pushed_key(), f"{n} {started:.6f}")


ROWS = 100  # rows of BenchItem, seeded by benchmarks/migrations/0001_initial.py


@task
def orm_query(n: int) -> None:
    """One simple ORM query: a row of the benchmark app's table by primary key."""
    from benchmarks.models import BenchItem

    BenchItem.objects.filter(pk=n % ROWS + 1).first()


@task
def sleep_io(n: int) -> None:
    """Waits 10 ms as a task blocked on I/O would (the GIL is released)."""
    time.sleep(0.01)


@task
def record(tag: str) -> None:
    """``benchmarks/compare.py``'s task, the same body as the peers' (one RPUSH on the
    process's own client): see ``benchmarks/peers/recorder.py``."""
    push_record(tag)


@task
async def async_sleep_io(n: int) -> None:
    """Awaits 100 ms, as an async task waiting on I/O would (issue 21: run on the
    worker's event loop with --async-concurrency)."""
    import asyncio

    await asyncio.sleep(0.1)


def _span(n: int, seconds: float) -> None:
    started = time.time()
    time.sleep(seconds)
    _stamp_line(f"{n} {started:.6f} {time.time():.6f}\n")


@task(group_concurrency=1)
def grouped_io(n: int, seconds: float) -> None:
    """Sleeps ``seconds`` with ``@task(group_concurrency=1)`` (bench/groups.py: one running
    job per group= key at a time), then appends ``"<n> <start> <end>"`` to
    ``$DELAYQ_BENCH_STAMPS/<pid>.txt``."""
    _span(n, seconds)


@task
def plain_io(n: int, seconds: float) -> None:
    """grouped_io without any limit: the baseline drain of bench/groups.py."""
    _span(n, seconds)
