"""schedule() / cancel() / get_job(): validation, unique keys, on_commit, signals."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import os
import re
import time
import warnings
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_delayq import (
    ConnectionError,
    SerializationError,
    TaskNotFound,
    cancel,
    get_job,
    schedule,
    schedule_many,
    signals,
    task,
)
from django_delayq.jobs import ids
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import Job, make_job
from django_delayq.jobs.record import Fields
from django_delayq.scheduling import registry
from django_delayq.scheduling.registry import unregister
from tests.conftest import between, more_settings, names_unchecked
from tests.testapp import tasks as t


def test_schedule_returns_the_stored_job(store):
    before = timezone.now()
    job = t.add.schedule(1, 2, delay=timedelta(minutes=30))
    after = timezone.now()
    assert job.outcome == "created" and job.status == "pending" and job.queue == "default"
    assert job.task == "tests.testapp.tasks.add" and job.args == [1, 2] and job.kwargs == {}
    assert between(job.due_at - timedelta(minutes=30), before, after)
    assert between(job.created_at, before, after)
    got = get_job(job.id)
    assert got.id == job.id and got.status == "pending" and got.args == [1, 2]
    assert got.attempts == 0 and got.max_retries == 5 and got.last_error is None
    assert abs(got.due_at - job.due_at) < timedelta(milliseconds=1)


def test_schedule_by_name_at_and_in_the_past(store):
    at = timezone.now() + timedelta(hours=1)
    job = schedule("tests.testapp.tasks.add", 1, b=2, at=at)
    assert abs(job.due_at - at) < timedelta(milliseconds=1) and job.kwargs == {"b": 2}
    before = timezone.now()
    past = schedule(t.add, 1, 2, at=before - timedelta(days=1))
    assert between(past.due_at, before, timezone.now())  # due at once
    with names_unchecked(store):  # registered in another code base's workers, not here
        unknown = schedule("other_service.tasks.run", 1)
    assert unknown.task == "other_service.tasks.run"


@pytest.mark.django_db  # a miss in Redis looks in the database outbox
def test_queue_from_task_and_option(store):
    assert t.send_mail.schedule("a@b.c").queue == "emails"
    job = t.add.schedule(1, 2, queue="fast")
    assert job.queue == "fast" and get_job(job.id).queue == "fast"
    assert get_job(job.id, queue="default") is None


def test_an_unknown_task_name_is_refused_with_the_closest_names(store):
    """Tasks modules are autodiscovered at startup (DelayQConfig.ready), so a name the
    registry lacks is a mistake here: it would be retried and dead-lettered by workers."""
    assert registry.discovered()
    t.add.schedule(1, 2)
    with pytest.raises(
        TaskNotFound, match=r"closest registered names: 'tests\.testapp\.tasks\.add'"
    ):
        schedule("tests.testapp.tasks.ad", 1, 2)
    with pytest.raises(LookupError, match=r"'shop\.tasks\.nope' is not registered.*CHECK_NAMES"):
        schedule("shop.tasks.nope", 1)
    with pytest.raises(TaskNotFound, match=r"shop\.tasks\.nope"):
        schedule_many("shop.tasks.nope", [(1,), (2,)])
    with pytest.raises(TaskNotFound):  # at the call, not when the transaction commits
        schedule("shop.tasks.nope", 1, on_commit=True)
    assert store.size("default", "pending") == 1  # the one t.add job only
    with names_unchecked(store):
        assert schedule("shop.tasks.nope", 1).task == "shop.tasks.nope"
        assert len(schedule_many("shop.tasks.nope", [(1,), (2,)])) == 2


def test_an_unknown_task_option_names_the_valid_ones():
    """Issue 26: @task(retry_delay=1) was a bare "unexpected keyword argument" TypeError,
    raised only when the decorator was applied. It names the option meant (huey's and
    Celery's names too, and close typos) and lists the valid ones, at once."""
    from django_delayq import task

    with pytest.raises(
        TypeError,
        match=r"unknown option 'retry_delay': did you mean "
        r"'retry_backoff'\? @task takes name, queue, max_retries, retry_backoff",
    ):
        task(retry_delay=1)
    with pytest.raises(TypeError, match=r"'qeue': did you mean 'queue'\?"):
        task(qeue="emails")
    with pytest.raises(TypeError, match=r"unknown option 'colour': @task takes name, queue"):
        task(colour="red")


def test_names_are_not_checked_before_the_registry_is_loaded(store, monkeypatch):
    """Before apps are ready (a script that never called django.setup()) the registry may
    lack tasks defined elsewhere: names are let through, as before."""
    monkeypatch.setattr(registry, "_discovered", False)
    assert schedule("shop.tasks.nope", 1).task == "shop.tasks.nope"


def test_a_queue_outside_the_configured_ones_is_refused(store):
    # QUEUES not set: every valid name is allowed (test_queue_from_task_and_option)
    with more_settings(store, QUEUES=["default", "reports"]):
        with pytest.raises(ValueError, match=r"queue 'defualt' .*did you mean 'default'\?"):
            t.add.schedule(1, 2, queue="defualt")
        with pytest.raises(ValueError, match=r"known: default, reports, emails"):
            schedule_many(t.add, [(1, 2)], queue="fast")
        with pytest.raises(ValueError, match="CHECK_NAMES"):
            t.add.schedule(1, 2, queue="fast", on_commit=True)
        assert store.size("fast", "pending") == store.size("defualt", "pending") == 0
        assert t.add.schedule(1, 2, queue="reports").queue == "reports"
        # a task's own queue is declared on purpose, and may be named at the call too
        assert t.send_mail.schedule("a@b.c").queue == "emails"
        assert t.add.schedule(1, 2, queue="emails").queue == "emails"
    with more_settings(store, QUEUES=["default"], CHECK_NAMES=False):
        assert t.add.schedule(1, 2, queue="fast").queue == "fast"


@pytest.mark.parametrize("queue", ["bad name", ["emails"], 7, "x" * 65])
def test_a_bad_queue_is_refused_with_its_name(fake_store, queue):
    with pytest.raises(ValueError, match=re.escape(f"invalid queue name {queue!r}")):
        t.add.schedule(1, 2, queue=queue)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: t.add.schedule(dt.datetime(2020, 1, 1), 1),
            SerializationError,
            r"argument 0 is a datetime\.datetime.*ISO string.*tests\.testapp\.tasks\.add",
        ),
        (
            lambda: t.add.schedule(1, b={"x": [1, decimal.Decimal("1")]}),
            TypeError,
            r"argument 'b'\['x'\]\[1\] is a decimal\.Decimal",
        ),
        (lambda: t.add.schedule((1, 2), 3), TypeError, "tuple.*pass a list"),
        (lambda: t.add.schedule({1: "a"}, 3), TypeError, "key 1 .*string keys"),
        (lambda: t.add.schedule(float("nan"), 3), TypeError, "nan.*finite"),
        (lambda: t.add.schedule(1), TypeError, "cannot schedule tests.testapp.tasks.add.*missing"),
        (lambda: t.add.schedule(1, 2, delay=1, at=timezone.now()), TypeError, "not both"),
        (lambda: t.add.schedule(1, 2, delay="soon"), TypeError, "delay= must be a timedelta"),
        (lambda: t.add.schedule(1, 2, at=dt.datetime(2030, 1, 1)), ValueError, "naive datetime"),
        (lambda: t.add.schedule(1, 2, at="2030-01-01"), TypeError, "at= must be a datetime"),
        (lambda: t.add.schedule(1, 2, key=""), TypeError, "key= must be a non-empty string"),
        (lambda: t.add.schedule(1, 2, key="\0dk"), ValueError, "may not start with a NUL"),
        (lambda: t.add.schedule(1, 2, key="k", on_conflict="merge"), ValueError, "on_conflict"),
        (lambda: t.add.schedule(1, 2, queue="a b"), ValueError, "invalid queue name"),
        (lambda: t.add.schedule(1, 2, max_retries=-1), ValueError, "max_retries"),
        (lambda: schedule(print, 1), TypeError, "not a task: decorate it with @django_delayq.task"),
        (lambda: schedule("no dots", 1), ValueError, "dotted task name"),
    ],
)
def test_bad_input_is_refused_at_schedule_time(store, call, error, match):
    with pytest.raises(error, match=match):
        call()
    assert store.client.zcard(store.key("default", "pending")) == 0


