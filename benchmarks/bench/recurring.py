"""Recurring schedules (issue 19): N schedules firing every minute, on a dedicated
redis-server and a PostgreSQL database of their own (the schedules' durable record).

A child process (``python -m benchmarks.bench.recurring N SECONDS``) migrates the database,
creates N Schedule rows (``every`` 60 s, the no-op task), runs one reconcile pass (Redis
memory per schedule: ``used_memory`` after it minus before, / N), then runs a Worker in
process (concurrency 4: its reconcile thread, start hooks and runners) for SECONDS, which
cover at least two minute boundaries. Figures:

- lateness p50 / p99: a task's start minus its fire time (ms); all N fire in the same
  second, so p99 is mostly the time the worker takes to get through N occurrences
- worker CPU per occurrence: the child's CPU time (every thread) / occurrences run
- Redis CPU per occurrence: ``used_cpu_sys + used_cpu_user`` delta / occurrences
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from statistics import quantiles
from typing import Any

from . import pg
from .common import figure, url_of

ROOT = Path(__file__).resolve().parent.parent.parent


def bench_recurring(own: Any, prefix: str, n: int, seconds: float) -> list[dict]:
    with pg.postgres_database() as name:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "PYTHONPATH": str(ROOT),
            "REDIS_URL": url_of(own),
            "DELAYQ_BENCH_PREFIX": prefix,
            "DELAYQ_BENCH_PG_DB": name,
        }
        pg.migrate(ROOT, env)
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench.recurring", str(n), str(seconds)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=seconds + 600,
        )
        if done.returncode:
            raise RuntimeError(f"the recurring child failed: {done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
    note = (
        f"{n:,} schedules every 60 s, {got['occurrences']:,} occurrences in {seconds:g} s; "
        f"Redis command time per occurrence, largest: {got['redis_top']} us"
    )
    return [
        figure(
            "recurring_late_p50",
            "recurring: lateness p50",
            [got["p50"]],
            [],
            "ms",
            "-",
            None,
            note=note,
        ),
        figure(
            "recurring_late_p99",
            "recurring: lateness p99",
            [got["p99"]],
            [],
            "ms",
            "-",
            None,
            note=note,
        ),
        figure(
            "recurring_worker_cpu",
            "recurring: worker CPU per occurrence",
            [got["worker_cpu_us"]],
            [],
            "us",
            "-",
            None,
            note=note,
        ),
        figure(
            "recurring_redis_cpu",
            "recurring: Redis CPU per occurrence",
            [got["redis_cpu_us"]],
            [],
            "us",
            "-",
            None,
            note=note,
        ),
        figure(
            "recurring_memory",
            "recurring: Redis memory per schedule",
            [got["bytes_per_schedule"]],
            [],
            "bytes",
            "-",
            None,
            note=note,
        ),
    ]


def _redis_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def child(n: int, seconds: float) -> dict[str, Any]:
    import django

    django.setup()
    from django_delayq import signals
    from django_delayq.models import Schedule
    from django_delayq.recurring.ids import parse_occurrence_id
    from django_delayq.recurring.reconcile import Reconciler
    from django_delayq.storage.connection import get_store
    from django_delayq.worker.dispatch import Worker

    store = get_store()
    Schedule.objects.bulk_create(
        Schedule(name=f"s{i}", task="benchmarks.tasks.noop", every=60) for i in range(n)
    )
    before = store.client.info("memory")["used_memory"]
    Reconciler(store).run_pass()
    after = store.client.info("memory")["used_memory"]
    late: list[float] = []
    lock = threading.Lock()

    def started(sender: Any, job: Any, **kwargs: Any) -> None:
        parsed = parse_occurrence_id(job.id)
        if parsed:
            with lock:
                late.append(time.time() * 1000 - parsed[0])

    signals.job_started.connect(started, weak=False)
    worker = Worker(["default"], concurrency=4, store=store)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    store.client.config_resetstat()
    redis0 = _redis_cpu(store.client)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    time.sleep(seconds)
    worker.request_stop()
    thread.join(60)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    redis1 = _redis_cpu(store.client)
    stats = store.client.info("commandstats")
    top = sorted(stats.items(), key=lambda kv: -kv[1]["usec"])[:4]
    count = max(len(late), 1)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    cuts = quantiles(late, n=100) if len(late) > 1 else [late[0] if late else 0.0] * 99
    return {
        "occurrences": len(late),
        "p50": round(cuts[49], 1),
        "p99": round(cuts[98], 1),
        "worker_cpu_us": round(cpu / count * 1e6, 1),
        "redis_cpu_us": round((redis1 - redis0) / count * 1e6, 1),
        "bytes_per_schedule": round((after - before) / n, 1),
        # where Redis's command time went (us per occurrence), the four largest
        "redis_top": {k[8:]: round(v["usec"] / count, 1) for k, v in top},
    }


if __name__ == "__main__":
    print(json.dumps(child(int(sys.argv[1]), float(sys.argv[2]))))
