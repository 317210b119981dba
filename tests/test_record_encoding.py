"""One encoder of a job record (jobs/record.py's encode_job): every producer's jobs (schedule()
and schedule_many() through Prepared, the outbox's, batch steps, the django.tasks backend,
recurring occurrences) are the bytes they were before it (the stored format did not change:
the literals below are what 0.7's code wrote), and its ``plain`` says what the engine design's
4.1 says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from django.test import override_settings

from django_delayq.jobs.record import JobSpec, encode_job
from django_delayq.scheduling.plan import Plan
from django_delayq.scheduling.prepared import Prepared
from tests.testapp import tasks as testtasks

ADD = "tests.testapp.tasks.remember"


def prepared(options: dict[str, Any], kwargs: dict | None = None, **extra: Any) -> bytes:
    return Prepared(Plan(testtasks.remember, dict(options)), (1, "x"), kwargs or {}, **extra).record


def api_records() -> dict[str, bytes]:
    """schedule(), schedule_many() and aschedule() encode through Prepared."""
    out = {
        "due now": prepared({}),
        "later": prepared({"delay": 3600}),
        "kwargs": prepared({"delay": 3600}, {"b": [1, 2]}),
        "key": prepared({"key": "order:42", "on_conflict": "keep"}),
        "priority": prepared({"priority": 7, "delay": 600, "max_retries": 0}),
        "key priority kwargs": prepared({"key": "k", "priority": -3}, {"z": None}),
        "linked": prepared({"delay": 3600}, link='{"b":"x"}'),
        "traced": prepared({}, trace='{"traceparent":"00"}'),
        "linked traced": prepared({"priority": 2}, link="{}", trace="{}"),
        "outbox": prepared({"delay": 3600}, outbox=True),
        "outbox linked": prepared({}, outbox=True, link="{}", trace="{}"),
        "for outbox": Prepared(Plan(testtasks.remember, {"delay": 9}), (1,), {})
        .for_outbox()
        .record,
    }
    with override_settings(DELAYQ={"CHECK_NAMES": False, "MAX_RETRIES": 4}):
        out["undecided"] = Prepared(Plan("other.code.task", {}), [1], {}).record
        out["undecided later"] = Prepared(Plan("other.code.task", {"delay": 999}), [], {}).record
        out["group"] = Prepared(Plan("other.code.task", {"group": "t-1"}), [1], {}).record
        out["group linked"] = Prepared(
            Plan("other.code.task", {"group": "t", "delay": 999}), [], {"a": 1}, link="{}"
        ).record
    return out


def stored(store: Any, queue: str, job_id: str) -> bytes:
    return store.client.hget(store.key(queue, "jobs"), job_id)


def step_records(store: Any) -> dict[str, bytes]:
    """Batch callbacks and chain steps (batches/steps.py), stored as relays."""
    from django_delayq.batches.steps import store_step

    out = {}
    for name, step, link in (
        ("step", {"t": ADD, "a": [1, 2], "o": {"delay": 5}}, ""),
        ("step linked", {"t": ADD, "a": [], "k": {"x": 1}, "o": {"priority": 3}}, '{"c":1}'),
        ("step retries", {"t": ADD, "a": [0], "o": {"max_retries": 0, "queue": "emails"}}, ""),
    ):
        job_id = f"{len(out):026d}"
        store_step(step, job_id, link, 1_700_000_000_000, store)
        out[name] = stored(store, step.get("o", {}).get("queue", "default"), job_id)
    with override_settings(DELAYQ={"CHECK_NAMES": False, "MAX_RETRIES": 4, "PREFIX": store.prefix}):
        store_step({"t": "other.code.task", "a": []}, "9" * 26, "{}", 1_700_000_000_000, store)
        out["step undecided"] = stored(store, "default", "9" * 26)
    return out


def backend_records(store: Any) -> dict[str, bytes]:
    """The django.tasks backend's internal task (django_tasks/backend.py)."""
    from datetime import UTC, datetime

    from tests.testapp import django_tasks as dt

    backend = {"BACKEND": "django_delayq.backends.DelayQBackend", "QUEUES": ["default"]}
    with override_settings(TASKS={"default": backend}):
        now = dt.add.enqueue(2, 3)
        later = dt.echo.using(run_after=datetime(2100, 1, 1, tzinfo=UTC)).enqueue(1, b=[2])
    out = {}
    for name, result in (("task now", now), ("task later", later)):
        record = stored(store, result.task.queue_name, result.id)
        out[name] = record.replace(store.prefix.encode(), b"<prefix>")
    return out


def occurrence_records() -> dict[str, bytes]:
    """Recurring occurrences (recurring/occurrences.py)."""
    from django_delayq.recurring.definitions import Definition
    from django_delayq.recurring.occurrences import record_of

    known = Definition("s1", ADD, None, 60_000, args=(1,), kwargs={"a": [1]})
    with override_settings(DELAYQ={"CHECK_NAMES": False, "MAX_RETRIES": 4}):
        unknown = record_of(Definition("s2", "other.code.task", "0 3 * * *", None))
    return {"occurrence": record_of(known), "occurrence undecided": unknown}


