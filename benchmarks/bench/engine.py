"""Engine figures on the shared Redis (``REDIS_URL``): schedule() and schedule_many()
against raw redis-py, and the drain of no-op jobs against a raw one-round-trip loop."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .common import QUEUE, Timer, Workers, cleanup, figure, pending_count
from .report import parser_name

RAW_SCHEDULE = """
local t = redis.call('TIME')
local due = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], due, ARGV[1])
return 1
"""
# One round trip per job: delete the previous job, take the next due one with its record.
RAW_TAKE = """
if ARGV[1] ~= '' then redis.call('HDEL', KEYS[2], ARGV[1]) end
local t = redis.call('TIME')
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t[1] .. '.' .. t[2], 'LIMIT', 0, 1)
if not ids[1] then return {} end
redis.call('ZREM', KEYS[1], ids[1])
return {ids[1], redis.call('HGET', KEYS[2], ids[1])}
"""


def bench_schedule_one(store: Any, prefix: str, n: int, runs: int) -> list[dict[str, Any]]:
    """schedule() one call per job vs one raw EVALSHA per job (issue 5) and vs one
    plain ZADD round trip per job (issue 11), all three loops in each run."""
    from benchmarks.tasks import noop
    from django_delayq.jobs.record import encode_record

    client = store.client
    raw = client.register_script(RAW_SCHEDULE)
    raw_keys = [f"{prefix}:raw:{{b}}:pending", f"{prefix}:raw:{{b}}:jobs"]
    record = encode_record(noop.name, [0], {})
    values, baselines, zadds = [], [], []
    for run in range(runs):
        cleanup(client, prefix)
        raw(keys=raw_keys, args=["warm", record, 3600])  # load the script
        with Timer() as t_raw:
            for i in range(n):
                raw(keys=raw_keys, args=[f"{run:04d}{i:022d}", record, 3600])
        cleanup(client, prefix)
        due = time.time() + 3600
        with Timer() as t_zadd:
            for i in range(n):
                client.zadd(raw_keys[0], {f"{run:04d}{i:022d}": due})
        cleanup(client, prefix)
        noop.schedule(-1, delay=3600)
        with Timer() as t_api:
            for i in range(n):
                noop.schedule(i, delay=3600)
        assert pending_count(store) == n + 1, (pending_count(store), n, store.key(QUEUE, "pending"))
        baselines.append(n / t_raw.seconds)
        zadds.append(n / t_zadd.seconds)
        values.append(n / t_api.seconds)
    cleanup(client, prefix)
    versus_zadd = figure(
        "schedule_vs_zadd",
        # The parser weighs on both sides differently (a ZADD's reply is one integer): named.
        f"schedule() jobs/s vs one plain ZADD round trip per job ({n:,}, {parser_name()})",
        values,
        zadds,
        "jobs/s",
        ">= 0.6 of plain ZADD",
        lambda v, r: r >= 0.60,
        note="raw: redis-py client.zadd(), one round trip per job, same run",
    )
    return [
        figure(
            "schedule_one",
            f"schedule() jobs/s, one call per job ({n:,} due in 1 h, {parser_name()})",
            values,
            baselines,
            "jobs/s",
            ">= 70% of raw one-EVALSHA-per-job",
            lambda v, r: r >= 0.70,
            note="raw: redis-py register_script (TIME + HSET + ZADD), one EVALSHA per job",
        ),
        versus_zadd,
    ]


def bench_schedule_many(store: Any, prefix: str, n: int, runs: int) -> dict[str, Any]:
    from benchmarks.tasks import noop
    from django_delayq import schedule_many
    from django_delayq.scheduling.api import BULK_CHUNK

    client = store.client
    raw_key = f"{prefix}:raw:{{b}}:pending"
    values, baselines = [], []
    for run in range(runs):
        cleanup(client, prefix)
        ids = [f"{run:04d}{i:022d}" for i in range(n)]
        due = time.time() + 3600
        with Timer() as t_raw:
            for start in range(0, n, BULK_CHUNK):
                pipe = client.pipeline(transaction=False)
                for job_id in ids[start : start + BULK_CHUNK]:
                    pipe.zadd(raw_key, {job_id: due})
                pipe.execute()
        cleanup(client, prefix)
        calls = [(i,) for i in range(n)]
        noop.schedule(-1, delay=3600)
        with Timer() as t_api:
            schedule_many(noop, calls, delay=3600)
        assert pending_count(store) == n + 1, (pending_count(store), n, store.key(QUEUE, "pending"))
        baselines.append(n / t_raw.seconds)
        values.append(n / t_api.seconds)
    cleanup(client, prefix)
    return figure(
        "schedule_many",
        f"schedule_many() jobs/s ({n:,} jobs, batches of {BULK_CHUNK:,})",
        values,
        baselines,
        "jobs/s",
        ">= 40,000 jobs/s and >= 50% of pipelined raw ZADD",
        lambda v, r: v >= 40_000 and r >= 0.50,
        note=f"raw: one ZADD per job, pipelined, one round trip per {BULK_CHUNK:,}",
    )


def raw_drain(client: Any, prefix: str, n: int, task: Any = None) -> float:
    """Jobs/s of the simplest correct loop: one round trip per job (take the next due
    job and its record, deleting the previous one), json.loads, call the function
    (``task``'s, default the no-op's, with the argument 0)."""
    from benchmarks.tasks import noop

    task = task or noop
    take = client.register_script(RAW_TAKE)
    keys = [f"{prefix}:raw:{{b}}:pending", f"{prefix}:raw:{{b}}:jobs"]
    record = json.dumps([task.name, 0]).encode()  # the raw loop's own JSON record
    now = time.time() - 60
    for start in range(0, n, 10_000):
        ids = [f"{i:026d}" for i in range(start, min(n, start + 10_000))]
        client.pipeline(transaction=False).zadd(keys[0], dict.fromkeys(ids, now)).hset(
            keys[1], mapping=dict.fromkeys(ids, record)
        ).execute()
    done, previous = 0, ""
    with Timer() as t:
        while True:
            reply = take(keys=keys, args=[previous])
            if not reply:
                break
            previous = reply[0]
            fields = json.loads(reply[1])
            task.func(*fields[1:])  # the raw record: [task, *args]
            done += 1
    assert done == n, (done, n)
    client.delete(*keys)
    return n / t.seconds


def drain_with_workers(store: Any, n: int, processes: int, workdir: Path) -> float:
    """Jobs/s from the first claim to the last ack, ``processes`` burst workers."""
    from benchmarks.tasks import noop

    return timed_drain(store, noop, n, processes, workdir)[0]


def timed_drain(
    store: Any,
    task: Any,
    n: int,
    processes: int,
    workdir: Path,
    concurrency: int = 1,
    env: dict[str, str] | None = None,
    burst: bool = True,
    priorities: tuple[int, ...] = (),
    extra: tuple[str, ...] = (),
) -> tuple[float, Workers]:
    """Schedule ``task(i)`` for i < n, due now, and drain them with ``processes``
    workers (``burst``: they exit when done; else they are stopped with SIGTERM once
    the last job is acknowledged, as a production worker would run; ``extra``: more
    command-line options): jobs/s from the
    first claim to the last ack (polling ZCARD of pending and running every 3 ms), and
    the exited workers (their rusage, and their CPU when they logged "started" and when
    the last job was acknowledged)."""
    from django_delayq import schedule_many

    if priorities:  # issue 20: job i gets priorities[i % len], cycling
        calls: list[Any] = [
            {"args": [i], "priority": priorities[i % len(priorities)]} for i in range(n)
        ]
        schedule_many(task, calls)
    else:
        schedule_many(task, [(i,) for i in range(n)])
    pending, running = store.key(QUEUE, "pending"), store.key(QUEUE, "running")
    ranked = store.key(QUEUE, "ranked")
    mode = ("--burst",) if burst else ()
    workers = Workers(processes, workdir, *mode, *extra, concurrency=concurrency, env=env)
    first = None
    try:
        while True:
            pipe = store.client.pipeline(transaction=False).zcard(pending).zcard(running)
            left, busy, more = pipe.zcard(ranked).execute()
            left += more
            now = time.perf_counter()
            workers.sample_started()
            if first is None and (left < n or busy):
                first = now
            if left == 0 and busy == 0 and first is not None:
                end = now
                workers.sample_end()
                break
            if not workers.running():
                workers.check_alive()
                raise RuntimeError(f"workers exited with {left} pending, {busy} running")
            time.sleep(0.003)
        if burst:
            workers.wait()
    finally:
        workers.stop()
    workers.check_alive()  # a graceful stop exits 0
    dead = store.client.zcard(store.key(QUEUE, "dead"))
    assert dead == 0, f"{dead} jobs dead-lettered: {workers.tail()}"
    return n / (end - first), workers


def bench_drain(store: Any, prefix: str, n: int, runs: int, workdir: Path) -> list[dict]:
    one, two, raw = [], [], []
    for _ in range(runs):
        cleanup(store.client, prefix)
        raw.append(raw_drain(store.client, prefix, n))
        cleanup(store.client, prefix)
        one.append(drain_with_workers(store, n, 1, workdir))
        cleanup(store.client, prefix)
        two.append(drain_with_workers(store, n, 2, workdir))
    cleanup(store.client, prefix)
    return [
        figure(
            "drain_1",
            f"drain jobs/s, 1 worker process, concurrency 1 ({n:,} due, no-op)",
            one,
            raw,
            "jobs/s",
            ">= 3,000 jobs/s",
            lambda v, r: v >= 3000,
            note="log: verbosity 1 to a file; raw: one EVALSHA round trip per job, in process",
        ),
        figure(
            "drain_2",
            "drain jobs/s, 2 worker processes",
            two,
            one,
            "jobs/s",
            ">= 1.6x one process",
            lambda v, r: r >= 1.6,
            ratio_kind="2 processes / 1",
            note="baseline: drain_1 of the same run",
        ),
    ]


def bench_drain_priority(store: Any, prefix: str, n: int, runs: int, workdir: Path) -> list[dict]:
    """Issue 20: the drain of drain_1 (one burst worker, concurrency 1) with every job
    prioritised (-10, 10, -10, ...: all in the ranked set, two bands), with every job's task
    rate-limited (a rate of 1,000,000/s, which never holds a job back: what is measured is
    the general claim path and the pacing's bookkeeping), and with a queue concurrency limit
    (1,000, never reached: the slots' bookkeeping, and the claim without prefetch it
    brings), each against drain_1 of priority-0 jobs in the same run: the cost per job."""
    from benchmarks.tasks import noop, noop_rated

    plain: list[float] = []
    found: dict[str, list[float]] = {"priority": [], "rate": [], "queue": []}
    for _ in range(runs):
        cleanup(store.client, prefix)
        plain.append(drain_with_workers(store, n, 1, workdir))
        cleanup(store.client, prefix)
        found["priority"].append(timed_drain(store, noop, n, 1, workdir, priorities=(-10, 10))[0])
        cleanup(store.client, prefix)
        env = {"DELAYQ_BENCH_RATE": "1000000/s"}
        found["rate"].append(timed_drain(store, noop_rated, n, 1, workdir, env=env)[0])
        cleanup(store.client, prefix)
        env = {"DELAYQ_BENCH_QUEUE_LIMIT": "1000"}
        found["queue"].append(timed_drain(store, noop, n, 1, workdir, env=env)[0])
    cleanup(store.client, prefix)
    titles = {
        "priority": ("drain_priority", f"every job prioritised ({n:,} due, priorities -10/10)"),
        "rate": ("drain_rate", f"every job's task rate-limited ({n:,} due, 1,000,000/s)"),
        "queue": ("drain_queue_limit", f"queue concurrency limit 1,000 ({n:,} due)"),
    }
    out = []
    for kind, values in found.items():
        name, what = titles[kind]
        us = [1e6 / v - 1e6 / b for v, b in zip(values, plain, strict=True)]
        out.append(
            figure(
                name,
                f"drain jobs/s, 1 worker, {what}",
                values,
                plain,
                "jobs/s",
                "no target",
                None,
                ratio_kind="limited / plain" if kind != "priority" else "prioritised / priority 0",
                note="baseline: drain_1 (priority 0) of the same run; extra cost per job (us): "
                + ", ".join(f"{u:.0f}" for u in us),
            )
        )
    return out


def bench_upgrade(store: Any, prefix: str, n: int, runs: int) -> dict[str, Any]:
    """``delayq_upgrade`` of a queue of 0.1 (``upgrade_queue``): ``n`` jobs written as 0.1
    wrote them (format 2 records, scores in seconds; 90 % pending, 5 % running, 5 % dead,
    meta for 20 %), converted in batches of 500. Baseline: writing those keys, pipelined."""
    from django_delayq.worker.upgrade import upgrade_queue

    client = store.client
    key = f"{store.prefix}:{{{QUEUE}}}:%s"
    values, baselines = [], []
    for run in range(runs):
        cleanup(client, prefix)
        now = time.time()
        with Timer() as t_write:
            pipe = client.pipeline(transaction=False)
            for i in range(n):
                job_id = f"{run:04d}{i:022d}"
                record = json.dumps(["benchmarks.tasks.noop", "x" * 16], separators=(",", ":"))
                pipe.hset(key % "jobs", job_id, record)
                kind = "pending" if i % 10 else ("running" if i % 20 else "dead")
                pipe.execute_command("ZADD", key % kind, f"{now + i:.6f}", job_id)
                if i % 5 == 0:
                    meta = {"n": 1, "w": "old", "e": [{"type": "x", "message": "m", "at": now}]}
                    pipe.hset(key % "meta", job_id, json.dumps(meta, separators=(",", ":")))
                if len(pipe) >= 3000:
                    pipe.execute()
            pipe.execute()
        with Timer() as t_upgrade:
            report = upgrade_queue(store, QUEUE)
        assert report.converted == n and report.records == n, report
        baselines.append(n / t_write.seconds)
        values.append(n / t_upgrade.seconds)
    cleanup(client, prefix)
    return figure(
        "upgrade",
        f"delayq_upgrade jobs/s ({n:,} jobs of 0.1, batches of 500)",
        values,
        baselines,
        "jobs/s",
        "no target",
        None,
        note="baseline: writing the 0.1 keys, pipelined",
    )
