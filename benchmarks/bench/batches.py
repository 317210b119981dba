"""Batches and chains (django_delayq.batches), each on the dedicated redis-server ``own``,
drained by one ``delayq_worker`` process (concurrency 1, not --burst, stopped with SIGTERM
once everything is done), as production runs it:

- ``batch``: n no-op jobs scheduled in one ``batch(on_complete=noop)`` vs n plain ones
  (``schedule_many()`` both), in the same run: the drain's jobs/s (first claim to the last
  ack; for the batch, to its on_complete's ack and every member's end forwarded), the
  worker's CPU s per 1,000 jobs, Redis's time in scripts per job (``INFO commandstats``'
  EVALSHA: the transitions, not the plain commands of the forwarding, HMGET / HDEL / HSET)
  and Redis's process CPU per job (``INFO cpu``: everything, the benchmark's own polling
  every 3 ms included);
  and the on_complete latency: batches of ``stamp`` members run one after the other
  by one idle worker, on_complete's start minus the last member's start (a no-op task's
  end is within microseconds of its start), p50 and p99 over the batches of a run;
- ``chain``: a chain of n ``stamp`` steps (``Call.then``) vs a chain made by hand, each
  job scheduling the next with a plain ``schedule()`` (``hand_chain``): wall time per step
  (first step's start to the last's, / (n - 1)), Redis's time and process CPU per step
  (the chain's hash written by ``schedule()`` included), worker CPU s per 1,000 steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import rediscpu
from .common import QUEUE, Timer, Workers, figure, percentile, store_on


def _stamps(workdir: Path) -> dict[int, float]:
    """Every "<n> <time>" line the workers' ``stamp`` tasks wrote so far (the files stay:
    a worker keeps its file open)."""
    found: dict[int, float] = {}
    for path in workdir.glob("*.txt"):
        for line in path.read_text().splitlines():
            n, _, at = line.partition(" ")
            if at:
                found[int(n)] = float(at)
    return found


def _redis_usec(phase: dict[str, Any]) -> float:
    """Redis time of a phase's script calls from commandstats (the commands they run
    inside included: commandstats counts those twice, under the script and under their
    own names, so the rest cannot be added from it; INFO cpu has everything)."""
    return rediscpu.per_job_usec(phase, 1)


def _settled(store: Any, batch_key: str | None) -> bool:
    """Nothing pending or running, every linked job's end forwarded, and (a batch) its
    on_complete stored: it ran, since nothing is pending."""
    pipe = store.client.pipeline(transaction=False)
    pipe.zcard(store.key(QUEUE, "pending")).zcard(store.key(QUEUE, "running"))
    pipe.hlen(store.key(QUEUE, "forward"))
    if batch_key is not None:
        pipe.hexists(batch_key, "placed:complete")
    left, busy, forwards, *placed = pipe.execute()
    return left == 0 and busy == 0 and forwards == 0 and all(placed)


def _subdir(workdir: Path, name: str) -> Path:
    path = workdir / f"{name}-{time.monotonic_ns()}"
    path.mkdir()
    return path


def drain_run(
    own: Any, prefix: str, n: int, workdir: Path, env: dict[str, str], in_batch: bool
) -> dict[str, float]:
    """Schedule n ``noop`` jobs (in one batch or not), then drain them with one worker."""
    from benchmarks.tasks import noop
    from django_delayq import batch, schedule_many

    own.flushdb()
    with store_on(own, prefix) as store:
        noop.schedule(-1, queue="warmup", delay=3600)  # connect, load scripts
        batch_key = None
        with Timer() as scheduling:
            if in_batch:
                with batch(on_complete=noop.call(-1)) as opened:
                    schedule_many(noop, [(i,) for i in range(n)])
                batch_key = store.batch_keys(opened.id)[0]
            else:
                schedule_many(noop, [(i,) for i in range(n)])
        before = rediscpu.reset(own)
        workers = Workers(1, _subdir(workdir, "drain"), env=env)
        first = end = None
        pending = store.key(QUEUE, "pending")
        try:
            while end is None:
                now = time.perf_counter()
                workers.sample_started()
                if first is None and own.zcard(pending) < n:
                    first = now
                if first is not None and _settled(store, batch_key):
                    end = now
                    workers.sample_end()
                elif not workers.running():
                    workers.check_alive()
                    raise RuntimeError("the worker exited before the drain ended")
                time.sleep(0.003)
            phase = rediscpu.read_phase(own, before, {}, logged=False)
        finally:
            workers.stop()
        workers.check_alive()
    return {
        "rate": n / (end - first),
        "cpu": workers.work_cpu_seconds() / n * 1000,
        "redis_us": _redis_usec(phase) / n,
        "redis_cpu_us": phase["process_cpu_s"] / n * 1e6,
        "schedule_rate": n / scheduling.seconds,
    }


def complete_latencies(
    own: Any, prefix: str, batches: int, members: int, workdir: Path, env: dict[str, str]
) -> list[float]:
    """``batches`` batches of ``members`` ``stamp`` jobs, one after the other, one worker:
    each batch's on_complete start minus its last member's start, in ms."""
    from benchmarks.tasks import stamp
    from django_delayq import batch, schedule_many

    own.flushdb()
    stamps_dir = _subdir(workdir, "complete")
    latencies = []
    with store_on(own, prefix):
        workers = Workers(1, stamps_dir, env=env)
        try:
            workers.wait_started()
            for k in range(batches):
                base = k * (members + 1)
                done = base + members  # the on_complete's stamp
                with batch(on_complete=stamp.call(done)):
                    schedule_many(stamp, [(base + i,) for i in range(members)])
                deadline = time.monotonic() + 60
                while done not in (found := _stamps(stamps_dir)):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"batch {k}: no on_complete: {workers.tail()}")
                    workers.check_alive()
                    time.sleep(0.01)
                last = max(found[base + i] for i in range(members))
                latencies.append((found[done] - last) * 1000)
        finally:
            workers.stop()
        workers.check_alive()
    return latencies


def chain_run(
    own: Any, prefix: str, steps: int, workdir: Path, env: dict[str, str], by_hand: bool
) -> dict[str, float]:
    """A chain of ``steps`` ``stamp`` steps (or ``hand_chain`` jobs), one idle worker."""
    from benchmarks.tasks import hand_chain, noop, stamp

    own.flushdb()
    stamps_dir = _subdir(workdir, "chain")
    chain = stamp.call(0)
    for i in range(1, steps):
        chain = chain.then(stamp.call(i))
    with store_on(own, prefix) as store:
        noop.schedule(-1, queue="warmup", delay=3600)  # connect, load scripts
        workers = Workers(1, stamps_dir, env=env)
        try:
            workers.wait_sampled()
            before = rediscpu.reset(own)
            if by_hand:
                hand_chain.schedule(0, steps - 1)
            else:
                chain.schedule()
            deadline = time.monotonic() + 60 + steps / 50
            while len(found := _stamps(stamps_dir)) < steps or not _settled(store, None):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{len(found)} of {steps} steps ran: {workers.tail()}")
                workers.check_alive()
                time.sleep(0.01)
            workers.sample_end()
            phase = rediscpu.read_phase(own, before, {}, logged=False)
        finally:
            workers.stop()
        workers.check_alive()
    assert sorted(found) == list(range(steps)), "a step missing"
    order = sorted(found, key=found.__getitem__)
    assert order == list(range(steps)), "steps ran out of order"
    return {
        "step_ms": (max(found.values()) - min(found.values())) / (steps - 1) * 1000,
        "cpu": workers.work_cpu_seconds() / steps * 1000,
        "redis_us": _redis_usec(phase) / steps,
        "redis_cpu_us": phase["process_cpu_s"] / steps * 1e6,
    }


def bench_batch(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    n = size["batch"]
    count, members = size["batch_latency"]
    plain: list[dict[str, float]] = []
    batched: list[dict[str, float]] = []
    p50s: list[float] = []
    p99s: list[float] = []
    for _ in range(runs):
        plain.append(drain_run(own, prefix, n, workdir, env, in_batch=False))
        batched.append(drain_run(own, prefix, n, workdir, env, in_batch=True))
        latencies = complete_latencies(own, prefix, count, members, workdir, env)
        p50s.append(percentile(latencies, 50))
        p99s.append(percentile(latencies, 99))
    own.flushdb()

    def pair(key: str) -> tuple[list[float], list[float]]:
        return [r[key] for r in batched], [r[key] for r in plain]

    base = "baseline: the same jobs scheduled without a batch, drained in the same run"
    latency_note = f"{count} batches of {members} per run, one after the other, one worker"
    return [
        figure(
            "batch_drain",
            f"drain jobs/s, {n:,} no-op jobs in one batch, 1 worker",
            *pair("rate"),
            "jobs/s",
            "-",
            None,
            note=base,
        ),
        figure(
            "batch_cpu",
            "worker CPU s per 1,000 jobs, in one batch",
            *pair("cpu"),
            "cpu_s",
            "-",
            None,
            note=base,
        ),
        figure(
            "batch_redis_us",
            "Redis time in scripts per job, in one batch",
            *pair("redis_us"),
            "us",
            "-",
            None,
            note=f"{base}; commandstats EVALSHA",
        ),
        figure(
            "batch_redis_cpu_us",
            "Redis process CPU per job, in one batch",
            *pair("redis_cpu_us"),
            "us",
            "-",
            None,
            note=f"{base}; INFO cpu, polling in",
        ),
        figure(
            "batch_schedule",
            f"schedule_many() jobs/s, {n:,} in one batch",
            *pair("schedule_rate"),
            "jobs/s",
            "-",
            None,
            note=base,
        ),
        figure(
            "batch_complete_p50",
            "on_complete start after the last member, p50",
            p50s,
            [],
            "ms",
            "-",
            None,
            note=latency_note,
        ),
        figure(
            "batch_complete_p99",
            "on_complete start after the last member, p99",
            p99s,
            [],
            "ms",
            "-",
            None,
            note=latency_note,
        ),
    ]


def bench_chain(
    own: Any, prefix: str, size: dict, runs: int, workdir: Path, env: dict[str, str]
) -> list[dict]:
    steps = size["chain"]
    chained: list[dict[str, float]] = []
    by_hand: list[dict[str, float]] = []
    for _ in range(runs):
        by_hand.append(chain_run(own, prefix, steps, workdir, env, by_hand=True))
        chained.append(chain_run(own, prefix, steps, workdir, env, by_hand=False))
    own.flushdb()

    def pair(key: str) -> tuple[list[float], list[float]]:
        return [r[key] for r in chained], [r[key] for r in by_hand]

    base = "baseline: each job schedules the next with a plain schedule() (hand_chain)"
    return [
        figure(
            "chain_step_ms",
            f"wall time per step, a chain of {steps:,} no-op steps",
            *pair("step_ms"),
            "ms",
            "-",
            None,
            note=base,
        ),
        figure(
            "chain_cpu",
            "worker CPU s per 1,000 chain steps",
            *pair("cpu"),
            "cpu_s",
            "-",
            None,
            note=base,
        ),
        figure(
            "chain_redis_us",
            "Redis time in scripts per chain step",
            *pair("redis_us"),
            "us",
            "-",
            None,
            note=f"{base}; commandstats EVALSHA",
        ),
        figure(
            "chain_redis_cpu_us",
            "Redis process CPU per chain step",
            *pair("redis_cpu_us"),
            "us",
            "-",
            None,
            note=f"{base}; INFO cpu, polling in",
        ),
    ]
