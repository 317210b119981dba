"""DelayQBackend: Django's documented behaviour of a django.tasks backend, on django-delayq.

Jobs run in-process with ``Worker(burst=True)``; time is moved with the worker's clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.checks import Error, Warning
from django.test import override_settings
from django.utils import timezone

from django_delayq import get_job, schedule
from django_delayq.outbox import relay as relaying
from django_delayq.storage import connection

try:
    import django.tasks  # noqa: F401
except ImportError:  # Django 5.2 needs the backport: pip install 'django-delayq[tasks]'
    pytest.importorskip("django_tasks", reason="Django 5.2 without the django-tasks backport")

from django_delayq.django_tasks.backend import INTERNAL_TASK, DelayQBackend, run_django_task
from django_delayq.exceptions import ConfigurationError
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.worker.dispatch import Worker
from tests.testapp import django_tasks as dt
from tests.testapp import tasks as testtasks

try:
    from django.tasks import TaskResultStatus, default_task_backend, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started

    IMMEDIATE = "django.tasks.backends.immediate.ImmediateBackend"
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskResultStatus, default_task_backend, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started

    IMMEDIATE = "django_tasks.backends.immediate.ImmediateBackend"

BACKEND = "django_delayq.backends.DelayQBackend"


def tasks_setting(queues=("default", "emails"), **options):
    return {"default": {"BACKEND": BACKEND, "QUEUES": list(queues), "OPTIONS": options}}


@pytest.fixture(autouse=True)
def _tasks():
    dt.CALLS.clear()
    with override_settings(TASKS=tasks_setting()):
        yield


@contextlib.contextmanager
def delayq(store, **changes):
    """Change DELAYQ settings and keep the test's store installed (changes drop it)."""
    try:
        with override_settings(DELAYQ={**settings.DELAYQ, **changes}):
            connection._stores[(None, False, "default", store.prefix)] = store
            yield
    finally:
        connection._stores[(None, False, "default", store.prefix)] = store


def work(queues=("default",), clock=None) -> Worker:
    worker = Worker(list(queues), burst=True, clock=clock)
    worker.run()
    return worker


def later(seconds: float):
    return lambda: time.time() + seconds


# -- enqueue and results --------------------------------------------------------------


def test_backend_is_the_configured_one(fake_store):
    backend = default_task_backend
    assert isinstance(task_backends["default"], DelayQBackend)
    assert backend.supports_defer and backend.supports_async_task and backend.supports_get_result
    assert backend.supports_priority


def test_enqueue_stores_a_ready_result_and_a_pending_job(store):
    before = timezone.now() - timedelta(seconds=1)
    result = dt.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    assert result.args == [2, 3] and result.kwargs == {}
    assert result.task == dt.add
    assert before <= result.enqueued_at <= timezone.now()
    assert result.started_at is result.finished_at is result.last_attempted_at is None
    assert result.worker_ids == [] and result.errors == [] and result.attempts == 0
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value

    job = get_job(result.id)  # the result id is the django-delayq job id
    assert job.status == "pending" and job.queue == "default"
    assert job.task == INTERNAL_TASK
    assert job.args[:3] == ["tests.testapp.django_tasks.add", [2, 3], {}]
    assert job.max_retries == 0

    stored = default_task_backend.get_result(result.id)
    assert stored.status == TaskResultStatus.READY
    assert stored.enqueued_at == result.enqueued_at
    assert stored.args == [2, 3] and stored.task == dt.add
    assert dt.CALLS == []


def test_worker_runs_it_and_refresh_sees_success(store):
    result = dt.add.enqueue(2, 3)
    worker = work()
    assert dt.CALLS == [("add", 2, 3)]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == 5
    assert result.worker_ids == [worker.name]
    assert result.attempts == 1
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert get_job(result.id) is None  # acknowledged: the job is gone, the result stays


def test_get_result_from_task_and_backend(store):
    result = dt.add.enqueue(1, 1)
    work()
    assert dt.add.get_result(result.id).return_value == 2
    assert default_task_backend.get_result(result.id).return_value == 2
    with pytest.raises(TaskResultMismatch):
        dt.fail.get_result(result.id)


@pytest.mark.parametrize("result_id", ["nope", "01JAAAAAAAAAAAAAAAAAAAAAAA", "", "*"])
def test_unknown_result_id_does_not_exist(fake_store, result_id):
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        dt.add.get_result(result_id)


def test_running_status_is_visible_while_the_task_runs(store):
    result = dt.own_status.enqueue()
    work()
    result.refresh()
    assert result.return_value == TaskResultStatus.RUNNING


