"""The benchmark's own bookkeeping (benchmarks/bench): what it attributes to which script,
and how it compares two results. Canned Redis replies: nothing here needs a server."""

from __future__ import annotations

from typing import Any

from benchmarks.bench import rediscpu, venvs
from benchmarks.run import compare

SCHEDULE_SHA = "a" * 40
CLAIM_SHA = "b" * 40


class CannedRedis:
    """Answers INFO and SLOWLOG GET the way redis-py parses them."""

    def __init__(self, entries: list[dict[str, Any]], stats: dict[str, dict], cpu: float):
        self.entries, self.stats, self.cpu = entries, stats, cpu

    def info(self, section: str) -> dict[str, Any]:
        if section == "cpu":
            return {"used_cpu_user": self.cpu, "used_cpu_sys": 0.0}
        return {f"cmdstat_{name}": value for name, value in self.stats.items()}

    def slowlog_get(self, num: int) -> list[dict[str, Any]]:
        assert num == -1
        return list(reversed(self.entries))  # newest first, like Redis


def entry(i: int, command: str, usec: int, address: str = "127.0.0.1:5000", name: str = ""):
    return {
        "id": i,
        "duration": usec,
        "command": command.encode(),
        "client_address": address.encode(),
        "client_name": name.encode(),
    }


def phase() -> dict[str, Any]:
    entries = [
        entry(1, "zadd k 1 a", 3, address="?:0"),  # inside the first schedule
        entry(2, "hsetnx h a r", 2, address="?:0"),
        entry(3, f"EVALSHA {SCHEDULE_SHA} 8 k h", 30),
        entry(4, "zrem k a", 1, address="?:0"),  # inside the claim
        entry(5, f"EVALSHA {CLAIM_SHA} 8 k h", 20),
        entry(6, "rpush pushed 1", 2, name=rediscpu.TASK_CLIENT),
        entry(7, "SCRIPT LOAD return 1", 6),
        entry(8, "info commandstats", 9, name=rediscpu.ADMIN_CLIENT),
        entry(9, "ZCARD k", 1),  # a top-level command of delayq's outside any script
    ]
    stats = {
        "evalsha": {"calls": 2, "usec": 50, "usec_per_call": 25.0},
        "zadd": {"calls": 1, "usec": 3, "usec_per_call": 3.0},
    }
    client = CannedRedis(entries, stats, cpu=1.5)
    names = {SCHEDULE_SHA: "schedule"}  # the claim's SHA is unknown: labelled by SHA
    return rediscpu.read_phase(client, cpu_before=1.0, names=names)


def test_scripts_get_the_commands_run_inside_them():
    result = phase()
    assert result["scripts"] == {
        "schedule": {"calls": 1, "usec": 30},
        f"sha {CLAIM_SHA[:8]}": {"calls": 1, "usec": 20},
    }
    assert result["inside_scripts"]["schedule"] == {
        "zadd": {"calls": 1, "usec": 3},
        "hsetnx": {"calls": 1, "usec": 2},
    }
    assert result["inside_scripts"][f"sha {CLAIM_SHA[:8]}"] == {"zrem": {"calls": 1, "usec": 1}}
    assert result["process_cpu_s"] == 0.5


def test_clients_are_told_apart_by_name():
    groups = phase()["slowlog"]
    assert groups["task"] == {"rpush": {"calls": 1, "usec": 2}}
    assert groups["bench"] == {"info": {"calls": 1, "usec": 9}}
    assert set(groups["delayq"]) == {"evalsha", "script|load", "zcard"}


def test_per_job_counts_script_calls_and_other_delayq_commands_apart():
    result = phase()
    assert rediscpu.per_job_usec(result, n=2) == 25.0  # commandstats' EVALSHA
    # delayq's ZCARD; not its SCRIPT LOAD, nor the task's RPUSH, nor the bench's INFO
    assert rediscpu.other_usec_per_job(result, n=2) == 0.5


def test_variant_options_are_not_passed_on():
    argv = ["--python", "python3.13", "--hiredis", "--quick", "--python=x", "--matrix", "-v"]
    assert venvs.without_variant_options(argv) == ["--quick", "-v"]


def test_compare_knows_which_way_is_better():
    def fig(name: str, value: float, unit: str) -> dict[str, Any]:
        return {"name": name, "value": value, "unit": unit}

    before = {
        "environment": {"date": "then"},
        "figures": [fig("rate", 1000, "jobs/s"), fig("late", 10, "ms"), fig("idle", 0, "cpu_s")],
    }
    now = [fig("rate", 1500, "jobs/s"), fig("late", 12, "ms"), fig("idle", 0, "cpu_s")]
    rows = {line.split()[0]: line for line in compare(before, now).splitlines()[4:-1]}
    assert rows["rate"].rstrip().endswith("better")
    assert rows["late"].rstrip().endswith("WORSE")
    assert rows["idle"].rstrip().endswith("same (noise)")
