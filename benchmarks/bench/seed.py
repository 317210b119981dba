"""The bare seed pattern: the least a delayed-job queue on Redis can do, the baseline of
benchmarks/engine_cost.py.

A job is an id in a sorted set scored by its due time (epoch ms); nothing else is stored.

- schedule: one ``ZADD pending <due> <id>`` round trip per job (redis-py's ``zadd``);
- claim: one Lua call takes up to 100 due ids (``ZRANGEBYSCORE``), leases them in a running
  sorted set scored by their lease deadline (``ZADD``) and removes them from pending
  (``ZREM``);
- the task: one ``RPUSH`` on a client of its own (the same body as ``redis_push``, so the
  drain's rate comes from the start times it pushes);
- ack: one ``ZREM running <id>`` round trip per job.

The worker is a process of its own (``python -m benchmarks.bench.seed URL N``), like
``delayq_worker``: it connects, loads its script, prints ``ready``, drains until a claim
comes back empty, and prints its own CPU seconds (user + system, every thread) from its
first claim to its last ack as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

PENDING = "seed:{q}:pending"
RUNNING = "seed:{q}:running"
LEASE_MS = 30_000
CLAIM = """
local now = tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return ids end
local scores = {}
for _, id in ipairs(ids) do
  scores[#scores + 1] = now + tonumber(ARGV[3])
  scores[#scores + 1] = id
end
redis.call('ZADD', KEYS[2], unpack(scores))
redis.call('ZREM', KEYS[1], unpack(ids))
return ids
"""


def job_id(n: int) -> str:
    """A job's id: 26 characters like a ULID, the argument of its task in the last digits."""
    return f"{n:026d}"


def schedule(client: Any, n: int, due_ms: int | None = None) -> None:
    """``n`` jobs, one ZADD round trip each, due at ``due_ms`` (default now)."""
    due = int(time.time() * 1000) if due_ms is None else due_ms
    zadd = client.zadd
    for i in range(n):
        zadd(PENDING, {job_id(i): due})


def pipelined(client: Any, key: str, n: int, chunk: int, due_ms: int) -> None:
    """``n`` ZADDs of one member each, pipelined ``chunk`` at a time: the baseline of
    schedule_many()."""
    for start in range(0, n, chunk):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + chunk)):
            pipe.zadd(key, {job_id(i): due_ms})
        pipe.execute()


def drain(url: str, parser: str | None = None) -> dict[str, float]:
    """Claim, run and acknowledge until a claim finds nothing due."""
    import redis

    kwargs: dict[str, Any] = {}
    if parser:
        from django.utils.module_loading import import_string

        kwargs["parser_class"] = import_string(parser)
    client = redis.Redis.from_url(url, **kwargs)
    task_client = redis.Redis.from_url(url, client_name="delayq-bench-task", **kwargs)
    pushed = os.environ.get("DELAYQ_BENCH_PREFIX", "delayq-bench") + ":pushed"
    claim = client.register_script(CLAIM)
    client.script_load(CLAIM)
    task_client.ping()
    print("ready", flush=True)
    done = 0
    cpu = time.process_time()
    while True:
        ids = claim(keys=[PENDING, RUNNING], args=[int(time.time() * 1000), 100, LEASE_MS])
        if not ids:
            break
        for raw in ids:
            started = time.time()
            task_client.rpush(pushed, f"{int(raw)} {started:.6f}")  # the task
            client.zrem(RUNNING, raw)  # the ack
            done += 1
    return {"done": done, "cpu_s": time.process_time() - cpu}


if __name__ == "__main__":
    result = drain(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(result), flush=True)
