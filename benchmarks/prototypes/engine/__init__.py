"""Prototypes of a lean engine (issue 35, phase 1): not django-delayq's code, only what proves
the design's costs. ``python benchmarks/engine_cost.py --prototypes`` measures these cases
beside today's scripts in the same run (benchmarks/bench/transitions.py), on data the current
scripts wrote (schedule_many's records, the state hash's format), so each lean script is
shown doing today's work for a plain job.

- ``schedule_plain.lua``: a plain job (no key, priority, group, link, trace; no flag 'i'):
  4 keys, no record parsing, the wake check one ZRANGE of the first pending job;
- ``claim_plain.lua``: the plain path of claim.lua with its acks folded in (finished jobs
  kept as today, or not), reading no feature's state;
- variants that add one thing back to a lean script, to see what each costs: the record
  header parsed, today's helpers made on each call, 15 keys sent, today's EXISTS check of
  the feature keys, no wake check.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.bench.transitions import QUEUE, Case, _info, _scheduled

LUA = Path(__file__).resolve().parent / "lua"
N = 2000
SUMMARY = "1 1700000000000 0.010 - w"


@cache
def text(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def current_helpers(script: str) -> str:
    """What today's ``script``.lua carries before its body: the key locals and the helpers
    of its includes it names (scripts.py prepends them), all made again on every call."""
    from django_delayq.storage.scripts import _lua_dir, script_source

    body = (_lua_dir() / f"{script}.lua").read_text()
    return script_source(script)[: -len(body)]


def lib_helper(name: str) -> str:
    """The text of one helper of today's includes (scripts.py's own reading of them)."""
    from django_delayq.storage.scripts import _include_parts, _lua_dir

    for path in (_lua_dir() / "include").iterdir():
        _, parts = _include_parts(path.read_text().partition("\n\n")[2])
        if name in dict(parts):
            return dict(parts)[name]
    raise LookupError(f"no include defines {name}")


# Today's record parsing added to a lean script: the header read as schedule.lua reads it.
HEADER = (
    lib_helper("header")
    + "local _, flags, _, priority = header(ARGV[2])\n"
    + "if string.find(flags, 'i', 1, true) or priority ~= 0 then "
    + "return redis.error_reply('not plain') end\n"
)


def variants() -> dict[str, str]:
    schedule, claim = text("schedule_plain"), text("claim_plain")
    no_wake = re.sub(r"(?s)\nif not first\[2\].*?\nend\n", "\n", schedule)
    no_wake = no_wake.replace(
        "local first = redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')\n", ""
    )
    # today's fast-path test (EXISTS of ranked, control, parked), names made from KEYS[1]
    exists = (
        "if redis.call('EXISTS', KEYS[1] .. ':r', KEYS[1] .. ':k', KEYS[1] .. ':y') > 0 "
        "then return 0 end\n"
    )
    return {
        "schedule_plain": schedule,
        "schedule_plain_no_wake": no_wake,
        "schedule_plain_header": HEADER + schedule,
        "schedule_plain_helpers": current_helpers("schedule") + schedule,
        # everything schedule.lua adds to the plain path but its body's logic
        "schedule_plain_all": current_helpers("schedule") + HEADER + schedule,
        "claim_plain": claim,
        "claim_plain_helpers": current_helpers("claim") + claim,
        "claim_plain_exists": exists + claim,
    }


def schedule_keys(store: Any, extra: int = 0, queue: str = QUEUE) -> list[str]:
    keys = [store.key(queue, k) for k in ("pending", "jobs", "wake")] + [store.queues_key]
    return keys + [f"{store.prefix}:{{{queue}}}:unused{i}" for i in range(extra)]


CLAIM_KINDS = ("pending", "running", "jobs", "state", "claims", "wake", "stats", "errors")


def claim_keys(store: Any, queue: str = QUEUE) -> list[str]:
    return [store.key(queue, k) for k in (*CLAIM_KINDS, "finished", "kept")]


def _schedules(
    ctx: dict[str, Any], source: str, extra: int = 0, more_argv: int = 0
) -> tuple[int, int]:
    from django_delayq.jobs.record import encode_record

    client, store = ctx["client"], ctx["store"]
    sha = client.script_load(source)
    keys = schedule_keys(store, extra)
    record = encode_record(ctx["task"].name, [0], {})
    tail = [""] * more_argv
    for i in range(N):
        client.evalsha(sha, len(keys), *keys, f"{i:026d}", record, 0, "", QUEUE, *tail)
    return N, N


def _current_schedules(ctx: dict[str, Any]) -> tuple[int, int]:
    """Today's schedule.lua as Store.schedule sends it, through redis-py's evalsha (the
    same client as the lean variants: only the scripts differ)."""
    from django_delayq.jobs.record import encode_record

    client, store = ctx["client"], ctx["store"]
    record = encode_record(ctx["task"].name, [0], {})
    op = store.schedule_op(QUEUE, "x", record, delay=0, remember=True)
    client.script_load(op.script.source)
    head = list(op.args[: op.head_len])
    argv = list(op.args[op.head_len :])
    for i in range(N):
        argv[0] = f"{i:026d}"
        client.execute_command(*head, *argv)
    return N, N


def _claims(state: tuple[Any, list], source: str, keep: tuple[int, int]) -> tuple[int, int]:
    ctx, entries = state
    client, store = ctx["client"], ctx["store"]
    sha = client.script_load(source)
    keys = claim_keys(store)
    rounds = N // 100
    for r in range(rounds):
        token = f"w#{r + 2}"
        acks = [part for entry in entries for part in entry]
        reply = client.evalsha(sha, len(keys), *keys, "", 100, 30000, token, "w", *keep, *acks)
        jobs = reply[3]
        entries = [
            (jobs[i].decode(), token, _info(jobs[i + 1]), SUMMARY if keep[0] else "")
            for i in range(0, len(jobs), 4)
        ]
    return rounds, N


def _backlog(ctx: dict[str, Any]) -> tuple[dict[str, Any], list]:
    """N + 100 plain jobs written by schedule_many(), 100 of them claimed by claim.lua
    (the acks the first measured call carries)."""
    store = _scheduled(ctx, N + 100)
    claim = store.claim(QUEUE, 100, lease=30.0, token="w#1", instance="w")
    return ctx, [(c.id, "w#1", _info(c.record), SUMMARY) for c in claim.jobs]


def cases() -> list[Case]:
    from django_delayq.storage.finished import keep_setting

    source = variants()
    out = [
        Case(
            name,
            f"{name}.lua{'' if name == 'schedule_plain' else ' (a variant)'}",
            lambda ctx: ctx,
            lambda ctx, name=name: _schedules(ctx, source[name]),
            "proto",
        )
        for name in ("schedule_plain", "schedule_plain_no_wake", "schedule_plain_header")
    ]
    out.append(
        Case(
            "schedule_plain_helpers",
            "schedule_plain.lua with today's schedule.lua helpers made on each call",
            lambda ctx: ctx,
            lambda ctx: _schedules(ctx, source["schedule_plain_helpers"]),
            "proto",
        )
    )
    out.append(
        Case(
            "schedule_today_direct",
            "today's schedule.lua, its arguments as Store.schedule sends them",
            lambda ctx: ctx,
            _current_schedules,
            "proto",
        )
    )
    out.append(
        Case(
            "schedule_plain_all",
            "schedule_plain.lua + today's helpers + header parsing + 15 keys + 11 ARGV",
            lambda ctx: ctx,
            lambda ctx: _schedules(ctx, source["schedule_plain_all"], extra=11, more_argv=6),
            "proto",
        )
    )
    out.append(
        Case(
            "schedule_plain_15_keys",
            "schedule_plain.lua sent 15 keys, as schedule.lua is",
            lambda ctx: ctx,
            lambda ctx: _schedules(ctx, source["schedule_plain"], extra=11),
            "proto",
        )
    )
    for label, keep in (("default", keep_setting()), ("off", (0, 0))):
        for name in ("claim_plain", "claim_plain_helpers", "claim_plain_exists"):
            if name != "claim_plain" and label == "off":
                continue
            out.append(
                Case(
                    f"{name}_acks_{label}",
                    f"{name}.lua of 100 carrying 100 acks, keeping {label}",
                    _backlog,
                    lambda state, name=name, keep=keep: _claims(state, source[name], keep),
                    "proto",
                )
            )
    return out