GOLDEN: dict[str, bytes] = {
    "task now": b"0i\ndjango_delayq.backends.run_django_task\n"
    b'"tests.testapp.django_tasks.add",[2,3],{},'
    b'{"backend":"default","queue_name":"default","priority":0,"run_after":null}',
    "task later": b"0\ndjango_delayq.backends.run_django_task\n"
    b'"tests.testapp.django_tasks.echo",[1],{"b":[2]},'
    b'{"backend":"default","queue_name":"default","priority":0,"run_after":"2100-01-01T00:00:00+00:00"}',
    "due now": b'5i\ntests.testapp.tasks.remember\n1,"x"',
    "later": b'5\ntests.testapp.tasks.remember\n1,"x"',
    "kwargs": b'5k\ntests.testapp.tasks.remember\n{"b":[1,2]}\n1,"x"',
    "key": b'5i=8:order:42\ntests.testapp.tasks.remember\n1,"x"',
    "priority": b'0^7\ntests.testapp.tasks.remember\n1,"x"',
    "key priority kwargs": b'5ik=1:k^-3\ntests.testapp.tasks.remember\n{"z":null}\n1,"x"',
    "linked": b'5l\ntests.testapp.tasks.remember\n1,"x"',
    "traced": b'5it\ntests.testapp.tasks.remember\n1,"x"',
    "linked traced": b'5ilt^2\ntests.testapp.tasks.remember\n1,"x"',
    "outbox": b'5i\ntests.testapp.tasks.remember\n1,"x"',
    "outbox linked": b'5il\ntests.testapp.tasks.remember\n1,"x"',
    "for outbox": b"5i\ntests.testapp.tasks.remember\n1",
    "undecided": b"4iu\nother.code.task\n1",
    "undecided later": b"4u\nother.code.task\n",
    "group": b"4iug\nother.code.task\n1",
    "group linked": b'4uglk\nother.code.task\n{"a":1}\n',
    "step": b"5ie\ntests.testapp.tasks.remember\n1,2",
    "step linked": b'5ielk^3\ntests.testapp.tasks.remember\n{"x":1}\n',
    "step retries": b"0ie\ntests.testapp.tasks.remember\n0",
    "step undecided": b"4ieul\nother.code.task\n",
    "occurrence": b'5ik\ntests.testapp.tasks.remember\n{"a":[1]}\n1',
    "occurrence undecided": b"4iu\nother.code.task\n",
}


def test_every_producer_writes_today_s_bytes(store):
    # The django.tasks backend first: the settings the others change drop the installed store.
    found = {
        **backend_records(store),
        **api_records(),
        **step_records(store),
        **occurrence_records(),
    }
    assert found == GOLDEN


def test_plain_is_the_engine_design_s():
    """4.1: plain is no unique key, priority 0 and none of the flags i, e, l, g, t ('k'
    and 'u' are plain); schedule_plain.lua also takes flag 'i' (it checks the tombstone on
    a re-send), but never a job bound for the outbox or relayed."""
    base = JobSpec(ADD, [1], {}, max_retries=5)
    assert encode_job(base).plain and encode_job(base).plain_schedule
    for change, plain, plain_schedule in (
        ({"kwargs": {"a": 1}}, True, True),
        ({"undecided": True}, True, True),
        ({"tombstone": True}, False, True),
        ({"outbox": True}, False, False),
        ({"relayed": True}, True, False),
        ({"key": "k"}, False, False),
        ({"priority": 1}, False, False),
        ({"long_tombstone": True, "tombstone": True}, False, False),
        ({"linked": True}, False, False),
        ({"grouped": True}, False, False),
        ({"traced": True}, False, False),
    ):
        found = encode_job(replace(base, **change))
        assert (found.plain, found.plain_schedule) == (plain, plain_schedule), change
    keyed = encode_job(replace(base, key="order:1", tombstone=True, kwargs={"a": 1}))
    assert (keyed.flags, keyed.info) == ("i", "i=order:1")
    assert keyed.data.startswith(b"5ik=7:order:1\n")


def test_calls_of_one_plan_encode_as_calls_of_fresh_plans():
    """The calls of one plan share what encode_job decided for the first of their shape
    (outbox, linked, traced: Plan.encodings): every later call's record is the one a
    fresh plan gives it, whatever shapes come between, and a shape's checks still refuse."""
    options = {"delay": 3600, "expires": 600}
    shared = Plan(testtasks.remember, dict(options))
    calls = [
        ((1, "x"), {}, {}),
        ((2,), {"b": [1]}, {}),
        ((1, "x"), {}, {"link": '{"b":"x"}'}),
        ((3,), {}, {"trace": "{}"}),
        ((1, "x"), {}, {"outbox": True}),
        ((4, "y"), {"z": None}, {}),
        ((5,), {}, {"link": "{}", "trace": "{}"}),
    ]
    for args, kwargs, extra in calls * 2:
        now = 1_700_000_000.0
        fresh = Prepared(Plan(testtasks.remember, dict(options)), args, kwargs, now=now, **extra)
        again = Prepared(shared, args, kwargs, now=now, **extra)
        assert again.record == fresh.record, (args, kwargs, extra)
        assert again.plain == fresh.plain and again.encoded.flags == fresh.encoded.flags
    assert {(True, False, False), (False, True, True)} <= set(shared.encodings)
    with override_settings(DELAYQ={"CHECK_NAMES": False}):
        # (a group through the outbox, the check this used, is accepted since 0.8)
        held = Plan("other.code.task", {"key": "k", "unique_until": "end", "delay": 999})
        Prepared(held, [1], {})  # its unlinked shape, kept
        for _ in range(2):
            with pytest.raises(ValueError, match="batch or chain"):
                Prepared(held, [1], {}, link='{"b":"x"}')