def test_serialization_error_is_a_type_error():
    assert issubclass(SerializationError, TypeError)


def test_naive_datetime_is_local_time_without_use_tz(store):
    with override_settings(USE_TZ=False, TIME_ZONE="UTC"):
        job = t.add.schedule(1, 2, at=dt.datetime(2099, 1, 1))
    assert job.due_at == dt.datetime(2099, 1, 1, tzinfo=dt.UTC)


def test_same_name_for_two_functions_is_refused():
    def one():
        pass

    def two():
        pass

    task(name="tests.clash")(one)
    try:
        with pytest.raises(ValueError, match="two different functions"):
            task(name="tests.clash")(two)
    finally:
        unregister("tests.clash")


@pytest.mark.django_db  # a miss in Redis looks in the database outbox
def test_unique_key_replace_and_keep(store):
    first = t.add.schedule(1, 2, delay=60, key="order:1:autocancel")
    second = t.add.schedule(5, 6, delay=600, key="order:1:autocancel")
    assert second.outcome == "replaced" and second.id == first.id
    assert get_job(first.id).args == [5, 6]
    kept = t.add.schedule(7, 8, delay=5, key="order:1:autocancel", on_conflict="keep")
    assert kept.outcome == "kept" and kept.id == first.id and kept.args == [5, 6]
    assert abs(kept.due_at - second.due_at) < timedelta(milliseconds=1)
    assert cancel(key="order:1:autocancel") is True
    assert cancel(key="order:1:autocancel") is False
    assert get_job(first.id) is None


