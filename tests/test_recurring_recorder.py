"""recurring/recorder.py: claims hand their occurrences' durable records to one thread,
which commits them before any of those occurrences runs; records that arrive while a
commit is under way go into the next one; a failed commit still lets the tasks run. And
the records' UPDATE (claims._record_fires), on SQLite and PostgreSQL, in both its forms."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.test import override_settings

from django_delayq.models import ScheduleState
from django_delayq.recurring import claims
from django_delayq.recurring.recorder import Recorder


def test_records_handed_in_during_a_commit_share_the_next_one():
    entered, release = threading.Event(), threading.Event()
    commits: list[dict] = []

    def write(records):
        commits.append(dict(records))
        if len(commits) == 1:
            entered.set()
            release.wait(10)

    recorder = Recorder(write)
    first = recorder.submit({1: (1000, "A" * 26, "running")})
    assert entered.wait(10)
    second = recorder.submit({2: (2000, "B" * 26, "running")})
    third = recorder.submit({2: (1000, "C" * 26, "running"), 3: (3000, "D" * 26, "skipped")})
    assert not first.is_set() and not second.is_set()  # not before their commit
    release.set()
    assert first.wait(10) and second.wait(10) and third.wait(10)
    assert commits == [
        {1: (1000, "A" * 26, "running")},
        # one commit for both, each schedule's latest fire time
        {2: (2000, "B" * 26, "running"), 3: (3000, "D" * 26, "skipped")},
    ]


def test_a_failed_commit_still_lets_the_occurrences_run():
    def write(records):
        raise RuntimeError("the database went away")

    recorder = Recorder(write)
    assert recorder.submit({1: (1000, "A" * 26, "running")}).wait(10)
    assert recorder.submit({1: (2000, "A" * 26, "running")}).wait(10)  # the thread lives on


def test_no_event_is_lost_when_claims_race():
    """Four claiming threads hand in 2,000 batches each while commits run: every event is
    set, and every schedule's latest fire time was written."""
    written: dict[int, int] = {}

    def write(records):
        for hashed, (fire, _, _) in records.items():
            written[hashed] = max(written.get(hashed, 0), fire)

    recorder = Recorder(write)
    events: list[threading.Event] = []
    lock = threading.Lock()

    def claimer(worker: int) -> None:
        for n in range(2000):
            event = recorder.submit({worker: (n, "A" * 26, "running")})
            with lock:
                events.append(event)

    threads = [threading.Thread(target=claimer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(event.wait(10) for event in events)
    assert written == dict.fromkeys(range(4), 1999)


class StatesOn:
    """Routes ScheduleState's reads and writes to one alias."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_write(self, model, **hints):
        return self.alias if model is ScheduleState else None

    db_for_read = db_for_write


@pytest.mark.django_db(databases=["default", "pg"])
@pytest.mark.parametrize("alias", ["default", "pg"])
@pytest.mark.parametrize("form", ["joined", "cased"])
def test_the_records_update_raises_fire_times_and_never_lowers_them(alias, form, monkeypatch):
    """On SQLite and PostgreSQL, the UPDATE as a join with its VALUES (what both use) and as
    a CASE per column (other databases) write the same: a newer fire time, or one where
    none was recorded, becomes the last, with its job and outcome; an older one changes
    nothing; rows without a record are left alone."""
    assert connections[alias].vendor == {"default": "sqlite", "pg": "postgresql"}[alias]
    if form == "cased":  # what a database without UPDATE ... FROM gets
        monkeypatch.setattr(claims, "_joined", claims._cased)
    with override_settings(DATABASE_ROUTERS=[StatesOn(alias)]):
        rows = ScheduleState.objects.using(alias)
        for name, hashed, last in (("a", 11, 5000), ("b", 12, None), ("c", 13, 9000), ("d", 14, 1)):
            rows.create(name=name, name_hash=hashed, digest="x", since_ms=0, last_fire_ms=last)
        claims._record_fires(
            {
                11: (6000, "A" * 26, "running"),  # newer
                12: (7000, "B" * 26, "skipped"),  # none recorded
                13: (8000, "C" * 26, "running"),  # older: stays 9000
            }
        )
        got = {
            r.name: (r.last_fire_ms, r.last_job_id, r.last_outcome, r.last_started_at is not None)
            for r in rows.all()
        }
    assert got == {
        "a": (6000, "A" * 26, "running", True),
        "b": (7000, "B" * 26, "skipped", True),
        "c": (9000, "", "", False),
        "d": (1, "", "", False),
    }


def test_a_runner_s_wait_for_the_commit_is_not_its_task_s_run_time():
    """Executor.prepare waits for the occurrence's event, then takes that moment as the
    attempt's start: the prefetch, sized by the tasks' run times, is not shrunk by commits."""
    import time

    from django_delayq.jobs.record import JobSpec, encode_job
    from django_delayq.worker.execution import Attempt, Executor

    record = encode_job(JobSpec("tests.nowhere.f", [], {}, None, 0, 0)).data
    attempt = Attempt("default", "01KBMXYZ00000000000000000A", "token", record, 1)
    attempt.started = time.monotonic()
    attempt.ready = threading.Event()
    taken = attempt.started
    timer = threading.Timer(0.2, attempt.ready.set)
    timer.start()
    executor = Executor("w", default_max_retries=0, retry_backoff=1.0, retry_backoff_max=1.0)
    executor.prepare(attempt)
    timer.join()
    assert attempt.ready.is_set() and attempt.started - taken >= 0.2
    already = attempt.started
    executor.prepare(attempt)  # decided already: no wait, its start stays
    assert attempt.started == already
