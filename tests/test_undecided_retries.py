"""A job scheduled by name from a process that does not import its task (CHECK_NAMES off)
gets the task's own ``max_retries``, settled by the worker that knows the task, before it
runs; a job whose worker died before settling it was never started and costs no attempt.
Fakeredis and the real server."""

from __future__ import annotations

import threading
import time

import pytest

from django_delayq import get_job, schedule, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import Fields, decode_record, encode_record, settle_record, undecided
from django_delayq.scheduling import registry
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings, names_unchecked
from tests.test_admin import text, url

pytestmark = pytest.mark.django_db

NAME = "tests.undecided.once_only"
DEAD = {"dead_max_age": 86400.0, "dead_max_count": 1000, "max_errors": 10}


def peer_recovers(store) -> None:
    """A peer worker recovers the queue's expired leases (two minutes from now)."""
    store.recover(
        "default",
        token="peer~1#r1",
        instance="peer~1",
        default_max_retries=5,
        now=time.time() + 120,
        **DEAD,
    )


@pytest.fixture(autouse=True)
def producer_without_the_tasks():
    """The tasks below are registered by each test after it scheduled by name (as a worker's
    code base would): unregistered again, so the producer of the next test does not know them."""
    yield
    with registry._lock:
        for name in [n for n in registry._registry if n.startswith("tests.undecided.")]:
            del registry._registry[name]


