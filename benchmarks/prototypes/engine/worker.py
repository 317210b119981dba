"""A lean worker loop (prototype): what one worker at concurrency 1 must do per plain job on
the lean scripts, and nothing else: one claim_plain.lua round trip per 100 jobs carrying the
previous claim's acks, the start mark of each job as today's (a ``ZADD XX GT`` on a
connection of its own with ``CLIENT REPLY OFF``, Nagle on), the record's arguments decoded,
the task run (one RPUSH on a client of its own, as ``redis_push``).

    python -m benchmarks.prototypes.engine.worker URL PREFIX PARSER KEEP_AGE_MS KEEP_COUNT

Prints ``ready`` once connected and loaded, then, when a claim finds nothing due and no ack
is left, its CPU seconds from its first claim to its last ack as JSON.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

from benchmarks.prototypes.engine import claim_keys, text

QUEUE = "default"


class Names:
    """The keys of the benchmark's queue under ``prefix`` (keys.py's layout)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def key(self, queue: str, kind: str) -> str:
        return f"{self.prefix}:{{{queue}}}:{kind}"


def main(url: str, prefix: str, parser: str, age: int, count: int) -> dict[str, Any]:
    import redis
    from django.utils.module_loading import import_string

    kwargs = {"parser_class": import_string(parser)}
    client = redis.Redis.from_url(url, **kwargs)
    task_client = redis.Redis.from_url(url, client_name="delayq-bench-task", **kwargs)
    names = Names(prefix)
    running = names.key(QUEUE, "running").encode()
    mark = client.connection_pool.make_connection()
    mark.connect()
    mark.send_command("CLIENT", "REPLY", "OFF")
    mark._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    head = b"*6\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n$2\r\nXX\r\n$2\r\nGT\r\n" % (len(running), running)
    sha = client.script_load(text("claim_plain"))
    keys = claim_keys(names, QUEUE)
    pushed = f"{prefix}:pushed"
    task_client.ping()
    print("ready", flush=True)
    cpu = time.process_time()
    acks: list[str] = []
    done, rounds = 0, 0
    while True:
        rounds += 1
        token = f"w#{rounds}"
        _, _, _, jobs = client.evalsha(
            sha, len(keys), *keys, "", 100, 30000, token, "w", age, count, *acks
        )
        acks = []
        if not jobs:
            break
        for i in range(0, len(jobs), 4):
            job_id = jobs[i]
            until = b"%d" % (int(time.time() * 1000) + 30000)
            mark.send_packed_command(
                [b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n" % (head, len(until), until, len(job_id), job_id)],
                check_health=False,
            )
            arguments = json.loads(b"[" + jobs[i + 1].split(b"\n", 2)[-1] + b"]")
            started = time.time()
            task_client.rpush(pushed, f"{arguments[0]} {started:.6f}")  # the task
            ended = time.time()
            summary = f"{jobs[i + 2]} {round(started * 1000)} {(ended - started) * 1000:.3f} - w"
            acks += (job_id, token, "", summary if age else "")
            done += 1
    return {"done": done, "cpu_s": time.process_time() - cpu}


if __name__ == "__main__":
    url, prefix, parser, age, count = sys.argv[1:6]
    print(json.dumps(main(url, prefix, parser, int(age), int(count))), flush=True)
