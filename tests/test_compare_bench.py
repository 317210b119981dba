"""The parts of ``benchmarks/compare.py`` that decide what its table says: the RESP client
it reads Redis with, the median of rounds, and the table's failed cells and footnotes.
(The workloads themselves need the peers installed; ``compare.py --quick`` runs them.)"""

from __future__ import annotations

import uuid

import pytest

from benchmarks.compare import SIZES, SYSTEMS, combine, percentile
from benchmarks.peers.report import FIGURES, render
from benchmarks.peers.resp import Resp


def test_resp_client_reads_every_reply_kind(real_client):
    kwargs = real_client.connection_pool.connection_kwargs
    client = Resp(kwargs["port"], kwargs["host"])
    key = f"dqt-{uuid.uuid4().hex[:12]}:resp"
    try:
        assert client("SELECT", str(kwargs.get("db", 0))) == "OK"
        assert client("RPUSH", key, "a 1.5", "b\r\n2") == 2  # integer
        assert client("LRANGE", key, "0", "-1") == [b"a 1.5", b"b\r\n2"]  # array of bulk
        assert client("GET", key + ":missing") is None  # null bulk
        assert b"used_memory:" in client("INFO", "memory")
        with pytest.raises(RuntimeError, match="WRONGTYPE"):
            client("INCR", key)
        assert client("PING") == "PONG"  # the connection survived the error reply
    finally:
        real_client.delete(key)
        client.close()


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([7.0], 99) == 7.0


def test_rounds_combine_to_medians_flags_and_errors():
    rounds = [
        {"figures": {"drain": 100.0, "drain_overlap": False}, "errors": {}},
        {"figures": {"drain": 300.0, "drain_overlap": True}, "errors": {"memory": "boom"}},
        {"figures": {"drain": 200.0, "drain_overlap": False}, "errors": {}},
    ]
    combined = combine(rounds)
    assert combined["figures"] == {"drain": 200.0, "drain_overlap": True}
    assert combined["errors"] == {"memory": "boom"}


def test_table_marks_failures_caps_and_notes():
    size = SIZES["full"]
    env = {"date": "2026-01-01", "cpus": 2, "python": "3.13.0", "redis_server": "7.0.15"}
    env.update(commit="abc1234", seconds=1.0, setup_seconds=0.0, rounds=1)
    results = {
        "rq": {
            "label": "RQ",
            "versions": {"system": "9.9"},
            "setup": "rq worker",
            "figures": {"rate": 1234.0, "drain": 33.0, "drain_done": 996},
            "errors": {"memory": "RuntimeError: 5 jobs pending in Redis after 20,000"},
        }
    }
    text = render(results, env, size, quick=False)
    assert "RQ 9.9" in text
    assert "1,234" in text
    assert "failed [" in text and "RQ, memory: RuntimeError: 5 jobs pending" in text
    assert "RQ, drain: measured over the first 30 s, 996 of 10,000 jobs." in text
    assert "RQ's default Worker forks a work horse per job" in text  # the drain cell's note
    table = text.split("\n\n")[0].splitlines()
    assert len(table) == len(FIGURES) + 4  # three rules, the header, one row per figure


def test_variant_is_named_in_heading_setup_and_notes():
    size = SIZES["full"]
    env = {"date": "2026-01-01", "cpus": 2, "python": "3.13.0", "redis_server": "7.0.15"}
    env.update(commit="abc1234", seconds=1.0, setup_seconds=0.0, rounds=1)
    entry = {"label": "arq", "versions": {"system": "0.28.0"}, "setup": "arq WorkerSettings"}
    results = {
        "arq": {**entry, "variant": None, "figures": {"drain": 2.0, "drain_done": 60}},
        "arq-10": {
            **entry,
            "variant": "max_jobs 10",
            "figures": {"drain": 200.0, "drain_done": 6000},
            "errors": {"memory": "RuntimeError: boom"},
        },
    }
    results["arq"]["errors"] = {}
    text = render(results, env, size, quick=False)
    header = text.splitlines()[1]
    assert "arq 0.28.0 (max_jobs 10)" in header
    assert "arq 0.28.0  " in header  # the plain column has no variant
    assert "- arq 0.28.0 (max_jobs 10): arq WorkerSettings;" in text
    assert "arq (max_jobs 10), memory: RuntimeError: boom" in text
    assert "arq (max_jobs 10), drain: measured over the first 30 s, 6,000 of" in text
    assert "arq, drain: measured over the first 30 s, 60 of" in text
    assert "starts one job per poll" in text  # the notes of both drain cells
    assert "runs up to 10 at once" in text
    assert "0-0.5 s after it is due" not in text  # no lateness figures: no lateness notes


def test_systems_sharing_a_virtualenv_share_its_requirements():
    shared = {name: spec["venv"] for name, spec in SYSTEMS.items() if "venv" in spec}
    assert shared  # arq-10 runs in arq's virtualenv
    for name, owner in shared.items():
        assert owner in SYSTEMS
        assert SYSTEMS[name]["requirements"] == SYSTEMS[owner]["requirements"], name
        assert SYSTEMS[name]["adapter"] == SYSTEMS[owner]["adapter"], name
