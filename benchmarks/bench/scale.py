"""Redis memory per pending job and the claim cost at scale, on a dedicated redis-server."""

from __future__ import annotations

import time
from typing import Any

from .common import QUEUE, Timer, figure, store_on


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def bench_memory(client: Any, n: int, runs: int) -> dict[str, Any]:
    from benchmarks.tasks import noop
    from django_delayq import schedule_many

    payload = "x" * 16  # the JSON arguments ["xxxxxxxxxxxxxxxx"] are 20 bytes
    values, baselines = [], []
    for _ in range(runs):
        client.flushdb()
        with store_on(client, "delayq") as store:
            noop.schedule("warm", queue="warmup")  # scripts loaded, queue registry created
            before = used_memory(client)
            jobs = schedule_many(noop, [(payload,)] * n, delay=3600)
            values.append((used_memory(client) - before) / n)
            records = client.hmget(store.key(QUEUE, "jobs"), [j.id for j in jobs[:1]])
            # baseline: the same ids and records, written with raw ZADD + HSET
            before = used_memory(client)
            due = time.time() + 3600
            for start in range(0, n, 10_000):
                ids = [j.id for j in jobs[start : start + 10_000]]
                client.pipeline(transaction=False).zadd(
                    "raw:pending", dict.fromkeys(ids, due)
                ).hset("raw:jobs", mapping=dict.fromkeys(ids, records[0])).execute()
            baselines.append((used_memory(client) - before) / n)
    client.flushdb()
    return figure(
        "memory_per_job",
        f"Redis memory per pending job ({n:,} jobs, 20-byte payload)",
        values,
        baselines,
        "bytes",
        "<= 250 bytes/job",
        lambda v, r: v <= 250,
        note=f"INFO used_memory delta on a dedicated redis-server; record {len(records[0])} "
        "bytes; raw: same ids and records via ZADD + HSET",
    )


def fill_queue(client: Any, store: Any, queue: str, due_now: int, later: int) -> None:
    """Raw-fill a queue: ``due_now`` jobs due a minute ago, ``later`` due in an hour."""
    from benchmarks.tasks import noop
    from django_delayq.jobs.record import encode_record

    pending, jobs = store.key(queue, "pending"), store.key(queue, "jobs")
    record = encode_record(noop.name, [0], {})
    now = time.time()
    total = due_now + later
    for start in range(0, total, 20_000):
        numbers = range(start, min(total, start + 20_000))
        ids = [f"01{i:024d}" for i in numbers]
        scores = {f"01{i:024d}": (now - 60 if i < due_now else now + 3600) for i in numbers}
        client.pipeline(transaction=False).zadd(pending, scores).hset(
            jobs, mapping=dict.fromkeys(ids, record)
        ).execute()


def refill_due(client: Any, store: Any, queue: str, count: int) -> None:
    from benchmarks.tasks import noop
    from django_delayq.jobs.record import encode_record

    record = encode_record(noop.name, [0], {})
    ids = [f"02{time.monotonic_ns() % 10**12:012d}{i:012d}" for i in range(count)]
    client.pipeline(transaction=False).zadd(
        store.key(queue, "pending"), dict.fromkeys(ids, time.time() - 60)
    ).hset(store.key(queue, "jobs"), mapping=dict.fromkeys(ids, record)).execute()


def claim_ack_cycle(store: Any, queue: str, cycles: int) -> float:
    """Seconds per round trip of the worker's exchange: ack the previous job and claim
    the next one, pipelined (what a concurrency-1 worker does per job)."""
    previous: list[tuple[str, str, str]] = []
    with Timer() as t:
        for i in range(cycles):
            ops = [store.ack_op(queue, previous)] if previous else []
            token = f"bench#{i}"
            ops.append(store.claim_op(queue, 1, lease=60, token=token, instance="bench"))
            claim = store.run(ops)[-1]
            previous = [(claim.jobs[0].id, token, "")]
        store.run([store.ack_op(queue, previous)])
    return t.seconds / cycles


def bench_claim_cost(client: Any, size: dict, runs: int) -> dict[str, Any]:
    """Two queues in one server, one with ``claim_small`` pending jobs, one with
    ``claim_big``; rounds of claim+ack alternate between them (drift hits both)."""
    small, big, cycles = size["claim_small"], size["claim_big"], size["claim_cycles"]
    results: dict[str, list[float]] = {"small": [], "big": []}
    client.flushdb()
    with store_on(client, "delayq") as store:
        fill_queue(client, store, "small", due_now=small, later=0)
        fill_queue(client, store, "big", due_now=small, later=big - small)
        for _ in range(runs * 3):
            for queue in ("small", "big"):
                results[queue].append(claim_ack_cycle(store, queue, cycles) * 1e6)
                refill_due(client, store, queue, cycles)
    client.flushdb()
    return figure(
        "claim_cost_ratio",
        f"claim+ack round trip, {big:,} vs {small:,} pending",
        results["big"],
        results["small"],
        "us",
        "ratio <= 1.5",
        lambda v, r: r <= 1.5,
        ratio_kind=f"{big:,} / {small:,} pending",
        note=f"{small:,} due, the rest due in 1 h; ack + claim(1) pipelined, "
        f"rounds of {cycles} alternating between the two queues",
    )