def test_failure_is_recorded_with_traceback(store):
    result = dt.fail.enqueue("kaput")
    worker = work()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished and result.finished_at is not None
    assert result.attempts == 1 and result.worker_ids == [worker.name]
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "kaput" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert get_job(result.id).status == "dead"  # in the dead-letter set, like any failed job


def test_unserializable_return_value_fails_the_task(fake_store):
    result = dt.bad_return.enqueue()
    work()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"


def test_return_values_round_trip_through_json(fake_store):
    result = dt.echo.enqueue((1, 2), b"bytes", x={"k": (3,)})
    assert result.args == [[1, 2], "bytes"]
    work()
    result.refresh()
    assert result.return_value == {"args": [[1, 2], "bytes"], "kwargs": {"x": {"k": [3]}}}


def test_an_async_task_runs_on_the_workers_event_loop(store):
    """With --async-concurrency an async def Task is awaited on the worker's loop, its
    result kept up to date (through sync_to_async) and its retries recorded as a sync one's."""
    seen = []

    def started(sender, **kwargs):
        seen.append("started")

    def finished(sender, **kwargs):
        seen.append("finished")

    task_started.connect(started, weak=False)
    task_finished.connect(finished, weak=False)
    try:
        with override_settings(TASKS=tasks_setting(MAX_RETRIES=2)):
            result = dt.async_flaky.enqueue(1)
            worker = Worker(["default"], burst=True, async_concurrency=10)
            assert worker.run() == 0
            result.refresh()
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == [2, "delayq-loop"]
    assert result.attempts == 2 and result.worker_ids == [worker.name] * 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"]
    assert "async attempt 1 fails" in result.errors[0].traceback
    assert worker.parts.loop.in_flight_max == 1 and worker.processed == 1 and worker.failed == 1
    assert seen == ["started", "started", "finished"]


# -- retries and attempts ---------------------------------------------------------------


def test_retries_appear_as_attempts(store):
    with override_settings(TASKS=tasks_setting(MAX_RETRIES=3)):
        result = dt.flaky.enqueue(2)
        worker = work()  # RETRY_BACKOFF is 0 in the tests: retries are due at once
        result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3  # context.attempt of the attempt that succeeded
    assert result.attempts == 3 and result.worker_ids == [worker.name] * 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2
    assert "attempt 2 fails" in result.errors[1].traceback
    assert [c[1] for c in dt.CALLS] == [1, 2, 3]


def test_ready_between_attempts_and_failed_only_at_the_end(store):
    with override_settings(TASKS=tasks_setting(MAX_RETRIES=1)), delayq(store, RETRY_BACKOFF=60):
        result = dt.fail.enqueue()
        work()
        result.refresh()
        assert result.status == TaskResultStatus.READY  # waiting for its retry
        assert result.attempts == 1 and len(result.errors) == 1
        assert result.finished_at is None
        assert get_job(result.id).status == "pending"

        work(clock=later(3600))
        result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2 and len(result.errors) == 2
    assert get_job(result.id).status == "dead"


def test_default_is_one_attempt(fake_store):
    result = dt.flaky.enqueue(1)
    work()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert dt.CALLS == [("flaky", 1)]


# -- deferred tasks ---------------------------------------------------------------------


def test_deferred_task_does_not_run_early(store):
    run_after = timezone.now() + timedelta(hours=1)
    result = dt.add.using(run_after=run_after).enqueue(1, 2)
    assert result.task.run_after == run_after
    job = get_job(result.id)
    assert job.status == "pending"
    assert abs((job.due_at - run_after).total_seconds()) < 0.01

    work()
    work(clock=later(3500))
    result.refresh()
    assert result.status == TaskResultStatus.READY and dt.CALLS == []

    work(clock=later(3700))
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert result.task.run_after == run_after


def test_run_after_in_the_past_runs_now(fake_store):
    result = dt.add.using(run_after=timezone.now() - timedelta(days=1)).enqueue(1, 1)
    work()
    result.refresh()
    assert result.return_value == 2


def test_run_after_must_be_an_aware_datetime(fake_store):
    with pytest.raises(InvalidTask, match="aware"):
        dt.add.using(run_after=datetime(2030, 1, 1))
    with pytest.raises(InvalidTask, match="must be a datetime"):
        dt.add.using(run_after=timedelta(minutes=5))


