"""Redis's own time per transition, from ``INFO commandstats`` (benchmarks/engine_cost.py).

Each case drives one transition through the Store (or the public API) in this process on a
dedicated redis-server: its set-up runs first, then ``CONFIG RESETSTAT``, then the measured
calls, then ``INFO commandstats``. Redis counts a script's time under EVALSHA, and counts the
commands the script runs both inside that time and again under their own names, so for a
case whose measured calls are all script calls:

- ``script``: EVALSHA's usec per call (the commands inside included);
- ``inner``: the other commands' usec per call of the script, and how many it ran;
- ``lua``: script - inner, the Lua the script executed itself (helpers made, records
  parsed, arguments read, replies built) plus the fixed cost of a script call;
- ``process``: the redis-server process's CPU per call (``INFO cpu``, microseconds):
  everything, reading the request, parsing it and writing the reply included, which
  commandstats leaves out.

A case of plain commands (the start mark, the baselines) has no script: its commands are
its own. Per-job figures divide by the jobs the calls moved (a claim of 100 is 100 jobs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import rediscpu

QUEUE = "tq"
NOT_WORK = ("info", "config|resetstat", "config", "ping", "client|setname", "hello")
SCRIPT_CALLS = rediscpu.SCRIPT_CALLS
ONE_ZADD = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) return 1"


@dataclass
class Case:
    """``setup(ctx) -> state``; ``run(state) -> (calls, jobs)`` is what is measured."""

    name: str
    what: str
    setup: Callable[[dict[str, Any]], Any]
    run: Callable[[Any], tuple[int, int]]
    group: str = "current"
    needs: tuple[str, ...] = ()  # scripts a --baseline ref must have to run it too


def measure(client: Any, case: Case, ctx: dict[str, Any]) -> dict[str, Any]:
    client.flushall()
    state = case.setup(ctx)
    cpu = rediscpu.reset(client)
    calls, jobs = case.run(state)
    cpu = rediscpu.process_cpu(client) - cpu
    stats = rediscpu.commandstats(client)
    scripts = {k: v for k, v in stats.items() if k in SCRIPT_CALLS}
    others = {k: v for k, v in stats.items() if k not in SCRIPT_CALLS and k not in NOT_WORK}
    script_usec = sum(v["usec"] for v in scripts.values())
    inner_usec = sum(v["usec"] for v in others.values()) if scripts else 0
    inner_calls = sum(v["calls"] for v in others.values()) if scripts else 0
    total = script_usec if scripts else sum(v["usec"] for v in others.values())
    return {
        "case": case.name,
        "group": case.group,
        "what": case.what,
        "calls": calls,
        "jobs": jobs,
        "usec_per_call": total / calls,
        "usec_per_job": total / jobs if jobs else float("nan"),
        "inner_usec_per_call": inner_usec / calls,
        "inner_commands_per_call": inner_calls / calls,
        "lua_usec_per_call": (script_usec - inner_usec) / calls if scripts else 0.0,
        # everything the server did for the calls: reading, parsing, replying included
        "process_usec_per_call": cpu * 1e6 / calls,
        "commands": {k: v["calls"] for k, v in stats.items() if k not in NOT_WORK},
    }


def table(rows: list[dict[str, Any]]) -> str:
    from .report import render

    out = [("case", "usec/call", "inner", "cmds", "lua", "usec/job", "process/call", "what")]
    for r in rows:
        out.append(
            (
                f"{r['group']}:{r['case']}",
                f"{r['usec_per_call']:.1f}",
                f"{r['inner_usec_per_call']:.1f}",
                f"{r['inner_commands_per_call']:.1f}",
                f"{r['lua_usec_per_call']:.1f}",
                f"{r['usec_per_job']:.2f}",
                f"{r['process_usec_per_call']:.1f}",
                r["what"],
            )
        )
    return render(out)


# -- the current scripts, through the Store ------------------------------------------------


def _info(record: bytes) -> str:
    from django_delayq.jobs.record import _HEADER

    match = _HEADER.match(record)
    return match.group(2).decode() if match else ""


def _scheduled(ctx: dict[str, Any], n: int, delay: float = 0.0) -> Any:
    from django_delayq import schedule_many

    store = ctx["store"]
    schedule_many(ctx["task"], [(i,) for i in range(n)], queue=QUEUE, delay=delay)
    return store


def _claimed(ctx: dict[str, Any], n: int, token: str = "w#1") -> tuple[Any, list]:
    store = _scheduled(ctx, n)
    claim = store.claim(QUEUE, n, lease=30.0, token=token, instance="w")
    return store, claim.jobs


def _claims(store: Any, rounds: int, keep: Any, acks_first: list | None = None) -> int:
    """``rounds`` claims of 100, each carrying the acks of the previous claim's jobs."""
    entries = acks_first or []
    for r in range(rounds):
        token = f"w#{r + 2}"
        claim = store.claim(
            QUEUE, 100, lease=30.0, token=token, instance="w", acks=entries, keep=keep
        )
        summary = "1 1700000000000 0.010 - w" if keep[0] else None
        entries = [
            (c.id, token, _info(c.record), *((summary,) if summary else ())) for c in claim.jobs
        ]
    return rounds


