"""The demo shop end to end: example_project/demo.py --smoke starts the web server and a
worker against Redis, places orders, and exits 0 once the unpaid order was
auto-cancelled by its delayed job while the paid one was kept."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_demo(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    prefix = f"dqt-demo-{uuid.uuid4().hex[:8]}"
    environ = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "DELAYQ_PREFIX": prefix,
        "PYTHONPATH": str(ROOT),
        **env,
    }
    try:
        return subprocess.run(
            [
                sys.executable,
                str(ROOT / "example_project" / "demo.py"),
                "--smoke",
                "--autocancel",
                "2",
                "--port",
                "0",
                *args,
            ],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        client = redis.Redis.from_url(settings.REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)


def test_demo_auto_cancels_the_unpaid_order_and_keeps_the_paid_one(tmp_path):
    result = run_demo(tmp_path, REDIS_URL=settings.REDIS_URL)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "was auto-cancelled; paid order #2 is paid" in out
    assert "Admin login:   demo / " in out and "/admin/django_delayq/job/" in out
    assert "shop.jobs WARNING job" in out  # the job_failed receiver logged the flaky task


def test_demo_runs_on_the_embedded_server_and_says_so(tmp_path):
    result = run_demo(tmp_path, "--embedded-redis")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "EMBEDDED Redis-protocol server" in out and "never for production" in out
    assert "was auto-cancelled" in out
