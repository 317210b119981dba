"""Scenario 7: bad input, with hypothesis. Random argument structures round-trip exactly
or are refused with TypeError at schedule time; random bytes over job records, unknown
task names, ids without records and a 10 MB payload are handled (a clear error or a
dead-letter entry) while the worker keeps running; random sequences of store operations
keep the store's invariants (see store_machine.py). Fast runs on fakeredis, smaller ones
on a real redis-server started by the test."""

from __future__ import annotations

import math
import signal
import sys
import time
import uuid

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from django_delayq import get_job, schedule
from django_delayq.jobs.record import encode_record
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.store_machine import StoreMachine
from tests.reliability.tasks import mark
from tests.testapp import tasks as t

pytestmark = pytest.mark.reliability

RESERVED = {"delay", "at", "key", "on_conflict", "on_commit", "queue", "max_retries"}
EXAMPLES = {"fake": 500, "real": 100}
QUICK = {"deadline": None, "suppress_health_check": list(HealthCheck), "database": None}

# Text including lone surrogates (hypothesis leaves them out by default).
any_text = st.text(st.characters(exclude_categories=()), max_size=6)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    any_text,
    st.binary(max_size=4),
    st.datetimes(),
    st.decimals(allow_nan=False),
    st.complex_numbers(),
    st.sets(st.integers(), max_size=2),
)
structures = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(
            st.one_of(any_text, st.integers(), st.booleans(), st.none()), children, max_size=4
        ),
    ),
    max_leaves=12,
)
# Values JSON can carry (but for lone surrogates in text), so both outcomes are common.
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=12,
)
arguments = st.one_of(json_values, structures)
kwarg_names = st.one_of(
    st.sampled_from(["task", "self", "args", "kwargs", "job", "name"]),  # schedule()'s own
    st.text(st.characters(exclude_categories=()), min_size=1, max_size=6),
).filter(lambda name: name not in RESERVED)


def carries(value: object) -> bool:
    """Independent oracle: does JSON give ``value`` back with the same types and values?"""
    kind = type(value)
    if value is None or kind is bool:
        return True
    if kind is int:
        return abs(value) < 10 ** (sys.get_int_max_str_digits() - 1)
    if kind is float:
        return math.isfinite(value)
    if kind is str:
        return _utf8(value)
    if kind is list:
        return all(carries(item) for item in value)
    if kind is dict:
        return all(type(k) is str and _utf8(k) and carries(v) for k, v in value.items())
    return False


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def same(a: object, b: object) -> bool:
    """Equal with the same types all the way down (1 != 1.0 != True, -0.0 != 0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.redis_server)])
def any_store(request, servers, prefix, runs_client):
    """A Store on fakeredis, then on a redis-server started for the test."""
    if request.param == "fake":
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        client = servers.redis("data").client()
    store = Store(client, prefix)
    with installed(store):
        t.CALLS.clear()
        yield request.param, store


def test_arguments_round_trip_exactly_or_raise_type_error(any_store, report):
    kind, store = any_store
    accepted: dict[str, tuple[list, dict]] = {}
    refused = 0

    @settings(max_examples=EXAMPLES[kind], **QUICK)
    @given(st.lists(arguments, max_size=3), st.dictionaries(kwarg_names, arguments, max_size=3))
    def check(args: list, kwargs: dict) -> None:
        nonlocal refused
        marker = uuid.uuid4().hex
        carried = all(carries(v) for v in args) and all(carries(v) for v in kwargs.values())
        carried = carried and all(_utf8(name) for name in kwargs)
        try:
            job = schedule(t.remember, marker, *args, **kwargs)
        except TypeError as exc:
            assert not carried, f"refused although JSON carries it: {exc}"
            assert "JSON" in str(exc) or "UTF-8" in str(exc), exc
            refused += 1
            return
        assert carried, f"accepted although JSON changes it: {args!r} {kwargs!r}"
        back = get_job(job.id)
        assert same(back.args, [marker, *args]) and same(back.kwargs, kwargs)
        accepted[marker] = ([marker, *args], kwargs)

    began = time.monotonic()
    check()
    # The worker calls each task with exactly the arguments that were scheduled.
    assert Worker(["default"], burst=True, concurrency=4).run() == 0
    called = {args[0]: (list(args), kw) for args, kw in t.CALLS}
    assert called.keys() == accepted.keys()
    for marker, (args, kwargs) in accepted.items():
        assert same(called[marker][0], args) and same(called[marker][1], kwargs)
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    report(
        scenario=f"7a. random arguments round-trip or TypeError ({kind})",
        jobs=len(accepted),
        seconds=time.monotonic() - began,
        refused=refused,
    )


def test_keyword_arguments_named_like_schedules_own_parameters(fake_store):
    """``task`` and ``self`` are schedule()'s and Task.schedule()'s positional parameters:
    a task's keyword argument of that name must still reach the task."""
    for job in (
        schedule(t.remember, 1, task="a", self="b"),
        t.remember.schedule(2, task="c", self="d"),
    ):
        assert get_job(job.id).kwargs == job.kwargs and set(job.kwargs) == {"task", "self"}