def test_run_after_beyond_2200_is_refused_before_anything_is_stored(store):
    with pytest.raises(InvalidTask, match="too far ahead"):
        dt.add.using(run_after=datetime(2250, 1, 1, tzinfo=UTC)).enqueue(1, 1)
    assert store.client.keys(f"{store.prefix}:*") == []


@override_settings(USE_TZ=False)
def test_naive_run_after_without_time_zones(fake_store):
    run_after = datetime.now() + timedelta(hours=1)
    result = dt.add.using(run_after=run_after).enqueue(1, 1)
    assert timezone.is_naive(result.enqueued_at)
    work()
    work(clock=later(3700))
    result.refresh()
    assert result.return_value == 2 and timezone.is_naive(result.finished_at)


# -- kinds of tasks ---------------------------------------------------------------------


def test_async_task(store):
    result = dt.async_double.enqueue(21)
    work()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert dt.CALLS == [("async_double", 21)]


def test_takes_context(fake_store):
    result = dt.describe.enqueue()
    worker = work()
    result.refresh()
    assert result.return_value == {
        "attempt": 1,
        "id": result.id,
        "status": "RUNNING",
        "worker_ids": [worker.name],
        "backend": "default",
    }


def test_aenqueue_aget_result_and_arefresh(fake_store):
    result = async_to_sync(dt.add.aenqueue)(4, 5)
    assert result.status == TaskResultStatus.READY
    work()
    assert async_to_sync(dt.add.aget_result)(result.id).return_value == 9
    async_to_sync(result.arefresh)()
    assert result.return_value == 9


def test_one_worker_runs_delayq_jobs_and_django_tasks(fake_store):
    result = dt.add.enqueue(1, 2)
    testtasks.remember.schedule("own")
    work()
    assert testtasks.CALLS == [(("own",), {})]
    assert dt.add.get_result(result.id).return_value == 3


def test_queue_name_is_the_delayq_queue(store):
    result = dt.add.using(queue_name="emails").enqueue(1, 2)
    assert get_job(result.id).queue == "emails"
    work(["default"])
    assert dt.add.get_result(result.id).status == TaskResultStatus.READY
    work(["emails"])
    assert dt.add.get_result(result.id).return_value == 3


def test_any_queue_when_queues_is_empty(fake_store):
    with override_settings(TASKS=tasks_setting(queues=())):
        result = dt.add.using(queue_name="anything").enqueue(1, 2)
        work(["anything"])
        assert dt.add.get_result(result.id).return_value == 3


# -- signals ----------------------------------------------------------------------------


@pytest.fixture
def received():
    events = []

    def receiver(signal_name):
        def record(sender, task_result, **kwargs):
            events.append((signal_name, sender, task_result.status, task_result.attempts))

        return record

    receivers = [
        (task_enqueued, receiver("enqueued")),
        (task_started, receiver("started")),
        (task_finished, receiver("finished")),
    ]
    for signal, func in receivers:
        signal.connect(func)
    yield events
    for signal, func in receivers:
        signal.disconnect(func)


def test_signals_are_sent_with_the_backend_class(fake_store, received):
    dt.add.enqueue(1, 2)
    work()
    assert received == [
        ("enqueued", DelayQBackend, TaskResultStatus.READY, 0),
        ("started", DelayQBackend, TaskResultStatus.RUNNING, 1),
        ("finished", DelayQBackend, TaskResultStatus.SUCCESSFUL, 1),
    ]


def test_signals_of_retries_and_failure(fake_store, received):
    with override_settings(TASKS=tasks_setting(MAX_RETRIES=1)):
        dt.fail.enqueue()
        work()
    assert [(name, status, n) for name, _, status, n in received] == [
        ("enqueued", TaskResultStatus.READY, 0),
        ("started", TaskResultStatus.RUNNING, 1),
        ("started", TaskResultStatus.RUNNING, 2),
        ("finished", TaskResultStatus.FAILED, 2),
    ]


def test_a_worker_that_died_on_the_last_attempt_fails_the_result(store, received):
    from django_delayq.exceptions import LeaseLost

    result = dt.add.enqueue(1, 2)
    # A worker claims it, starts it and dies (no heartbeat, no ack).
    claim = store.claim("default", 1, lease=1, token="crashed#1", instance="crashed")
    store.call(store.mark_op("default", result.id, claim.now + 1))
    assert Worker(["default"], clock=later(5)).parts.recovery.run_pass() == 1
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    [error] = result.errors
    assert error.exception_class is LeaseLost and "lease expired" in error.traceback
    assert received[-1] == ("finished", DelayQBackend, TaskResultStatus.FAILED, 0)


