"""Helpers of the edge-case tests (test_edges_*.py, issue 10 items 8-15): what Redis holds
about a job, read through the documented key names only
(``{prefix}:{<queue>}:pending|running|dead|jobs|keys|stats`` and ``{prefix}:queues``)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import redis

from django_delayq.worker.dispatch import Worker
from tests.reliability.harness import wait_until

SETS = ("pending", "running", "dead")


def queue_key(prefix: str, queue: str, kind: str) -> str:
    return f"{prefix}:{{{queue}}}:{kind}"


def queue_keys(client: redis.Redis, prefix: str, queue: str = "default") -> list[bytes]:
    """Every key of one queue (``{prefix}:{<queue>}:*``), whatever its name or type."""
    return sorted(client.scan_iter(match=f"{prefix}:{{{queue}}}:*", count=1000))


def sets_holding(client: redis.Redis, prefix: str, job_id: str, queue: str = "default") -> list:
    """Which of pending/running/dead hold ``job_id`` (a key of another type holds nothing)."""
    holding = []
    for name in SETS:
        key = queue_key(prefix, queue, name)
        if client.type(key) == b"zset" and client.zscore(key, job_id) is not None:
            holding.append(name)
    return holding


def leftovers(client: redis.Redis, prefix: str, job_id: str, queue: str = "default") -> list:
    """Where ``job_id`` still appears among the queue's keys: a member of a sorted set, a
    field or a value of a hash, an item of a list, or a key named after it. The tombstone a
    finished or cancelled job leaves in ``done`` (kept DONE_TTL seconds, so a schedule()
    re-sent after a lost reply does not store it again) is not a leftover, nor is the job
    kept as finished in ``finished`` and ``kept`` (FINISHED_MAX_AGE: tests check it apart)."""
    found = []
    needle = job_id.encode()
    kept = {queue_key(prefix, queue, kind).encode() for kind in ("done", "finished", "kept")}
    for key in queue_keys(client, prefix, queue):
        if key in kept:
            continue
        kind = client.type(key)
        name = key.decode(errors="replace")
        if needle in key:
            found.append(f"key {name}")
        elif kind == b"zset" and client.zscore(key, job_id) is not None:
            found.append(f"member of {name}")
        elif kind == b"hash":
            if client.hexists(key, job_id):
                found.append(f"field of {name}")
            fields = [f for f, v in client.hgetall(key).items() if v == needle]
            found += [f"{name}[{f.decode(errors='replace')}] = the id" for f in fields]
        elif kind == b"list" and needle in client.lrange(key, 0, -1):
            found.append(f"item of {name}")
    return found


def job_hashes(client: redis.Redis, prefix: str, job_id: str, queue: str = "default") -> list:
    """The queue's hash keys that have a field named by ``job_id`` (the job's record, its
    state, whatever else the store keeps per job), found by scanning, not by name."""
    return [
        key
        for key in queue_keys(client, prefix, queue)
        if client.type(key) == b"hash" and client.hexists(key, job_id)
    ]


def redis_usec(client: redis.Redis) -> int:
    """Microseconds Redis spent in commands so far (INFO commandstats, all commands)."""
    stats = client.info("commandstats")
    return sum(int(v["usec"]) for v in stats.values() if isinstance(v, dict) and "usec" in v)


def slowest_command(client: redis.Redis) -> tuple[int, str]:
    """(usec, command) of the slowest command in SLOWLOG since the last reset."""
    entries = client.slowlog_get(128)
    if not entries:
        return 0, ""
    top = max(entries, key=lambda e: e["duration"])
    command = top["command"]
    command = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    return int(top["duration"]), command[:80]


@contextlib.contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    """Raise Python's recursion limit (never lower it) for the block."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def nested(depth: int) -> list:
    """[[[...]]] ``depth`` lists deep."""
    value: list = []
    node = value
    for _ in range(depth - 1):
        node.append([])
        node = node[0]
    return value


class Background:
    """An in-process Worker run in a thread; ``stop()`` asks it to stop and joins it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.worker = Worker(*args, **kwargs)
        self.code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="edges-worker")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.code = self.worker.run()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def wait_failed(self, count: int = 1, timeout: float = 30) -> None:
        """Until ``count`` attempts failed in this worker (the task raised)."""
        wait_until(lambda: self.worker.failed >= count, timeout, f"{count} failed attempts")

    def stop(self, timeout: float = 60) -> int | None:
        self.worker.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the worker did not stop within {timeout} s"
        if self.error is not None:
            raise self.error
        return self.code
