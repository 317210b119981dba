"""Redis-side cost of one claim.lua call, this checkout's script against another checkout's
(issue 20: the priority-0 fast path, and the cost of prioritised jobs).

Usage (from the repository root)::

    git worktree add /tmp/before <commit>   # or: git archive <commit> | tar -x -C /tmp/before
    python benchmarks/claim_script.py --old /tmp/before [--rounds 6] [--jobs 100000]

Starts its own ``redis-server`` (persistence off) on a free loopback port, fills a queue with
``--jobs`` due jobs, and times 300 claims of 100 jobs per round with ``INFO commandstats``
(``usec_per_call`` of EVALSHA), rounds interleaved: the old script on priority-0 jobs, the
new one on priority-0 jobs, the new one with every job prioritised (-10 and 10 alternating).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench.common import dedicated_redis  # noqa: E402

BAND = 2**44


def script_of(checkout: Path) -> tuple[str, list[str]]:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from django_delayq.storage import scripts as s;"
        "print(s.script_source('claim'), end='');"
        "print('\\n@@' + ' '.join(s.script_keys('claim')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(checkout)], capture_output=True, text=True, check=True
    ).stdout
    source, kinds = out.rsplit("\n@@", 1)
    return source, kinds.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, type=Path, help="checkout to compare with")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    with dedicated_redis(None) as client:
        if client is None:
            raise SystemExit("claim_script: no redis-server on PATH")
        variants = {
            "old, priority 0": (*script_of(args.old), False),
            "new, priority 0": (*script_of(ROOT), False),
            "new, priorities -10/10": (*script_of(ROOT), True),
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, (source, kinds, ranked) in variants.items():
                client.flushall()
                pipe = client.pipeline(transaction=False)
                for i in range(args.jobs):
                    member = f"id{i:07d}"
                    if ranked:
                        priority = 10 if i % 2 else -10
                        score = (100 - priority) * BAND + 1_000_000 + i
                        pipe.zadd("b:{q}:ranked", {member: score})
                    else:
                        pipe.zadd("b:{q}:pending", {member: 1_000_000 + i})
                    pipe.hset("b:{q}:jobs", member, b"1\ntask\n1")
                    if len(pipe) > 5000:
                        pipe.execute()
                pipe.execute()
                sha = client.script_load(source)
                keys = [f"b:{{q}}:{kind}" for kind in kinds]
                client.config_resetstat()
                for i in range(300):
                    client.evalsha(sha, len(keys), *keys, 2_000_000_000, 100, 30000, f"t{i}", "w")
                results[name].append(
                    client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
                )
        base = statistics.median(results["old, priority 0"])
        for name, values in results.items():
            median = statistics.median(values)
            runs = ", ".join(f"{v:.0f}" for v in values)
            print(
                f"{name:24} {median:7.1f} us per claim of 100 ({median / base:.2f}x)  runs: {runs}"
            )


if __name__ == "__main__":
    main()
