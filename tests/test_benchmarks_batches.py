"""The batch and chain parts of the benchmarks (benchmarks/bench/batches.py) run end to end at
their --quick sizes: real worker processes on a redis-server of their own, every figure
measured. Nothing is timed here (speed is what the benchmark prints)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from benchmarks.bench.batches import _stamps

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

FIGURES = {
    "batch_drain",
    "batch_cpu",
    "batch_redis_us",
    "batch_redis_cpu_us",
    "batch_schedule",
    "batch_complete_p50",
    "batch_complete_p99",
    "chain_step_ms",
    "chain_cpu",
    "chain_redis_us",
    "chain_redis_cpu_us",
}


def test_batch_and_chain_parts_run_at_quick_sizes(tmp_path):
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run.py"),
            "--quick",
            "--only",
            "batch,chain",
            "--prefix",
            f"bench-test-{uuid.uuid4().hex[:8]}",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["not_measured"] == [], result["not_measured"]
    figures = {f["name"]: f for f in result["figures"]}
    assert set(figures) == FIGURES
    for name, f in figures.items():
        assert math.isfinite(f["value"]) and f["value"] >= 0, (name, f["value"])
    for name in FIGURES - {"batch_complete_p50", "batch_complete_p99"}:
        assert figures[name]["baseline"] > 0, name  # measured beside it, in the same run
    assert "wall time per step, a chain of 30" in done.stdout


def test_stamps_are_read_from_every_worker_file(tmp_path):
    (tmp_path / "1.txt").write_text("0 10.5\n1 11.0\n")
    (tmp_path / "2.txt").write_text("2 12.25\n3")  # a line being written
    assert _stamps(tmp_path) == {0: 10.5, 1: 11.0, 2: 12.25}
    assert (tmp_path / "1.txt").exists()  # kept: a worker still writes to it