def _worker_claims(store: Any, rounds: int, keep: Any, acks_first: list, size: int = 100) -> int:
    """``rounds`` claims of ``size`` as the worker sends them on a queue it found plain
    (worker/claiming.py): claim_plain.lua, and claim.lua at once (the same token, no acks:
    they were done) when it answers 'features'; each carries the previous claim's acks."""
    entries = acks_first
    for r in range(rounds):
        token = f"w#{r + 2}"
        options = {"lease": 30.0, "token": token, "instance": "w", "keep": keep}
        claim = store.claim(QUEUE, size, acks=entries, plain=True, **options)
        if claim.features:
            claim = store.claim(QUEUE, size, **options)
        summary = "1 1700000000000 0.010 - w" if keep[0] else None
        entries = [
            (c.id, token, _info(c.record), *((summary,) if summary else ())) for c in claim.jobs
        ]
    return rounds


LIMITED = "benchmarks.tasks.grouped_io"  # a task with limits beside the drained noop jobs


def _beside_limits(ctx: dict[str, Any], n: int, keep: Any, size: int = 100) -> tuple[Any, list]:
    """_claimed_with_acks on a queue where another task has a concurrency limit published
    (its `control` hash exists, as publish_limits leaves it for any limited task)."""
    ctx["store"].control.publish_concurrency([QUEUE], {LIMITED: 1})
    return _claimed_with_acks(ctx, n, keep, size)


def _claim_none(store: Any, i: int) -> None:
    store.claim(QUEUE, 10, lease=30.0, token=f"w#{i}", instance="w")