@pytest.mark.django_db  # a miss in Redis looks in the database outbox
def test_cancel(store):
    job = t.add.schedule(1, 2, delay=60)
    assert cancel(job.id) is True
    assert cancel(job.id) is False
    assert cancel("01NOSUCHJOB") is False
    with pytest.raises(TypeError):
        cancel()
    with pytest.raises(TypeError):
        cancel(job.id, key="x")


def test_cancel_finds_jobs_of_other_queues(store):
    job = t.send_mail.schedule("x@y.z", delay=60)
    assert get_job(job.id).queue == "emails"
    assert cancel(job.id) is True


@pytest.mark.django_db(transaction=True)
def test_on_commit_stores_only_after_commit(store):
    with transaction.atomic():
        job = t.add.schedule(1, 2, on_commit=True)
        assert job.outcome == "deferred" and job.waits_in == "database"
        # The row is in this transaction; Redis has nothing yet.
        # The caller's own connection sees its row (whatever HORIZON is: outbox promise I1).
        assert get_job(job.id).waits_in == "database"
        assert store.client.zcard(store.key("default", "pending")) == 0
    assert get_job(job.id).status == "pending"
    assert get_job(job.id).waits_in == "redis"  # relayed by the commit hook
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled = t.add.schedule(3, 4, on_commit=True)
        raise RuntimeError("roll back")
    assert get_job(rolled.id) is None
    assert store.client.zcard(store.key("default", "pending")) == 1


@pytest.mark.django_db(transaction=True)
def test_on_commit_outside_a_transaction_stores_at_once(store):
    job = t.add.schedule(1, 2, on_commit=True)
    assert job.outcome == "created" and get_job(job.id) is not None


def test_signals_scheduled_and_cancelled(store):
    seen = []

    def on_scheduled(sender, job, **kwargs):
        seen.append(("scheduled", sender, job.outcome))

    def on_cancelled(sender, job, **kwargs):
        seen.append(("cancelled", sender, job.id))

    def broken(sender, **kwargs):
        raise RuntimeError("a broken receiver must not break schedule()")

    signals.job_scheduled.connect(on_scheduled)
    signals.job_scheduled.connect(broken)
    signals.job_cancelled.connect(on_cancelled)
    try:
        job = t.add.schedule(1, 2, delay=60)
        cancel(job.id)
    finally:
        signals.job_scheduled.disconnect(on_scheduled)
        signals.job_scheduled.disconnect(broken)
        signals.job_cancelled.disconnect(on_cancelled)
    assert seen == [("scheduled", t.add, "created"), ("cancelled", t.add, job.id)]


def test_schedule_many(store):
    jobs = schedule_many(t.add, [(1, 2), {"args": [3], "kwargs": {"b": 4}, "key": "k"}], delay=60)
    assert [j.outcome for j in jobs] == ["created", "created"]
    assert get_job(jobs[1].id).kwargs == {"b": 4} and get_job(jobs[1].id).key == "k"
    with pytest.raises(TypeError, match="argument 0"):
        schedule_many(t.add, [(1, 2), (dt.date.today(), 1)])
    assert store.client.zcard(store.key("default", "pending")) == 2  # nothing of the bad batch
    # on_commit is a schedule() option (the message used to list it as one of the options)
    with pytest.raises(TypeError, match=r"schedule_many\(\) takes no on_commit=.*on_commit\(\)"):
        schedule_many(t.add, [(5, 6)], on_commit=True)
    assert store.client.zcard(store.key("default", "pending")) == 2


