"""``django_delayq.current_job()``: the Job a task runs, read inside the task by a real burst
worker (a runner thread, an async task on its own loop and on the worker's event loop), its
0.3 path ``django_delayq.worker.current_job`` (deprecated, still working), and, for an
occurrence of a recurring schedule, ``Job.schedule`` and ``Job.fire_time``."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_delayq
from django_delayq import current_job, get_job, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.models import ScheduleState
from django_delayq.recurring import hooks
from django_delayq.recurring.ids import name_hash, occurrence_id, parse_occurrence_id
from django_delayq.recurring.reconcile import Reconciler, version_of
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings

SEEN: list[tuple[str, object]] = []
NEW_PATH = "from django_delayq import current_job"


def _old_path_job() -> object:
    """current_job() through 0.3's import path, with the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from django_delayq.worker import current_job as old

        job = old()
    return job, [(w.category, str(w.message)) for w in caught]


@task(name="tests.current_job.sync_reader", max_retries=0)
def sync_reader(tag: str) -> None:
    SEEN.append(("new", current_job()))
    SEEN.append(("old", _old_path_job()))


@task(name="tests.current_job.async_reader", max_retries=0)
async def async_reader(tag: str) -> None:
    SEEN.append(("new", current_job()))
    SEEN.append(("old", _old_path_job()))


@task(name="tests.current_job.occurrence_reader", max_retries=0)
def occurrence_reader() -> None:
    job = current_job()
    assert job is not None
    SEEN.append(("occurrence", (job.id, job.schedule, job.fire_time)))


@pytest.fixture(autouse=True)
def _clear_seen():
    SEEN.clear()
    yield
    SEEN.clear()


def run_burst(**kwargs) -> Worker:
    worker = Worker(["default"], burst=True, **kwargs)
    assert worker.run() == 0
    return worker


def _check_both_paths(job_id: str, task_name: str) -> None:
    assert [kind for kind, _ in SEEN] == ["new", "old"], SEEN
    new = SEEN[0][1]
    old, caught = SEEN[1][1]
    assert new is old  # the same Job, whichever path
    assert new.id == job_id and new.task == task_name
    assert new.queue == "default" and new.attempts == 1 and new.status == "running"
    assert new.schedule is None and new.fire_time is None  # not an occurrence
    assert len(caught) >= 1 and all(c is DeprecationWarning for c, _ in caught), caught
    assert all(NEW_PATH in message for _, message in caught), caught


@pytest.mark.parametrize(
    ("reader", "async_concurrency"),
    [(sync_reader, 0), (async_reader, 0), (async_reader, 5)],
    ids=["sync", "async-on-a-runner-thread", "async-on-the-event-loop"],
)
def test_a_task_reads_its_own_job_by_both_paths(store, reader, async_concurrency):
    job = reader.schedule("x")
    run_burst(async_concurrency=async_concurrency)
    assert get_job(job.id) is None  # it succeeded: neither path raised
    _check_both_paths(job.id, reader.name)


def test_current_job_is_public_and_none_outside_a_job():
    assert "current_job" in django_delayq.__all__
    assert current_job() is None
    sync_reader("direct")  # called directly, not by a worker
    assert SEEN[0] == ("new", None)


def test_the_old_path_warns_naming_the_new_one_and_works():
    with pytest.warns(DeprecationWarning, match=NEW_PATH):
        from django_delayq.worker import current_job as old
    assert old is current_job
    with pytest.warns(DeprecationWarning, match="django_delayq.worker.current_job"):
        import django_delayq.worker

        assert django_delayq.worker.current_job() is None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        django_delayq.worker.nothing  # noqa: B018


@pytest.mark.django_db
def test_an_ordinary_job_costs_no_query_for_its_schedule():
    job = get_job_like(new_job_id())
    with CaptureQueriesContext(connection) as queries:
        assert job.schedule is None and job.fire_time is None
    assert queries.captured_queries == []


def get_job_like(job_id: str):
    from django_delayq.jobs.job import PENDING, make_job
    from django_delayq.jobs.record import Fields

    return make_job(job_id, "default", PENDING, Fields("tests.x.y", [], {}), 0)


@pytest.mark.django_db
def test_an_occurrence_names_its_schedule_from_the_database():
    hooks.forget_known()  # a web process: no reconcile pass ran here
    state = ScheduleState.objects.create(
        name="nightly-report", name_hash=name_hash("nightly-report"), digest="d", since_ms=0
    )
    fire = datetime(2026, 3, 1, 3, 0, tzinfo=UTC)
    job = get_job_like(occurrence_id(state.name, version_of(state), int(fire.timestamp() * 1000)))
    assert job.fire_time == fire
    with CaptureQueriesContext(connection) as queries:
        assert job.schedule == "nightly-report"
        assert job.schedule == "nightly-report"  # kept on the Job: one query
    assert len(queries.captured_queries) == 1
    state.generation = 2  # the schedule changed since: the name hash still finds it
    state.save()
    assert get_job_like(job.id).schedule == "nightly-report"
    state.delete()
    assert get_job_like(job.id).schedule is None


@pytest.mark.django_db(transaction=True)
def test_a_worker_running_an_occurrence_exposes_its_schedule_and_fire_time(real_store):
    start = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    clock = lambda: now  # noqa: E731
    now = start.timestamp()
    spec = {"task": occurrence_reader.name, "every": 10}
    hooks.forget_known()
    try:
        with more_settings(real_store, SCHEDULES={"tick": spec}):
            assert Reconciler(real_store, clock=clock).run_pass().created == 1
            hooks.forget_known()  # the claim and Job.schedule then read the database
            now = start.replace(second=10).timestamp()
            assert Worker(["default"], burst=True, clock=clock, store=real_store).run() == 0
    finally:
        hooks.forget_known()
    assert len(SEEN) == 1, SEEN
    job_id, name, fire_time = SEEN[0][1]
    assert name == "tick" and fire_time == start.replace(second=10)
    assert parse_occurrence_id(job_id)[0] == int(fire_time.timestamp() * 1000)
