"""benchmarks/engine_cost.py's bookkeeping: how a transition's Redis time is split into the
script's own and its inner commands', what counts as a command sent, and the seed pattern's
claim on a real server and fakeredis."""

from __future__ import annotations

import uuid
from typing import Any

from benchmarks.bench import seed, transitions
from benchmarks.engine_cost import commands_table
from tests.conftest import delete_keys


class CannedStats:
    """Answers FLUSHALL, CONFIG RESETSTAT and INFO commandstats like redis-py parses them."""

    def __init__(self, stats: dict[str, dict[str, int]]) -> None:
        self.stats = stats

    def flushall(self) -> None:
        pass

    def config_resetstat(self) -> None:
        pass

    def slowlog_reset(self) -> None:
        pass

    def info(self, section: str) -> dict[str, Any]:
        if section == "cpu":
            return {"used_cpu_user": 1.0, "used_cpu_sys": 0.0}
        assert section == "commandstats"
        return {
            f"cmdstat_{name}": {**row, "usec_per_call": row["usec"] / row["calls"]}
            for name, row in self.stats.items()
        }


def test_a_scripts_time_is_split_into_its_own_and_its_inner_commands():
    client = CannedStats(
        {
            "evalsha": {"calls": 10, "usec": 400},  # the script, inner commands included
            "zadd": {"calls": 10, "usec": 30},  # inside it
            "hsetnx": {"calls": 10, "usec": 50},
            "info": {"calls": 1, "usec": 99},  # the benchmark's own reading
        }
    )
    case = transitions.Case("schedule", "", lambda ctx: None, lambda state: (10, 20))
    row = transitions.measure(client, case, {})
    assert row["usec_per_call"] == 40.0
    assert row["inner_usec_per_call"] == 8.0
    assert row["inner_commands_per_call"] == 2.0
    assert row["lua_usec_per_call"] == 32.0
    assert row["usec_per_job"] == 20.0  # 10 calls moved 20 jobs


def test_a_case_of_plain_commands_has_no_inner_time():
    client = CannedStats({"zadd": {"calls": 5, "usec": 10}})
    case = transitions.Case("mark", "", lambda ctx: None, lambda state: (5, 5))
    row = transitions.measure(client, case, {})
    assert row["usec_per_call"] == 2.0
    assert row["inner_usec_per_call"] == 0.0
    assert row["lua_usec_per_call"] == 0.0


def test_commands_sent_leave_out_the_task_setup_and_the_benchmark():
    def life(delayq: dict[str, int]) -> dict[str, Any]:
        slowlog = {
            "delayq": {k: {"calls": v, "usec": v} for k, v in delayq.items()},
            "task": {"rpush": {"calls": 4, "usec": 4}},
            "bench": {"llen": {"calls": 50, "usec": 50}},
        }
        stats = {"zadd": {"calls": 8, "usec": 16}, "info": {"calls": 3, "usec": 90}}
        return {"phases": {"drain": {"commandstats": stats, "slowlog": slowlog}}}

    text = commands_table(
        {"seed": life({"zadd": 4, "zrem": 4, "hello": 2})},
        4,
        lambda rows: "\n".join(" | ".join(r) for r in rows),
    )
    lines = dict(line.split(" | ") for line in text.splitlines()[1:])
    assert lines["sent per job (top-level)"] == "2.00"  # ZADD + ZREM, not HELLO
    assert lines["zadd"] == "2.00, 2.0"
    assert "info" not in lines


def test_the_seed_claim_leases_due_jobs_only(redis_client):
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    pending, running = f"{prefix}:{{q}}:pending", f"{prefix}:{{q}}:running"
    redis_client.zadd(pending, {"a": 100, "b": 200, "c": 5_000})
    claim = redis_client.register_script(seed.CLAIM)
    try:
        assert sorted(claim(keys=[pending, running], args=[1_000, 100, 30_000])) == [b"a", b"b"]
        assert redis_client.zrange(pending, 0, -1) == [b"c"]
        assert redis_client.zrange(running, 0, -1, withscores=True) == [
            (b"a", 31_000.0),
            (b"b", 31_000.0),
        ]
        assert claim(keys=[pending, running], args=[1_000, 100, 30_000]) == []
    finally:
        delete_keys(redis_client, prefix)