def current_cases(keeps: dict[str, Any]) -> list[Case]:
    """The transitions of today's scripts; ``keeps``: {label: (max age ms, count)}."""
    n = 2000
    cases = [
        Case(
            "schedule",
            "schedule() of a plain job due now (schedule_plain.lua)",
            lambda ctx: ctx,
            lambda ctx: (_loop(n, lambda i: ctx["task"].schedule(i, queue=QUEUE)), n),
        ),
        Case(
            "schedule_delay",
            "schedule(delay=3600): not the earliest, no wake",
            lambda ctx: _with_one(ctx),
            lambda ctx: (_loop(n, lambda i: ctx["task"].schedule(i, queue=QUEUE, delay=3600)), n),
        ),
        Case(
            "schedule_key",
            "schedule(key=..., delay=3600) of a new key: not the earliest (schedule.lua)",
            lambda ctx: _with_one(ctx),
            lambda ctx: (_loop(n, lambda i: _stored(ctx, i, key=f"k{i}", delay=3600)), n),
        ),
        Case(
            "schedule_replace",
            "schedule(key='k', delay=3600+i) replacing one keyed job: no wake (schedule.lua)",
            lambda ctx: _with_one(ctx),
            lambda ctx: (_loop(n, lambda i: _stored(ctx, i, key="k", delay=3600 + i)), n),
        ),
        Case(
            "schedule_replace_max_wait",
            "the same with max_wait=600 (debounce, capped; a ref without it: uncapped)",
            lambda ctx: _with_one(ctx),
            lambda ctx: (
                _loop(n, lambda i: _stored(ctx, i, key="k", delay=3600 + i, max_wait=600)),
                n,
            ),
        ),
        Case(
            "reschedule_id",
            "reschedule(id, delay=7200) of a plain job due in an hour: no wake",
            lambda ctx: _later_ids(_with_one(ctx), n),
            lambda state: (_reschedules(state, "id"), n),
            needs=("reschedule",),
        ),
        Case(
            "reschedule_key",
            "reschedule(key=..., delay=7200) of a keyed job due in an hour: no wake",
            lambda ctx: _keyed(_with_one(ctx), n),
            lambda state: (_reschedules(state, "key"), n),
            needs=("reschedule",),
        ),
        Case(
            "schedule_many",
            "schedule_many() of 1,000 plain jobs a call",
            lambda ctx: ctx,
            lambda ctx: (_many(ctx, n), n),
        ),
        Case(
            "claim_100",
            "claim of 100 from a backlog, no acks (claim.lua)",
            lambda ctx: _scheduled(ctx, n),
            lambda store: (_claims(store, n // 100, (0, 0)), n),
        ),
        Case(
            "claim_none_due",
            "claim of up to 10 with none due: a claim.lua call's own cost (its fast path)",
            lambda ctx: _scheduled(ctx, 1, delay=3600),  # due in an hour: next_due
            lambda store: (_loop(n, lambda i: _claim_none(store, i)), 0),
        ),
    ]
    for label, keep in keeps.items():
        cases.append(
            Case(
                f"claim_100_acks_{label}",
                f"claim of 100 carrying 100 acks, keeping {label} (claim.lua)",
                lambda ctx, keep=keep: _claimed_with_acks(ctx, n, keep),
                lambda state, keep=keep: (_claims(state[0], n // 100, keep, state[1]), n),
            )
        )
        cases.append(
            Case(
                f"claim_plain_100_acks_{label}",
                f"the worker's claim of 100 carrying 100 acks, keeping {label}, no control hash "
                "(claim_plain.lua)",
                lambda ctx, keep=keep: _claimed_with_acks(ctx, n, keep),
                lambda state, keep=keep: (_worker_claims(state[0], n // 100, keep, state[1]), n),
            )
        )
        cases.append(
            Case(
                f"claim_plain_100_acks_{label}_beside_limits",
                f"the same, keeping {label}, beside another task's concurrency limit "
                "(claim_plain.lua; before 0.8 its 'features', then claim.lua)",
                lambda ctx, keep=keep: _beside_limits(ctx, n, keep),
                lambda state, keep=keep: (_worker_claims(state[0], n // 100, keep, state[1]), n),
            )
        )
        if label == "default":  # a worker at concurrency 1: one job a claim, one ack
            cases.append(
                Case(
                    "claim_plain_1_ack_default",
                    "the worker's claim of 1 carrying 1 ack, keeping default, no control hash "
                    "(claim_plain.lua)",
                    lambda ctx, keep=keep: _claimed_with_acks(ctx, n, keep, 1),
                    lambda state, keep=keep: (_worker_claims(state[0], n, keep, state[1], 1), n),
                )
            )
            cases.append(
                Case(
                    "claim_plain_1_ack_default_beside_limits",
                    "the same beside another task's concurrency limit (claim_plain.lua; before "
                    "0.8 its 'features', then claim.lua)",
                    lambda ctx, keep=keep: _beside_limits(ctx, n, keep, 1),
                    lambda state, keep=keep: (_worker_claims(state[0], n, keep, state[1], 1), n),
                )
            )
        cases.append(
            Case(
                f"ack_100_{label}",
                f"ack.lua of 100 jobs, keeping {label}",
                lambda ctx: _claimed(ctx, n),
                lambda state, keep=keep: (_acks(state, keep), n),
            )
        )
    cases += [
        Case(
            "start_mark",
            "the start mark, ZADD XX GT of running (a plain command)",
            lambda ctx: _claimed(ctx, n),
            lambda state: (_marks(state), n),
        ),
        Case(
            "extend_10",
            "heartbeat: extend.lua of 10 leases",
            lambda ctx: _claimed(ctx, 10),
            lambda state: (_loop(200, lambda i: _extend(state)), 10 * 200),
        ),
        Case(
            "fail_retry",
            "fail.lua, retried in 1 s",
            lambda ctx: _claimed(ctx, n),
            lambda state: (_fails(state, 1.0), n),
        ),
        Case(
            "fail_dead",
            "fail.lua, attempts used up: dead-lettered",
            lambda ctx: _claimed(ctx, n),
            lambda state: (_fails(state, -1.0), n),
        ),
        Case(
            "release",
            "release.lua of one lease (a stopping worker hands a job back)",
            lambda ctx: _claimed(ctx, n),
            lambda state: (_releases(state), n),
        ),
        Case(
            "cancel",
            "cancel.lua of a pending job by id",
            lambda ctx: _ids_of(_scheduled(ctx, n), n),
            lambda state: (_cancels(state), n),
        ),
        Case(
            "recover_100",
            "recover.lua of 100 expired leases (refunded: never started)",
            lambda ctx: _claimed(ctx, n),
            lambda state: (_recovers(state, n), n),
        ),
    ]
    return cases


def _with_one(ctx: dict[str, Any]) -> dict[str, Any]:
    """One job due now, so the measured ones are never the earliest (no wake token)."""
    ctx["task"].schedule(-1, queue=QUEUE)
    return ctx


def _loop(n: int, call: Callable[[int], Any]) -> int:
    for i in range(n):
        call(i)
    return n


def _many(ctx: dict[str, Any], n: int) -> int:
    from django_delayq import schedule_many

    for start in range(0, n, 1000):
        schedule_many(ctx["task"], [(i,) for i in range(start, start + 1000)], queue=QUEUE)
    return n // 1000


def _claimed_with_acks(ctx: dict[str, Any], n: int, keep: Any, size: int = 100) -> tuple[Any, list]:
    store = _scheduled(ctx, n + size)
    claim = store.claim(QUEUE, size, lease=30.0, token="w#1", instance="w")
    summary = ("1 1700000000000 0.010 - w",) if keep[0] else ()
    return store, [(c.id, "w#1", _info(c.record), *summary) for c in claim.jobs]


def _acks(state: tuple[Any, list], keep: Any) -> int:
    store, jobs = state
    summary = ("1 1700000000000 0.010 - w",) if keep[0] else ()
    for start in range(0, len(jobs), 100):
        chunk = jobs[start : start + 100]
        store.ack(QUEUE, [(c.id, "w#1", _info(c.record), *summary) for c in chunk], keep=keep)
    return len(jobs) // 100


def _marks(state: tuple[Any, list]) -> int:
    store, jobs = state
    until = time.time() + 30
    for c in jobs:
        store.call(store.mark_op(QUEUE, c.id, until))
    return len(jobs)


def _extend(state: tuple[Any, list]) -> None:
    store, jobs = state
    store.extend(QUEUE, [(c.id, "w#1") for c in jobs], 30.0)


def _fails(state: tuple[Any, list], delay: float) -> int:
    store, jobs = state
    error = {"type": "ValueError", "message": "boom", "traceback": "", "attempt": 1}
    for c in jobs:
        store.fail(
            QUEUE,
            c.id,
            "w#1",
            error,
            delay=delay,
            default_max_retries=3,
            dead_max_age=7 * 86400.0,
            dead_max_count=100_000,
            max_errors=10,
        )
    return len(jobs)


def _releases(state: tuple[Any, list]) -> int:
    store, jobs = state
    for c in jobs:
        store.release(QUEUE, [(c.id, "w#1")], instance="w")
    return len(jobs)


def _ids_of(store: Any, n: int) -> tuple[Any, list[str]]:
    key = store.key(QUEUE, "pending")
    return store, [m.decode() for m in store.client.zrange(key, 0, n - 1)]


def _stored(ctx: dict[str, Any], i: int, **options: Any) -> Any:
    """schedule(i, queue=QUEUE, **options) as api.py stores it, without the plan's look at
    the outbox (the benchmark has no database): the same script call and arguments."""
    from django_delayq.scheduling.plan import Plan
    from django_delayq.scheduling.prepared import Prepared

    plan = Plan(ctx["task"], {"queue": QUEUE, **options})
    job = Prepared(plan, (i,), {})
    return ctx["store"].schedule(QUEUE, job.id, job.record, job.plain, **plan.options)


def _later_ids(ctx: dict[str, Any], n: int) -> tuple[Any, list[str]]:
    """``n`` plain jobs due in an hour (behind the one ``_with_one`` made due now): ids."""
    store, ids = _ids_of(_scheduled(ctx, n, delay=3600), n + 1)
    return store, ids[1:]


def _keyed(ctx: dict[str, Any], n: int) -> tuple[Any, list[str]]:
    for i in range(n):
        _stored(ctx, i, key=f"k{i}", delay=3600)
    return ctx["store"], [f"k{i}" for i in range(n)]


def _reschedules(state: tuple[Any, list[str]], by: str) -> int:
    """store.reschedule() of each job (by id, or by key), 7200 s from now."""
    store, found = state
    for item in found:
        target = {"job_id": item} if by == "id" else {"key": item}
        assert store.reschedule(QUEUE, delay=7200, **target) is not None
    return len(found)


def _cancels(state: tuple[Any, list[str]]) -> int:
    store, ids = state
    for job_id in ids:
        store.cancel(QUEUE, job_id)
    return len(ids)


def _recovers(state: tuple[Any, list], n: int) -> int:
    store, _ = state
    later = time.time() + 3600
    calls = 0
    for _ in range(n // 100):
        store.recover(
            QUEUE,
            token=f"r#{calls}",
            instance="r",
            default_max_retries=3,
            dead_max_age=7 * 86400.0,
            dead_max_count=100_000,
            max_errors=10,
            now=later,
        )
        calls += 1
    return calls


# -- the floor: what any script call costs here ------------------------------------------


def floor_cases() -> list[Case]:
    n = 5000
    keys15 = [f"f:{{q}}:k{i}" for i in range(15)]

    def zadds(client: Any) -> tuple[int, int]:
        for i in range(n):
            client.zadd("f:{q}:pending", {f"m{i}": i})
        return n, n

    def script(client: Any, keys: list[str]) -> tuple[int, int]:
        sha = client.script_load(ONE_ZADD)
        for i in range(n):
            client.evalsha(sha, len(keys), *keys, i, f"m{i}")
        return n, n

    return [
        Case("zadd", "a plain ZADD (one member)", lambda ctx: ctx["client"], zadds, "floor"),
        Case(
            "script_1_zadd",
            "a script running one ZADD, 1 key",
            lambda ctx: ctx["client"],
            lambda client: script(client, ["f:{q}:pending"]),
            "floor",
        ),
        Case(
            "script_1_zadd_15_keys",
            "the same script sent 15 keys",
            lambda ctx: ctx["client"],
            lambda client: script(client, keys15),
            "floor",
        ),
    ]