def test_schedule_when_redis_is_down_raises():
    with (
        override_settings(DELAYQ={"REDIS_URL": "redis://127.0.0.1:1/0"}),
        pytest.raises(ConnectionError, match="unreachable"),
    ):
        t.add.schedule(1, 2)


def test_cache_alias_connections(real_client):
    from django_delayq.storage.connection import get_store

    for alias in ("default", "builtin"):
        with override_settings(DELAYQ={"CACHE": alias, "PREFIX": "dqt-alias"}):
            assert get_store().client.ping()


def test_record_format_3_and_the_records_of_0_1():
    from django_delayq.exceptions import CorruptJob
    from django_delayq.jobs.record import Fields, decode_record, encode_record

    assert encode_record("shop.tasks.ping", [42, "x"], {}, max_retries=5) == (
        b'5\nshop.tasks.ping\n42,"x"'
    )  # shorter than 0.1's ["shop.tasks.ping",42,"x"]
    full = encode_record("shop.tasks.ping", [1], {"why": "late"}, "order:1", 3, "i")
    assert full == b'3ik=7:order:1\nshop.tasks.ping\n{"why":"late"}\n1'
    assert decode_record(full) == Fields("shop.tasks.ping", [1], {"why": "late"}, "order:1", 3, "i")
    assert decode_record(encode_record("a.b", [], {})) == Fields("a.b", [], {}, None, 0)
    v1 = b'{"t":"shop.tasks.ping","a":[1],"k":{"why":"late"},"u":"order:1","r":3}'
    assert decode_record(v1) == Fields("shop.tasks.ping", [1], {"why": "late"}, "order:1", 3)
    assert decode_record(b'["a.b",1]') == Fields("a.b", [1], {})
    for broken in (
        b"[]",
        b"[1,2]",
        b'"a.b"',
        b"{}",
        b'[{"t":"a.b","k":[]}]',
        b"[{",
        b"#3\na.b\n",  # an unknown (newer) format
        b"5\na.b\n[",
        b"5k\na.b\n[1]\n2",
        b"5=99:x\na.b\n",
        b"\xff",
    ):
        with pytest.raises(CorruptJob):
            decode_record(broken)


def test_schedule_many_sends_a_chunk_again_after_a_lost_reply(store, monkeypatch):
    import redis

    from django_delayq.scheduling import api
    from django_delayq.storage.transport import Transport

    monkeypatch.setattr(api, "BULK_CHUNK", 3)
    calls = [(i, i) for i in range(10)] + [{"args": [0, 0], "key": "unique"}]
    jobs = schedule_many(t.add, calls, delay=60)  # four chunks
    assert len({j.id for j in jobs}) == 11 and jobs[-1].key == "unique"
    assert store.client.zcard(store.key("default", "pending")) == 11

    read, run = Transport._chunk_replies, Transport.run
    reads, resends = [], []

    def loses_the_second_reply(self, conn, pool, ops, budget):
        reads.append(len(ops))
        if len(reads) == 2:  # Redis ran the chunk; the connection broke before its replies
            raise redis.exceptions.ConnectionError("reply lost")
        return read(self, conn, pool, ops, budget)

    def counts_resends(self, ops, budget, resent=False):
        resends.append(resent)
        return run(self, ops, budget, resent)

    monkeypatch.setattr(Transport, "_chunk_replies", loses_the_second_reply)
    monkeypatch.setattr(Transport, "run", counts_resends)
    again = schedule_many(t.add, [(i, i) for i in range(10)], delay=60)
    if not store.cluster and store.transport.client.__class__.__module__.startswith("redis"):
        assert True in resends  # the unanswered chunks went again, with their resend args
    assert len({j.id for j in again}) == 10 and all(j.due_at for j in again)
    assert store.client.zcard(store.key("default", "pending")) == 21  # each stored once


def test_a_connection_error_says_which_redis_and_what_to_check(store):
    """Issue 26: cancel() with Redis down was a 500 whose ConnectionError named no setting
    and nothing to check. It names the URL (its password hidden) or the cache alias."""
    from django_delayq.exceptions import ConnectionError as DelayQConnectionError

    down_url = more_settings(store, REDIS_URL="redis://:hunter2@127.0.0.1:1/0")
    with down_url, pytest.raises(DelayQConnectionError) as raised:
        cancel("0" * 26)
    text = str(raised.value)
    assert "DELAYQ['REDIS_URL'] is 'redis://:***@127.0.0.1:1/0'" in text
    assert "check that this Redis runs" in text and "hunter2" not in text
    # redis-py's text ends with a period of its own: one sentence, one period (issue 33)
    assert "refused. DELAYQ['REDIS_URL']" in text and ".." not in text
    down = {"BACKEND": "django.core.cache.backends.redis.RedisCache"}
    down["LOCATION"] = "redis://127.0.0.1:1/0?password=hunter2"
    caches = override_settings(CACHES={**settings.CACHES, "down": down})
    with caches, more_settings(store, CACHE="down"), pytest.raises(DelayQConnectionError) as raised:
        cancel("0" * 26)
    text = str(raised.value)
    assert "the cache 'down' (LOCATION 'redis://127.0.0.1:1/0?password=***')" in text
    assert "DELAYQ['CACHE']" in text and "hunter2" not in text


