"""A plain job's life on the lean scripts (prototype), measured as benchmarks/bench/life.py
measures the seed pattern's and django-delayq's: n jobs scheduled one call each with
schedule_plain.lua (a command packed once per queue, its arguments appended per call),
then the lean worker (worker.py) drains them; and what a producer's Python costs per call
on each way of sending.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from benchmarks.bench.common import QUEUE, Timer
from benchmarks.bench.life import PARSERS, Phase, own_worker_life, url_of
from benchmarks.prototypes.engine import schedule_keys, text


class PackedSchedule:
    """schedule_plain.lua on one queue through one connection: EVALSHA, its SHA and keys
    packed once; per call the five arguments are appended, sent, and the reply read."""

    def __init__(self, client: Any, store: Any, queue: str) -> None:
        keys = schedule_keys(store, queue=queue)
        sha = client.script_load(text("schedule_plain")).encode()
        parts = [b"EVALSHA", sha, b"%d" % len(keys), *(k.encode() for k in keys)]
        self.head = b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        self.count = len(parts) + 5
        self.queue = b"$%d\r\n%s\r\n" % (len(queue), queue.encode())
        self.conn = client.connection_pool.get_connection()
        self.pool = client.connection_pool

    def __call__(self, job_id: bytes, record: bytes) -> Any:
        self.conn.send_packed_command(
            [
                b"*%d\r\n%s$%d\r\n%s\r\n$%d\r\n%s\r\n$1\r\n0\r\n$0\r\n\r\n%s"
                % (self.count, self.head, len(job_id), job_id, len(record), record, self.queue)
            ]
        )
        return self.conn.read_response()

    def close(self) -> None:
        self.pool.release(self.conn)


def proto_life(
    own: Any, pid: int, prefix: str, n: int, parser: str, keep: tuple[int, int]
) -> dict[str, Any]:
    from benchmarks.bench.life import api_on
    from benchmarks.tasks import redis_push
    from django_delayq.jobs.record import encode_record

    own.flushdb()
    url = url_of(own, own.connection_pool.connection_kwargs.get("db", 0))
    with api_on(url, prefix, parser) as store:
        send = PackedSchedule(store.client, store, QUEUE)
        records = [encode_record(redis_push.name, [i], {}) for i in range(n)]
        ids = [b"%026d" % i for i in range(n)]
        phase = Phase(own, pid)
        with Timer() as timer:
            for job_id, record in zip(ids, records, strict=True):
                send(job_id, record)
        scheduled = phase.read()
        send.close()
    argv = [sys.executable, "-m", "benchmarks.prototypes.engine.worker", url, prefix]
    argv += [PARSERS[parser], str(keep[0]), str(keep[1])]
    return own_worker_life(own, pid, prefix, n, argv, timer.seconds, scheduled)


def producer_costs(own: Any, prefix: str, parser: str, n: int) -> list[dict[str, Any]]:
    """A producer's own CPU (process_time) and wall time per call, each way of sending one
    job: redis-py's zadd, redis-py's evalsha of schedule_plain.lua, the packed command,
    today's Store.schedule (an Op through the transport) and today's schedule()."""
    from benchmarks.bench.life import api_on
    from benchmarks.tasks import noop
    from django_delayq.jobs.record import encode_record

    url = url_of(own, own.connection_pool.connection_kwargs.get("db", 0))
    rows = []
    with api_on(url, prefix, parser) as store:
        client = store.client
        record = encode_record(noop.name, [0], {})
        sha = client.script_load(text("schedule_plain"))
        keys = schedule_keys(store, queue="pc")
        packed = PackedSchedule(client, store, "pc")
        ways = {
            "redis-py zadd (a plain ZADD)": lambda i: client.zadd(keys[0], {f"{i:026d}": 1}),
            "redis-py evalsha, schedule_plain.lua": lambda i: client.evalsha(
                sha, 4, *keys, f"{i:026d}", record, 0, "", "pc"
            ),
            "packed once per queue, schedule_plain.lua": lambda i: packed(b"%026d" % i, record),
            "a lean schedule(): id, record, packed call, Job, signal": lambda i: lean_schedule(
                packed, noop, i
            ),
            "Store.schedule (today's op and transport)": lambda i: store.schedule(
                "pc", f"{i:026d}", record, delay=0
            ),
            "schedule() (today's API)": lambda i: noop.schedule(i, queue="pc"),
        }
        for name, call in ways.items():
            own.flushdb()
            call(-1)
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(n):
                call(i)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            rows.append({"way": name, "cpu_us": cpu / n * 1e6, "wall_us": wall / n * 1e6})
        packed.close()
        rows += bulk_costs(own, store, n)
    own.flushdb()
    return rows


def lean_schedule(send: PackedSchedule, task: Any, i: int) -> Any:
    """What schedule() of a plain job must do, on the packed path: a new id, the record
    (arguments checked as today), the call, the reply read, the Job made, job_scheduled sent
    (no receiver connected here, as in the benchmark's own process)."""
    from django_delayq import signals
    from django_delayq.conf import delayq_settings
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.job import make_job
    from django_delayq.jobs.record import Fields, encode_record

    job_id, args = new_job_id(), [i]
    reply = send(job_id.encode(), encode_record(task.name, args, {}, None, 3))
    fields = Fields(task.name, args, {}, None, 3)
    job = make_job(
        job_id, "pc", "pending", fields, delayq_settings.MAX_RETRIES, score=int(reply[2]) / 1000
    )
    signals.send(signals.job_scheduled, task, job=job)
    return job


def bulk_costs(own: Any, store: Any, n: int) -> list[dict[str, Any]]:
    """Per job of a bulk schedule: pipelined redis-py ZADDs (the baseline), today's
    schedule_many(), and its floor: the same ids (new_job_id), records (encode_record) and
    schedule_many.lua calls of 1,000, packed and sent back to back on a held connection, the
    reply read but no Job made for each (what schedule_many() costs beyond that is its
    Prepared, Plan and Job objects per call)."""
    from benchmarks.bench import seed
    from benchmarks.tasks import noop
    from django_delayq import schedule_many
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.record import encode_record
    from django_delayq.storage.ops import pack

    client = store.client

    def pipelined() -> None:
        seed.pipelined(client, "pc:{q}:pending", n, 1000, 1)

    def today() -> None:
        schedule_many(noop, [(i,) for i in range(n)], queue="pc")

    def floor() -> None:
        conn = client.connection_pool.get_connection()
        try:
            for start in range(0, n, 1000):
                argv: list[Any] = ["", ""]
                for i in range(start, min(n, start + 1000)):
                    argv += (new_job_id(), encode_record(noop.name, [i], {}), "delay", 0, "")
                op = store.schedule_many_op("pc", [])
                conn.send_packed_command([pack((*op.args[: op.head_len], *argv))])
                conn.read_response()
        finally:
            client.connection_pool.release(conn)

    rows = []
    for name, run in (
        ("bulk: pipelined redis-py ZADD, 1,000 a round trip", pipelined),
        ("bulk: schedule_many() today", today),
        ("bulk: schedule_many.lua packed, ids and records made, no Job", floor),
    ):
        own.flushdb()
        run()  # scripts loaded, connections made
        own.flushdb()
        cpu, wall = time.process_time(), time.perf_counter()
        run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        rows.append({"way": name, "cpu_us": cpu / n * 1e6, "wall_us": wall / n * 1e6})
    return rows
