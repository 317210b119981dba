"""``call(task, *args, **kwargs).schedule(**options)`` (``Task.call``, :class:`Call`): a task's
arguments kept apart from schedule()'s options, whatever their names; the plain form
``schedule(task, ..., delay=...)`` refusing an option the task also has a parameter of that
name for; the system check delayq.W006 for such tasks."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from django_delayq import (
    Call,
    SerializationError,
    TaskNotFound,
    aschedule,
    call,
    get_job,
    schedule,
    task,
)
from django_delayq.checks import check_tasks
from django_delayq.scheduling.registry import unregister
from django_delayq.worker.dispatch import Worker
from tests.conftest import between
from tests.test_async_api import astore  # noqa: F401  (the fixture)
from tests.testapp import tasks as t

SHADOWING = "tests.calls.shadowing"
RAN: list[dict] = []


@pytest.fixture
def shadowing():
    """A task whose parameters are named like schedule()'s options (and ``task``),
    registered for the test only (delayq.W006 would name it in every other test's check)."""

    def shadowing(task, delay=None, priority=None, queue=None, on_commit=None):
        RAN.append({"task": task, "delay": delay, "priority": priority, "queue": queue})

    RAN.clear()
    yield task(name=SHADOWING, max_retries=0)(shadowing)
    unregister(SHADOWING)
    RAN.clear()


def test_a_call_is_a_plain_value():
    made = t.add.call(1, b=2)
    assert made == call(t.add, 1, b=2) == call("tests.testapp.tasks.add", 1, b=2)
    assert made == Call("tests.testapp.tasks.add", (1,), {"b": 2})
    assert made.task == "tests.testapp.tasks.add" and made.args == (1,) and made.kwargs == {"b": 2}
    assert repr(made) == "call('tests.testapp.tasks.add', 1, b=2)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.task = "other"  # type: ignore[misc]
    kwargs = {"b": 2}
    copied = call(t.add, 1, **kwargs)
    direct = Call(t.add.name, [1], kwargs)
    kwargs["b"] = 3  # the caller's dict changes, not the Calls
    assert copied.kwargs == direct.kwargs == {"b": 2} and direct.args == (1,)


def test_call_takes_a_kwarg_named_task_and_refuses_unknown_names():
    assert call(t.remember, task="x").kwargs == {"task": "x"}
    with pytest.raises(TaskNotFound, match=r"tests\.testapp\.tasks\.ad'"):
        call("tests.testapp.tasks.ad", 1)
    with pytest.raises(TypeError, match="not a task"):
        call(lambda: None)


def test_call_schedule_gives_every_kwarg_to_the_task_and_the_options_to_schedule(store, shadowing):
    before = timezone.now()
    job = shadowing.call(task="T", delay=7, priority=3, queue="x").schedule(
        delay=timedelta(minutes=5), priority=5, queue="emails", key="k"
    )
    after = timezone.now()
    assert job.kwargs == {"task": "T", "delay": 7, "priority": 3, "queue": "x"}
    assert job.queue == "emails" and job.priority == 5 and job.key == "k"
    assert between(job.due_at - timedelta(minutes=5), before, after)
    assert get_job(job.id).kwargs == job.kwargs
    due_now = call(SHADOWING, task="T", delay=7, priority=3, queue="x").schedule()
    assert due_now.queue == "default" and due_now.priority == 0
    assert Worker(["default"], burst=True).run() == 0
    assert RAN == [{"task": "T", "delay": 7, "priority": 3, "queue": "x"}]


def test_call_schedule_takes_only_options_and_checks_the_arguments_then(store):
    with pytest.raises(TypeError, match=r"unknown schedule\(\) option 'b': the options are at"):
        t.add.call(1).schedule(b=2)
    late = t.add.call(datetime(2026, 1, 1, tzinfo=UTC), 2)  # a value, not checked yet
    with pytest.raises(SerializationError, match=r"argument 0 is a datetime\.datetime"):
        late.schedule()
    with pytest.raises(TypeError, match=r"cannot schedule tests\.testapp\.tasks\.add"):
        t.add.call(1, 2, 3).schedule()
    assert store.client.zcard(store.key("default", "pending")) == 0


@pytest.mark.django_db(transaction=True)
def test_call_schedule_on_commit_joins_the_transaction(store):
    with transaction.atomic():
        job = t.add.call(1, 2).schedule(on_commit=True)
        assert job.outcome == "deferred" and job.waits_in == "database"
        assert store.client.zcard(store.key("default", "pending")) == 0
    assert get_job(job.id).waits_in == "redis"


def test_call_aschedule(astore, shadowing):  # noqa: F811
    job = async_to_sync(shadowing.call(task="T", delay=7).aschedule)(delay=60, queue="emails")
    assert job.kwargs == {"task": "T", "delay": 7} and job.queue == "emails"
    assert astore.fetch("emails", job.id).status == "pending"
    with pytest.raises(TypeError, match="takes no on_commit"):
        async_to_sync(t.add.call(1, 2).aschedule)(on_commit=True)


@pytest.mark.parametrize("option", ["delay", "priority", "queue", "on_commit"])
def test_the_plain_form_refuses_an_option_the_task_has_a_parameter_for(store, shadowing, option):
    value = "default" if option == "queue" else 1
    words = (
        f"task {SHADOWING} has a parameter named '{option}'.*"
        f"{SHADOWING}.call\\(..., {option}=...\\).schedule\\({option}=...\\)"
    )
    with pytest.raises(TypeError, match=words):
        schedule(shadowing, "T", **{option: value})
    with pytest.raises(TypeError, match=words):
        shadowing.schedule("T", **{option: value})
    with pytest.raises(TypeError, match=words):
        async_to_sync(aschedule)(SHADOWING, "T", **{option: value})
    assert store.client.zcard(store.key("default", "pending")) == 0


def test_the_plain_form_without_a_clash_behaves_as_before(store, shadowing):
    job = shadowing.schedule("T", key="k", max_retries=2)  # options it has no parameter for
    assert job.kwargs == {} and job.args == ["T"] and job.key == "k" and job.max_retries == 2
    plain = t.add.schedule(1, b=2, delay=60, priority=4)
    assert plain.kwargs == {"b": 2} and plain.priority == 4


def test_w006_names_each_parameter_named_like_an_option(shadowing):
    found = [w for w in check_tasks() if w.id == "delayq.W006"]
    assert [w.msg.split("'")[1] for w in found] == ["delay", "on_commit", "priority", "queue"]
    assert all(SHADOWING in w.msg and ".call(" in w.hint for w in found)
    unregister(SHADOWING)
    assert check_tasks() == []
