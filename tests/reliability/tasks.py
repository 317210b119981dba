"""Tasks of the reliability suite. Each records its runs in the "runs" Redis (a separate
server that no scenario restarts), never in worker memory.

Worker processes import this module because ``tests.reliability.settings`` installs
``tests.reliability`` as an app; the test process imports it directly.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import redis

from django_delayq import task
from django_delayq.worker.execution import current_job
from tests.testapp.tasks import runs_client

DIED = 3  # exit code of a worker process ended by the die task


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


@task(retry_backoff=0, max_retries=20)
def whoami(tag: str, value: str) -> None:
    """Record one run with the id the job runs under and the runs server's clock:
    "<value> <job id> <epoch seconds>"."""
    client = runs_client()
    job = current_job()
    seconds, micros = client.time()
    client.rpush(f"runs:{tag}", f"{value} {job.id if job else '-'} {seconds + micros / 1e6:.6f}")


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


@task(retry_backoff=0, max_retries=1)
def die(tag: str, value: str) -> None:
    """Record the run, then end the worker process at once (os._exit: no cleanup, no ack),
    as a segfault or the OOM killer would."""
    runs_client().rpush(f"runs:{tag}", value)
    os._exit(DIED)


# A read-only script that loops for ARGV[1] seconds: Redis answers BUSY to everyone else
# once it has run longer than busy-reply-threshold (lua-time-limit); SCRIPT KILL ends it.
BUSY_LOOP = """
local t = redis.call('TIME')
local stop = tonumber(t[1]) + tonumber(ARGV[1])
while tonumber(redis.call('TIME')[1]) < stop do end
return 1
"""


@task(retry_backoff=0, max_retries=0)
def make_redis_busy(tag: str, value: str, url: str, seconds: float) -> None:
    """Record the run, start BUSY_LOOP on the Redis at ``url`` (from another connection)
    and return once that Redis answers BUSY: the worker's next round trip meets it."""
    runs_client().rpush(f"runs:{tag}", value)

    def spin() -> None:
        client = redis.Redis.from_url(url, socket_timeout=seconds + 30)
        with contextlib.closing(client), contextlib.suppress(redis.exceptions.RedisError):
            client.eval(BUSY_LOOP, 0, seconds)

    threading.Thread(target=spin, daemon=True).start()
    with contextlib.closing(redis.Redis.from_url(url, socket_timeout=5)) as probe:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                probe.ping()
            except redis.exceptions.ResponseError as exc:
                if str(exc).startswith("BUSY"):
                    return
                raise
            time.sleep(0.01)
    raise RuntimeError(f"Redis at {url} never answered BUSY")


@task(retry_backoff=0, max_retries=3)
def held(tag: str, value: str, limit: float) -> None:
    """Record the start, wait until the test sets runs:<tag>:release (at most ``limit``
    seconds), record the finish: a long job that ends when the test says so."""
    client = runs_client()
    client.rpush(f"runs:{tag}:started", value)
    deadline = time.monotonic() + limit
    while not client.exists(f"runs:{tag}:release") and time.monotonic() < deadline:
        time.sleep(0.05)
    client.rpush(f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=20, concurrency=1)
def exclusive(tag: str, value: str, seconds: float) -> None:
    """Issue 20: at most one attempt at a time across workers. Records "start <value> <t>"
    and "end <value> <t>" (runs server clock); sleeps ``seconds`` on its first attempt only."""
    client = runs_client()
    first = client.incr(f"runs:{tag}:attempts:{value}") == 1
    seconds_now, micros = client.time()
    client.rpush(f"runs:{tag}", f"start {value} {seconds_now + micros / 1e6:.6f}")
    if first:
        time.sleep(seconds)
    seconds_now, micros = client.time()
    client.rpush(f"runs:{tag}", f"end {value} {seconds_now + micros / 1e6:.6f}")


@task(retry_backoff=0, max_retries=20)
def overlapping(tag: str, value: str, seconds: float) -> None:
    """Scheduled to the queue "limited" (issue 20: a queue concurrency limit; not the task's
    own queue, which every test importing this module would see listed). Counts the
    attempts of ``tag`` running at once in the runs Redis: pushes the count as it starts to
    runs:<tag>:peak, sleeps ``seconds``, then records the run: runs:<tag> gets ``value``."""
    client = runs_client()
    client.rpush(f"runs:{tag}:peak", client.incr(f"runs:{tag}:now"))
    time.sleep(seconds)
    client.decr(f"runs:{tag}:now")
    client.rpush(f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=3)
def mark_pid(tag: str, value: str) -> None:
    """Record one run with the pid of the process that ran it: "<value> <pid>"."""
    runs_client().rpush(f"runs:{tag}", f"{value} {os.getpid()}")


_leaked: list[bytes] = []  # what leak() keeps, for the life of the worker process


@task(retry_backoff=0, max_retries=3)
def leak(tag: str, value: str, megabytes: int) -> None:
    """Keep ``megabytes`` MB of touched memory for good (a task that leaks), then record
    the run with the pid: "<value> <pid>"."""
    _leaked.append(b"x" * (megabytes * 2**20))
    runs_client().rpush(f"runs:{tag}", f"{value} {os.getpid()}")


@task(retry_backoff=0, max_retries=2, timeout=1.0)
def hangs(tag: str, value: str) -> None:
    """Record the start ("<value> <pid> <attempt>"), then hang past the 1 s timeout until the
    test sets runs:<tag>:release (or the process ends); record the finish if ever released."""
    client = runs_client()
    job = current_job()
    client.rpush(f"runs:{tag}:started", f"{value} {os.getpid()} {job.attempts if job else 0}")
    while not client.exists(f"runs:{tag}:release"):
        time.sleep(0.05)
    client.rpush(f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=20)
