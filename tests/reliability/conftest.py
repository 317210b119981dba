"""Fixtures of the reliability suite: redis-server processes, worker processes, and the
``report`` fixture that appends each scenario's figures to the results file."""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.reliability.harness import ROOT, RedisServer, Servers, Workers
from tests.testapp import tasks as testapp_tasks

DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "reliability.jsonl"
RESULTS = Path(os.environ.get("DELAYQ_RELIABILITY_RESULTS", DEFAULT_RESULTS))


@pytest.fixture
def servers(tmp_path):
    """Start redis-server processes (plain, AOF, cluster, sentinel); all stopped afterwards."""
    started = Servers(tmp_path / "redis")
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session")
def runs_server(tmp_path_factory):
    """A Redis that only counts runs (runs:<tag> lists); no scenario restarts it."""
    started = Servers(tmp_path_factory.mktemp("runs-redis"))
    try:
        yield started.redis("runs")
    finally:
        started.close()


@pytest.fixture
def runs_client(runs_server: RedisServer, monkeypatch):
    """A client of the runs Redis, also used by tasks run in this process."""
    client = runs_server.client()
    monkeypatch.setattr(testapp_tasks, "_client", client)
    yield client
    client.close()


@pytest.fixture
def workers(tmp_path):
    """Start delayq_worker processes; any still running afterwards is SIGKILLed."""
    started = Workers(tmp_path)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def prefix() -> str:
    return f"rel-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def tag() -> str:
    return f"tag-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def report(request):
    """``report(scenario=..., jobs=..., kills=..., lost=..., duplicates=..., **more)``: one
    JSON line in the results file; ``seconds`` defaults to the time since the test began."""
    began = time.monotonic()

    def write(**figures: object) -> None:
        line = {
            "scenario": figures.pop("scenario"),
            "jobs": figures.pop("jobs", 0),
            "kills": figures.pop("kills", 0),
            "lost": figures.pop("lost", 0),
            "duplicates": figures.pop("duplicates", 0),
            "seconds": round(float(figures.pop("seconds", time.monotonic() - began)), 1),
            **figures,
            "test": request.node.nodeid,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        with RESULTS.open("a") as out:
            out.write(json.dumps(line) + "\n")

    return write