def test_the_returned_job_is_the_dataclass_of_its_fields(store):
    """make_job() assembles a Job without the frozen dataclass's __init__: the same value,
    every field set, and frozen all the same."""
    job = t.add.schedule(1, 2, delay=60, key="same", priority=3)
    assert set(vars(job)) >= {f.name for f in dataclasses.fields(Job)}
    assert job == Job(**{f.name: getattr(job, f.name) for f in dataclasses.fields(Job)})
    assert repr(job).startswith(f"Job(id={job.id!r}, task='tests.testapp.tasks.add'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.outcome = "kept"  # type: ignore[misc]
    assert dataclasses.replace(job, outcome="kept").outcome == "kept" and job.priority == 3


def _in_a_child(ms: int) -> str:
    """new_job_id(ms) in a forked child."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, new_job_id(ms).encode())
        os._exit(0)
    os.close(write)
    made = os.read(read, 26).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert len(made) == 26
    return made


def test_a_forked_child_never_makes_the_job_id_its_parent_makes(monkeypatch):
    """Ids are monotonic per process and their random bits are read ahead: a forked child
    starts both afresh, else both processes would make the same next id."""
    # The ids made here are 50 ms ahead; without this the process's next ids would be too,
    # and a later test's job would seem created after what happened to it (CI: an admin's
    # cancel shown before the job's 'Scheduled').
    monkeypatch.setattr(ids, "_last_ms", ids._last_ms)
    monkeypatch.setattr(ids, "_last_rand", ids._last_rand)
    ahead = int(time.time() * 1000) + 50  # milliseconds no id used yet
    new_job_id(ahead)  # the parent's last id is in that millisecond: the next one counts on
    assert _in_a_child(ahead) != new_job_id(ahead)
    # In the next millisecond both read random bits: not the same ones.
    assert _in_a_child(ahead + 1) != new_job_id(ahead + 1)


def test_jobs_made_like_a_plan_s_first_are_the_jobs_make_job_makes(store):
    """A created job of a plan that created one before is copied from that Job's fields
    (Plan.created, job_alike): the Job make_job makes, with its own id, arguments and
    times; a cached property read on the first is not copied; an expiry of its own (counted
    from each call) makes the Job anew."""
    first = t.add.schedule(1, 2, delay=60, priority=3)
    assert first.group is None  # read, and cached on this Job only
    second = t.add.schedule(3, 4, delay=60, priority=3)
    assert "group" not in vars(second)
    made = make_job(
        second.id,
        second.queue,
        "pending",
        Fields(t.add.name, [3, 4], {}, None, first.max_retries, priority=3),
        0,
        score=second.due_at.timestamp(),
        outcome="created",
    )
    assert second == made and vars(second) == vars(made)
    assert second.created_at == made.created_at and second.id != first.id
    assert get_job(second.id).due_at == second.due_at
    expiring = [t.add.schedule(i, 0, expires=600 + i) for i in range(2)]
    assert expiring[1].expires_at - expiring[0].expires_at >= timedelta(seconds=1)


def test_ids_are_ulids_of_their_millisecond(monkeypatch):
    """new_job_id writes the time's 10 digits and the random bits' 16 as the 13 lookups of
    two digits did (ids/ULID's layout), the millisecond's digits kept between its ids."""
    monkeypatch.setattr(ids, "_last_ms", ids._last_ms)
    monkeypatch.setattr(ids, "_last_rand", ids._last_rand)
    pairs = ids._DIGIT_PAIRS
    for ms in (int(time.time() * 1000) + 50, 2**48 - 1, 2**48 + 2**40 + 7):
        for _ in range(3):
            made = new_job_id(ms)
            value = (ids._last_ms << 80) | ids._last_rand
            expected = "".join(pairs[(value >> s) & 1023] for s in range(120, -1, -10))
            assert made == expected and ids._last_ms == ms
            assert ids.id_timestamp(made) == (ms % 2**50) / 1000