def wait_until(predicate, timeout: float = 10.0):
    """Wait for ``predicate``; its timeout only guards against a hang (what the tests wait for takes
    milliseconds to a second), so it is many times that, for a loaded machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {predicate}")


def test_a_task_of_max_retries_0_scheduled_by_name_runs_once_when_its_worker_dies(
    store, admin_client
):
    """The producer does not know the task (it is registered only after the schedule, as in
    the workers' code base); the worker that runs it is cut off after the start (another
    worker's recovery finds its lease expired): the job goes dead, it does not run again."""
    with names_unchecked(store):
        job = schedule(NAME, 7)
    assert get_job(job.id).max_retries == 5  # DELAYQ["MAX_RETRIES"] until a worker settles it
    runs, seen = [], {}

    @task(name=NAME, max_retries=0)
    def once_only(value):
        runs.append(value)
        running = store.key("default", "running")
        wait_until(lambda: (store.client.zscore(running, job.id) or -1) >= 0)  # marked started
        seen["running"] = get_job(job.id)
        # This worker is cut off: its lease expires and a peer recovers the job.
        peer_recovers(store)

    worker = Worker(["default"], burst=True)
    assert worker.run() == 0
    later = Worker(["default"], burst=True, clock=lambda: time.time() + 300)
    assert later.run() == 0  # a worker finds nothing left to run
    assert runs == [7]  # once: the recovery dead-lettered it
    assert seen["running"].max_retries == 0  # settled by the worker before the task ran
    dead = get_job(job.id)
    assert dead.status == "dead" and dead.max_retries == 0 and dead.attempts == 1
    assert "LeaseLost" in dead.last_error
    page = text(admin_client.get(url("detail", "default", job.id)))
    assert "1 of 1 <" in page and "the first and up to 0 retries" in page


def test_a_task_without_its_own_max_retries_gets_the_workers_setting(store):
    with names_unchecked(store):
        job = schedule("tests.undecided.plain", 1)
    seen = {}

    @task(name="tests.undecided.plain")
    def plain(value):
        seen["job"] = get_job(job.id)

    with more_settings(store, MAX_RETRIES=2):  # the workers' setting, not the producer's
        assert Worker(["default"], burst=True).run() == 0
    assert seen["job"].max_retries == 2


def test_a_worker_that_died_before_settling_costs_no_attempt(store):
    """Claimed (a worker took it) and never settled: recovery hands it back without
    counting an attempt, and a worker that knows the task settles and runs it."""
    with names_unchecked(store):
        job = schedule("tests.undecided.late", 1)
    store.claim("default", 1, lease=1, token="gone~1#1", instance="gone~1")
    (moved,) = store.recover(
        "default",
        token="peer~1#r1",
        instance="peer~1",
        default_max_retries=5,
        now=time.time() + 5,
        **DEAD,
    )
    assert moved.outcome == "refund" and get_job(job.id).attempts == 0
    runs = []

    @task(name="tests.undecided.late", max_retries=0)
    def late(value):
        runs.append(value)

    assert Worker(["default"], burst=True, clock=lambda: time.time() + 10).run() == 0
    assert runs == [1] and get_job(job.id) is None


def test_a_job_whose_worker_was_stopped_while_settling_is_not_run_by_it(store):
    """The settle round trip is waited for: a worker that lost the lease meanwhile (another
    worker holds the job now) does not run it."""
    with names_unchecked(store):
        job = schedule("tests.undecided.stolen", 1)
    runs = []

    @task(name="tests.undecided.stolen", max_retries=0)
    def stolen(value):
        runs.append(value)

    worker = Worker(["default"], burst=True, clock=lambda: time.time() + 200)
    real_settle = worker.store.settle
    gate = threading.Event()

    def settle_after_the_lease_moved(*args, **kwargs):
        if not gate.is_set():  # the first attempt: its lease expired, a peer recovered it
            peer_recovers(store)
            gate.set()
        return real_settle(*args, **kwargs)

    worker.store.settle = settle_after_the_lease_moved
    try:
        worker.run()
    finally:
        del worker.store.settle
    assert gate.is_set() and runs == [1]  # run once, by the second claim, settled then
    assert get_job(job.id) is None


# -- the record's header and settle.lua -------------------------------------------------


def raw_record(store, job_id: str) -> bytes:
    return store.client.hget(store.key("default", "jobs"), job_id)


def test_only_a_producer_that_does_not_know_the_task_leaves_the_policy_undecided(store):
    from django.db import transaction

    from django_delayq.models import OutboxJob
    from tests.testapp import tasks as t

    with names_unchecked(store):
        by_name = schedule("tests.undecided.api", 1)
        explicit = schedule("tests.undecided.api", 1, max_retries=2)
        with transaction.atomic():
            deferred = schedule("tests.undecided.api", 1, on_commit=True)
            row = OutboxJob.objects.get(id=deferred.id)
    known = t.add.schedule(1, 2)
    assert undecided(raw_record(store, by_name.id))
    assert raw_record(store, by_name.id).startswith(b"5iu\n")  # the setting, flag 'u'
    assert not undecided(raw_record(store, explicit.id))
    assert raw_record(store, explicit.id).startswith(b"2i\n")
    assert not undecided(raw_record(store, known.id))
    assert undecided(bytes(row.record)) and bytes(row.record).startswith(b"5iu\n")


def test_settle_decides_once_checks_the_lease_and_marks_the_start(store):
    """A store-level run of a dying worker: claimed, settled with the task's 0, its lease
    then expires (recover with a passed now): dead, not pending."""
    job_id = new_job_id()
    record = encode_record("x.settled", [1], {"a": 2}, "k1", 5, "iu")
    store.schedule("default", job_id, record, key="k1")
    claim = store.claim("default", 1, lease=60, token="w~1#1", instance="w~1")
    running = store.key("default", "running")
    assert store.client.zscore(running, job_id) < 0  # claimed, not started
    lease_until = claim.now + 60
    assert store.settle("default", job_id, "other~1#1", 0, lease_until) is False
    assert raw_record(store, job_id) == record and store.client.zscore(running, job_id) < 0
    assert store.settle("default", job_id, "w~1#1", 0, lease_until) is True
    settled = raw_record(store, job_id)
    assert settled == settle_record(record, 0) and settled.startswith(b"0ik=2:k1\n")
    assert decode_record(settled) == Fields("x.settled", [1], {"a": 2}, "k1", 0, "i")
    assert store.client.zscore(running, job_id) == round(lease_until * 1000)  # started
    assert store.settle("default", job_id, "w~1#1", 3, lease_until) is True  # sent again
    assert raw_record(store, job_id) == settled  # decided already: unchanged
    (moved,) = store.recover(
        "default",
        token="peer~1#r1",
        instance="peer~1",
        default_max_retries=5,
        now=claim.now + 120,
        **DEAD,
    )
    assert moved.outcome == "dead" and moved.attempts == 1
    job = get_job(job_id)
    assert job.status == "dead" and job.max_retries == 0 and job.key == "k1"


def test_an_undecided_record_read_by_an_older_reader_keeps_the_setting():
    """Flag 'u' is a flag letter: a reader that does not know it reads the digits."""
    record = encode_record("x.y", [1], {}, None, 5, "u")
    fields = decode_record(record)
    assert fields.max_retries == 5 and fields.task == "x.y"
    assert settle_record(record, 0) == b"0\nx.y\n1"
    assert settle_record(b'["x.y",1]', 0) == b'["x.y",1]'  # 0.1's format: left alone
    assert not undecided(b'["x.y",1]') and not undecided(b"12ik=1:u\nx\n")