def test_cancelling_the_job_fails_the_result(store, received):
    from django_delayq import cancel
    from django_delayq.exceptions import JobCancelled

    result = dt.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    assert cancel(result.id) is True
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is JobCancelled
    assert [name for name, *_ in received] == ["enqueued", "finished"]


def test_a_failed_result_is_not_rewritten_when_its_job_dies(store, received):
    result = dt.fail.enqueue("kaput")
    work()  # run() records FAILED itself; job_dead must not add a second error
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 1
    assert [name for name, *_ in received].count("finished") == 1


def test_a_failing_receiver_does_not_break_enqueue(fake_store):
    def broken(**kwargs):
        raise RuntimeError("receiver bug")

    task_enqueued.connect(broken)
    try:
        result = dt.add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(broken)
    work()
    assert dt.add.get_result(result.id).return_value == 3


# -- validation -------------------------------------------------------------------------


def test_validate_task_errors(fake_store):
    def local(x):
        return x

    with pytest.raises(InvalidTask, match="module level"):
        dt.task(local)
    # Django's TaskTestCase.test_invalid_priority: its range check, with this backend
    for bad in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match="priority"):
            dt.add.using(priority=bad)
    with pytest.raises(InvalidTask, match="Queue 'other' is not valid"):
        dt.add.using(queue_name="other")
    with pytest.raises(InvalidTask, match="context"):
        dt.task(takes_context=True)(dt.not_a_task)
    bad_queue = override_settings(TASKS=tasks_setting(queues=("default", "bad queue")))
    with bad_queue, pytest.raises(InvalidTask, match="invalid queue name"):
        dt.add.using(queue_name="bad queue")


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((object(),), {}, "Unsupported type"),
        ((datetime.now(UTC),), {}, "Unsupported type"),
        (({1: "a"},), {}, "key 1"),
        ((float("nan"),), {}, "nan"),
        ((), {"x": {"y": float("inf")}}, "inf"),
    ],
)
def test_bad_arguments_fail_at_enqueue(fake_store, args, kwargs, match):
    with pytest.raises(TypeError, match=match):
        dt.echo.enqueue(*args, **kwargs)
    assert fake_store.counts("default", time.time())["pending"] == 0
    assert list(fake_store.client.scan_iter(match=f"{fake_store.prefix}:*:result:*")) == []


# -- configuration ----------------------------------------------------------------------