def test_deeply_nested_and_surrogate_arguments_are_refused_with_type_error(fake_store):
    deep: list = []
    node = deep
    for _ in range(100_000):
        node.append([])
        node = node[0]
    for value, message in [
        (deep, "nested too deeply"),
        ("caf\udce9", "lone surrogate"),
        ({"\ud800": 1}, "lone surrogate"),
        (float("nan"), "nan"),
    ]:
        with pytest.raises(TypeError, match=message):
            schedule(t.remember, value)
    assert encode_record(t.remember.name, [[[[1]]]], {})  # ordinary nesting is fine


def test_random_bytes_over_records_and_state_are_dead_lettered(any_store, report):
    kind, store = any_store
    jobs_key, state_key = store.key("default", "jobs"), store.key("default", "state")
    corrupted = 0

    @settings(max_examples=EXAMPLES[kind] // 10, **QUICK)
    @given(st.lists(st.binary(max_size=64), min_size=1, max_size=4), st.binary(max_size=32))
    def check(garbage: list[bytes], state: bytes) -> None:
        nonlocal corrupted
        t.CALLS.clear()
        bad = [t.remember.schedule("bad", i) for i in range(len(garbage))]
        good = t.remember.schedule("good")
        for job, raw in zip(bad, garbage, strict=True):
            store.client.hset(jobs_key, job.id, raw)
        store.client.hset(state_key, good.id, state)  # garbage state is ignored, not fatal
        assert Worker(["default"], burst=True).run() == 0
        assert t.CALLS == [(("good",), {})]
        for job in bad:
            dead = get_job(job.id)
            assert dead.status == "dead", dead
            assert "CorruptJob" in dead.last_error or "not registered" in dead.last_error
            store.delete_dead("default", [job.id])
        corrupted += len(bad)
        assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}

    began = time.monotonic()
    check()
    report(
        scenario=f"7b. random bytes over job records ({kind})",
        jobs=corrupted,
        seconds=time.monotonic() - began,
    )


def test_random_operation_sequences_keep_the_store_invariants(any_store, servers, report):
    kind, store = any_store
    client = store.client

    class Machine(StoreMachine):
        make_client = staticmethod(lambda: client)

    began = time.monotonic()
    # Most sequences on the started server (what users run; fakeredis costs each script
    # call's Lua about 2.3x the CPU): fakeredis keeps enough to show the scripts run on it.
    examples, steps = (25, 30) if kind == "fake" else (150, 40)
    run_state_machine_as_test(
        Machine, settings=settings(max_examples=examples, stateful_step_count=steps, **QUICK)
    )
    report(
        scenario=f"7c. state machine: random store operations ({kind})",
        jobs=examples * steps,
        seconds=time.monotonic() - began,
        note=f"{examples} sequences of up to {steps} steps",
    )


def test_worker_process_survives_garbage_unknown_tasks_orphans_and_10_mb(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """One worker process, fed every kind of bad input in turn, dead-letters each with a
    clear error, runs the 10 MB job, and still runs the next good job."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=1)
    proc = workers.start(env, "--concurrency", "2", "-v", "0", name="victim-of-input")
    pending, running = store.key("default", "pending"), store.key("default", "running")
    with installed(store, CHECK_NAMES=False):  # schedules a task no longer defined
        began = time.monotonic()
        garbage = mark.schedule(tag, "garbage", delay=60)
        store.client.hset(store.key("default", "jobs"), garbage.id, b"\x00\xff{not json")
        store.run_now("default", [garbage.id])
        unknown = schedule("shop.tasks.gone_since_the_last_deploy", 1, max_retries=1)
        store.client.zadd(pending, {"orphan-pending": 0})  # ids without records
        store.client.zadd(running, {"orphan-running": 0})  # lease long expired
        huge_value = "x" * (10 * 1024 * 1024)
        started = time.monotonic()
        huge = mark.schedule(tag, huge_value)
        scheduled_in = time.monotonic() - started
        wait_until(lambda: runs_client.llen(f"runs:{tag}") >= 1, 30, "the 10 MB job to run")
        ran_in = time.monotonic() - started
        mark.schedule(tag, "after")
        wait_until(lambda: "after" in runs(runs_client, tag), 20, "the next good job")
        wait_until(lambda: sizes(store)["dead"] == 4, 20, "four dead-letter entries")
        elapsed = time.monotonic() - began
        dead = {
            job_id: get_job(job_id, queue="default")
            for job_id in (garbage.id, unknown.id, "orphan-pending", "orphan-running")
        }
    assert proc.alive(), proc.output()
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
    done = runs(runs_client, tag)
    report(
        scenario="7d. worker process vs garbage, unknown task, orphans, 10 MB",
        jobs=6,
        lost=0 if done == [huge_value, "after"] else 1,
        seconds=elapsed,
        huge_schedule_ms=round(scheduled_in * 1000),
        huge_run_ms=round(ran_in * 1000),
    )
    assert done == [huge_value, "after"] and get_job(huge.id) is None
    assert all(job.status == "dead" for job in dead.values()), dead
    assert "CorruptJob: job record has no header" in dead[garbage.id].last_error
    assert "is not registered in this process" in dead[unknown.id].last_error
    assert dead[unknown.id].attempts == 2
    assert "job record missing from Redis" in dead["orphan-pending"].last_error
    assert "job record missing from Redis" in dead["orphan-running"].last_error
    assert "lease expired" in dead["orphan-running"].errors[0]["message"]
    assert sizes(store)["pending"] == sizes(store)["running"] == 0