def occurrence(tag: str) -> None:
    """An occurrence of a recurring schedule: records "<fire ms> <job id> <attempt> <ran ms>"
    under runs:<tag>: the fire time is in the occurrence's id (django_delayq.recurring.ids),
    the run's time is the runs Redis's clock (this process's may be skewed)."""
    from django_delayq.recurring.ids import parse_occurrence_id

    client = runs_client()
    job = current_job()
    parsed = parse_occurrence_id(job.id) if job is not None else None
    fire = parsed[0] if parsed else 0
    seconds, micros = client.time()
    ran = seconds * 1000 + micros // 1000
    attempt = job.attempts if job is not None else 0
    client.rpush(f"runs:{tag}", f"{fire} {job.id if job else '-'} {attempt} {ran}")


@task(retry_backoff=0, max_retries=20)
async def amark(tag: str, value: str, seconds: float = 0.2) -> None:
    """async def: await ``seconds`` (on the worker's event loop with --async-concurrency),
    then record one run under runs:<tag> (the write in a thread, off the loop)."""
    import asyncio

    await asyncio.sleep(seconds)
    await asyncio.to_thread(runs_client().rpush, f"runs:{tag}", value)


@task(retry_backoff=0, max_retries=20, group_concurrency=2)
def grouped_span(tag: str, group_id: str, value: str, seconds: float, gated: bool = False) -> None:
    """One job of group ``group_id`` (scheduled with group=group_id; a parameter named
    ``group`` would shadow the option, check W006): how many of its group run at once
    as it starts (runs:<tag>:peak, "<group> <count>"), then its end (runs:<tag>, "<value>
    <group>"), counted in the runs Redis across worker processes. ``seconds`` < 0: an hour
    on the first attempt (its worker is to be SIGKILLed), 50 ms on a retry. ``gated``: it
    waits, running, until the test opens runs:<tag>:gate (at most 90 s), then ``seconds``."""
    client = runs_client()
    job = current_job()
    if seconds < 0:  # a worker to SIGKILL: its first attempt stays until then
        seconds = 3600.0 if job is not None and job.attempts == 1 else 0.05
    running = client.incr(f"runs:{tag}:now:{group_id}")
    client.rpush(f"runs:{tag}:peak", f"{group_id} {running}")
    if gated:
        client.blpop([f"runs:{tag}:gate"], timeout=90)
        client.rpush(f"runs:{tag}:gate", "open")  # for the next gated job
    time.sleep(seconds)
    client.decr(f"runs:{tag}:now:{group_id}")
    client.rpush(f"runs:{tag}", f"{value} {group_id}")


@task(retry_backoff=0, max_retries=20)
def timed(tag: str, value: str, seconds: float = 0.0) -> None:
    """Sleep ``seconds``, then record one run with its job id, its batch and the runs
    server's clock at its start and end: "<value> <job id> <batch id or -> <start> <end>"."""
    client = runs_client()
    job = current_job()
    seconds_now, micros = client.time()
    started = seconds_now + micros / 1e6
    if seconds:
        time.sleep(seconds)
    seconds_now, micros = client.time()
    batch_id = (job.batch_id if job else None) or "-"
    ended = seconds_now + micros / 1e6
    line = f"{value} {job.id if job else '-'} {batch_id} {started:.6f} {ended:.6f}"
    client.rpush(f"runs:{tag}", line)


@task(retry_backoff=0, max_retries=0)
def timed_unless_armed(tag: str, value: str) -> None:
    """Dies (no retries) while runs:<tag>:armed holds a value (one taken per attempt), else
    records a run as ``timed`` does."""
    if runs_client().lpop(f"runs:{tag}:armed") is not None:
        raise RuntimeError(f"{value} is armed: it fails")
    timed(tag, value)


@task(retry_backoff=0, max_retries=20)  # on the queue "fair": given at schedule time
def fair_turn(tag: str, group_id: str, value: str, seconds: float = 0.0) -> None:
    """One job of group ``group_id`` on the queue "fair" (DELAYQ_QUEUES makes it fair or not):
    its start (runs:<tag>:start, "<value> <group>", in the order the jobs started across
    threads and processes), then ``seconds`` (< 0: an hour on the first attempt, its worker
    is to be SIGKILLed; 10 ms on a retry), then its end (runs:<tag>, "<value> <group>")."""
    client = runs_client()
    job = current_job()
    if seconds < 0:
        seconds = 3600.0 if job is not None and job.attempts == 1 else 0.01
    client.rpush(f"runs:{tag}:start", f"{value} {group_id}")
    if seconds:
        time.sleep(seconds)
    client.rpush(f"runs:{tag}", f"{value} {group_id}")


@task(retry_backoff=0, max_retries=20, unique_until="end")
def follows(tag: str, value: str, seconds: float) -> None:
    """unique_until="end" (issue 36): its keyed jobs never run beside each other. Records
    "start <value> <job id> <t>" and "end <value> <job id> <t>" (runs server clock); sleeps
    ``seconds`` on the first attempt of each value only (a retry runs at once)."""
    client = runs_client()
    job = current_job()
    first = client.incr(f"runs:{tag}:attempts:{value}") == 1
    seconds_now, micros = client.time()
    client.rpush(f"runs:{tag}", f"start {value} {job.id} {seconds_now + micros / 1e6:.6f}")
    if first:
        time.sleep(seconds)
    seconds_now, micros = client.time()
    client.rpush(f"runs:{tag}", f"end {value} {job.id} {seconds_now + micros / 1e6:.6f}")
