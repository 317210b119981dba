"""The producer process of one system, run by ``benchmarks/compare.py`` inside that
system's virtualenv::

    python -m benchmarks.peers.producer ADAPTER COMMAND [options]

It imports ``benchmarks.peers.<ADAPTER>`` (which connects to ``$BENCH_REDIS_URL``),
does one thing and prints one JSON object on stdout:

- ``describe``: versions, the worker command and its description.
- ``rate --n N``: one warm-up call, then N ``schedule_in(tag, 3600)`` calls timed;
  ``jobs_per_s`` and the ``pending`` count afterwards (N + 1 expected).
- ``memory --n N``: N ``schedule_in(tag, 3600)`` calls with a 20-character tag.
- ``at --n N --lead S --lead-per-job S --spacing S``: N ``schedule_at`` calls, job i
  due at ``t0 + i * spacing`` where ``t0`` is now + lead + N * lead-per-job (so the
  whole batch is stored before the first one is due); the tags are ``"0"`` .. ``"N-1"``.
- ``probe``: one job due now, tagged ``"probe"``.
- ``pending``: how many jobs the system holds for later, in Redis.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from importlib.metadata import version
from types import ModuleType
from typing import Any


def rate(adapter: ModuleType, n: int) -> dict[str, Any]:
    adapter.schedule_in("warm-up-" + "x" * 12, 3600)
    tags = [f"{i:020d}" for i in range(n)]
    schedule_in = adapter.schedule_in
    started = time.perf_counter()
    for tag in tags:
        schedule_in(tag, 3600)
    seconds = time.perf_counter() - started
    return {"n": n, "seconds": seconds, "jobs_per_s": n / seconds, "pending": adapter.pending()}


def memory(adapter: ModuleType, n: int) -> dict[str, Any]:
    schedule_in = adapter.schedule_in
    for i in range(n):
        schedule_in(f"{i:020d}", 3600)
    return {"n": n}


def at(adapter: ModuleType, n: int, lead: float, per_job: float, spacing: float) -> dict:
    t0 = time.time() + lead + n * per_job
    schedule_at = adapter.schedule_at
    for i in range(n):
        schedule_at(str(i), t0 + i * spacing)
    return {"n": n, "t0": t0, "spacing": spacing, "stored_at": time.time()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("adapter", help="module name under benchmarks.peers")
    parser.add_argument("command", choices=["describe", "rate", "memory", "at", "probe", "pending"])
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--lead", type=float, default=1.0)
    parser.add_argument("--lead-per-job", type=float, default=0.0)
    parser.add_argument("--spacing", type=float, default=0.0)
    args = parser.parse_args(argv)
    adapter = importlib.import_module(f"benchmarks.peers.{args.adapter}")

    if args.command == "describe":
        result: dict[str, Any] = {
            "versions": {
                **adapter.versions(),
                "redis_py": version("redis"),
                "python": platform.python_version(),
            },
            "worker": adapter.WORKER,
            "setup": adapter.SETUP,
        }
    elif args.command == "rate":
        result = rate(adapter, args.n)
    elif args.command == "memory":
        result = memory(adapter, args.n)
    elif args.command == "at":
        result = at(adapter, args.n, args.lead, args.lead_per_job, args.spacing)
    elif args.command == "probe":
        adapter.schedule_at("probe", time.time())
        result = {}
    else:
        result = {"pending": adapter.pending()}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