def test_init_does_no_io(fake_store):
    unreachable = {**settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    with override_settings(DELAYQ=unreachable):
        backend = DelayQBackend("default", {"QUEUES": ["default"], "OPTIONS": {}})
        backend.validate_task(dt.add)
        assert backend.check() == []
        with pytest.raises(DelayQConnectionError):
            dt.add.enqueue(1, 2)


def test_bad_options_are_check_errors_and_refuse_enqueue(fake_store):
    config = tasks_setting(RESULT_TTL=float("inf"), MAX_RETRIES="3", TYPO=1)
    with override_settings(TASKS=config):
        messages = default_task_backend.check()
        errors = [m for m in messages if isinstance(m, Error)]
        assert {m.id for m in errors} == {"delayq.E101"}
        assert len(errors) == 3
        with pytest.raises(ConfigurationError, match="TYPO"):
            dt.add.enqueue(1, 2)


def test_queue_checks(fake_store):
    with override_settings(TASKS=tasks_setting(queues=("default", "emails", "no good"))):
        messages = default_task_backend.check()
    assert [(type(m), m.id) for m in messages] == [
        (Warning, "delayq.W101"),  # emails: not in DELAYQ["QUEUES"]
        (Error, "delayq.E102"),  # "no good" is not a queue name
    ]


def test_results_expire_after_the_ttl(store):
    with override_settings(TASKS=tasks_setting(RESULT_TTL=100)):
        result = dt.add.enqueue(1, 2)
        deferred = dt.add.using(run_after=timezone.now() + timedelta(seconds=1000)).enqueue(1, 2)
        key = store.result_key(result.id)
        assert 99_000 < store.client.pttl(key) <= 100_000
        deferred_ttl = store.client.pttl(store.result_key(deferred.id))
        assert 1_090_000 < deferred_ttl <= 1_100_000  # kept until it runs, and then the TTL
        work()
        assert 99_000 < store.client.pttl(key) <= 100_000
    with override_settings(TASKS=tasks_setting(RESULT_TTL=None)):
        forever = dt.add.enqueue(1, 2)
        assert store.client.pttl(store.result_key(forever.id)) == -1


def test_a_lost_result_is_rebuilt_by_the_worker(fake_store):
    result = dt.add.enqueue(1, 2)
    fake_store.client.delete(fake_store.result_key(result.id))
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()
    work()
    result.refresh()
    assert result.return_value == 3 and result.attempts == 1
    assert result.enqueued_at is not None


def test_an_unreadable_result_is_rebuilt_by_the_worker(fake_store):
    result = dt.add.enqueue(1, 2)
    fake_store.client.set(fake_store.result_key(result.id), b"\xff not json")
    with pytest.raises(ValueError, match="unreadable"):
        result.refresh()
    work()
    result.refresh()
    assert result.return_value == 3 and result.attempts == 1


def test_result_document_format(fake_store):
    result = dt.add.enqueue(1, 2)
    raw = fake_store.client.get(fake_store.result_key(result.id))
    document = json.loads(raw)
    assert document["v"] == 1 and document["status"] == "READY"
    assert document["task"] == "tests.testapp.django_tasks.add"


# -- the internal task is an allow-list -------------------------------------------------


def _spec(**changes):
    return {
        "backend": "default",
        "queue_name": "default",
        "priority": 0,
        "run_after": None,
        **changes,
    }


@pytest.mark.parametrize(
    "path",
    [
        "tests.testapp.django_tasks.not_a_task",  # a plain function
        "os.getcwd",
        "tests.testapp.no_such_module.task",
        "tests.testapp.django_tasks.CALLS",
    ],
)
def test_only_django_tasks_are_run(fake_store, path):
    job = schedule(run_django_task, path, [], {}, _spec())
    work()
    dead = get_job(job.id)
    assert dead.status == "dead"
    assert "InvalidTask" in dead.last_error
    assert dt.CALLS == []
    result = json.loads(fake_store.client.get(fake_store.result_key(job.id)))
    assert result["status"] == "FAILED" and "InvalidTask" in result["errors"][0]["traceback"]


def test_only_tasks_of_a_delayq_backend_alias_are_run(fake_store):
    config = {**tasks_setting(), "other": {"BACKEND": IMMEDIATE}}
    with override_settings(TASKS=config):
        path = "tests.testapp.django_tasks.add"
        job = schedule(run_django_task, path, [1, 2], {}, _spec(backend="other"))
        work()
    assert "not a DelayQBackend" in get_job(job.id).last_error
    assert dt.CALLS == []


def test_internal_task_outside_a_worker(fake_store):
    with pytest.raises(RuntimeError, match="only inside a django-delayq worker"):
        run_django_task("tests.testapp.django_tasks.add", [1, 2], {}, _spec())


def test_every_process_registers_the_internal_task():
    """django.setup() autodiscovers tasks modules (as workers do), among them
    django_delayq.tasks, which registers run_django_task even when no module of the project
    has imported the backend."""
    code = (
        "import sys, django\n"
        "from django_delayq.scheduling.registry import _registry\n"
        f"before = {INTERNAL_TASK!r} in _registry or 'django_delayq.backends' in sys.modules\n"
        "django.setup()\n"
        f"print(before, {INTERNAL_TASK!r} in _registry)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": root}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.django_db(transaction=True)
def test_a_task_beyond_the_horizon_waits_in_the_database_and_is_ready(store):
    from django_delayq.models import OutboxJob

    with delayq(store, HORIZON=60):
        run_after = timezone.now() + timedelta(hours=1)
        result = dt.add.using(run_after=run_after).enqueue(2, 2)
        job = get_job(result.id)
        assert job.waits_in == "database" and job.status == "pending"
        assert OutboxJob.objects.filter(id=result.id).exists()
        assert store.client.zcard(store.key("default", "pending")) == 0
        result.refresh()
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
        # Time passes (without sleeping): the row is relayed and the worker runs it.
        assert relaying.relay_pass(store, "default", now=time.time() + 3600) == 1
        work(clock=later(3700))
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 4


@pytest.mark.django_db(transaction=True)
def test_a_task_beyond_the_horizon_is_announced_once_its_row_commits(store):
    """Its outbox row joins the caller's transaction: job_scheduled waits for the commit,
    and a rollback announces nothing (it was sent at once, for a job that never existed)."""
    from django.db import transaction

    from django_delayq import signals
    from django_delayq.models import OutboxJob

    seen = []

    def receiver(sender, job, **kwargs):
        seen.append(job.id)

    signals.job_scheduled.connect(receiver)
    try:
        with delayq(store, HORIZON=60):
            run_after = timezone.now() + timedelta(hours=1)
            with contextlib.suppress(RuntimeError), transaction.atomic():
                dropped = dt.add.using(run_after=run_after).enqueue(1, 1)
                assert seen == []
                raise RuntimeError("roll back")
            assert not OutboxJob.objects.filter(id=dropped.id).exists() and seen == []
            with transaction.atomic():
                kept = dt.add.using(run_after=run_after).enqueue(2, 2)
                assert seen == []
            assert seen == [kept.id]
    finally:
        signals.job_scheduled.disconnect(receiver)


def test_a_worker_serving_the_queue_draws_no_w101(fake_store):
    """delayq.W101 says workers started without --queues will not run a queue; a worker
    started with --queues naming it runs its checks without that warning (it used to warn
    on every start)."""
    from io import StringIO

    from django.core.management import call_command

    from django_delayq.checks import serving

    with override_settings(TASKS=tasks_setting(queues=("default", "emails"))):
        with serving(["emails"]):
            assert default_task_backend.check() == []
        assert [m.id for m in default_task_backend.check()] == ["delayq.W101"]
        for served, expected in ((["--queues", "default,emails"], ""), ([], "delayq.W101")):
            err = StringIO()
            call_command(
                "delayq_worker",
                "--burst",
                *served,
                skip_checks=False,
                stderr=err,
                stdout=StringIO(),
            )
            assert (expected in err.getvalue()) if expected else "W101" not in err.getvalue()


def test_a_django_task_shows_and_logs_as_itself_once(store, admin_client, caplog):
    """Jobs of Django Tasks are shown under the Task's path (not run_django_task), and a
    final failure logs one line of django-delayq's (beside django.tasks' own)."""
    from django.urls import reverse

    pending = dt.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(2, 3)
    page = admin_client.get(reverse("admin:django_delayq_job_pending")).content.decode()
    assert "tests.<wbr>testapp.<wbr>django_tasks.<wbr>add" in page and "2, 3" in page
    assert "backends.<wbr>run_django_task" not in page  # (the task filter still lists it)
    detail = reverse("admin:django_delayq_job_detail", args=["default", pending.id])
    page = admin_client.get(detail).content.decode()
    assert "tests.testapp.django_tasks.add</span>" in page
    assert "(a Django task, run by django_delayq.backends.run_django_task)" in page
    failing = dt.fail.enqueue("nope")
    with caplog.at_level("DEBUG", logger="django_delayq"):
        work()
    ours = [
        r
        for r in caplog.records
        if r.name.startswith("django_delayq") and failing.id in r.getMessage() and r.levelno >= 30
    ]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert ours[0].levelname == "ERROR"
    assert "tests.testapp.django_tasks.fail failed" in ours[0].getMessage()


# -- priorities (issue 20): Django's tests/tasks priority expectations, on this backend -----
# Django's own tests run unchanged in tests/test_django_upstream.py (loaded from Django's
# sdist at test time); this re-expression stays, as it runs without the sdist.


def test_using_priority_and_chained_using(fake_store):
    """Mirrors Django's tests/tasks/test_tasks.py TaskTestCase.test_using_priority,
    test_chained_using and the accepted edges of test_invalid_priority."""
    assert dt.add.priority == 0
    assert dt.add.using(priority=1).priority == 1
    assert dt.add.priority == 0
    now = timezone.now()
    later = dt.add.using(run_after=now).using(priority=10)
    assert (later.priority, later.run_after) == (10, now)
    for edge in (100, -100, 0):
        assert dt.add.using(priority=edge).priority == edge


def test_enqueue_passes_the_priority_through(store):
    result = dt.add.using(priority=42).enqueue(1, 2)
    assert result.task.priority == 42
    assert get_job(result.id).priority == 42
    assert dt.add.get_result(result.id).task.priority == 42
    plain = dt.add.enqueue(1, 2)
    assert get_job(plain.id).priority == 0


def test_the_worker_claims_higher_django_priorities_first(store):
    low = [dt.echo.using(priority=-50).enqueue(f"low{i}") for i in range(3)]
    high = [dt.echo.using(priority=50).enqueue(f"high{i}") for i in range(3)]
    Worker(["default"], burst=True, concurrency=1).run()
    finished = [dt.echo.get_result(r.id).finished_at for r in high + low]
    assert all(f is not None for f in finished)
    assert max(finished[:3]) <= min(finished[3:])
