"""The loop of a worker's background duties (worker/duties.py): the pause after a step and
after a failure, the way failures are logged, a stop seen at once; and each duty's own
pauses (heartbeat, recovery, presence, the outbox relay, the recurring passes), which the
duties kept when they moved onto the one loop."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from unittest import mock

import pytest
from django.db import DatabaseError, OperationalError

from django_delayq import get_job
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.exceptions import DelayQError
from django_delayq.outbox import relay as relaying
from django_delayq.recurring import passes
from django_delayq.worker.duties import BACKOFF_MAX, Backoff, DutyLoop, duty_thread
from django_delayq.worker.maintenance import Heartbeat, Recovery
from django_delayq.worker.presence import Presence
from tests.testapp import tasks as t


class Scripted:
    """A duty whose steps raise the errors in ``script`` (None: a step that works)."""

    name = "scripted"
    what = "scripted duty"
    log = logging.getLogger("django_delayq.worker")
    first = 0.0

    def __init__(self, *script: Exception | None) -> None:
        self.script = list(script)
        self.steps = 0
        self.retried: list[tuple[Exception, float]] = []

    def step(self) -> float:
        self.steps += 1
        error = self.script.pop(0) if self.script else None
        if error is not None:
            raise error
        return 7.0

    def retry_in(self, exc: Exception, backoff: float) -> float:
        self.retried.append((exc, backoff))
        return 3.0


def records(caplog, name: str = "django_delayq.worker") -> list[tuple[int, str, bool]]:
    return [
        (r.levelno, r.getMessage(), r.exc_info is not None)
        for r in caplog.records
        if r.name == name
    ]


def test_a_step_that_fails_is_tried_again_after_the_duty_s_pause_and_never_ends_the_loop():
    boom = RuntimeError("boom")
    duty = Scripted(boom, boom, None)
    loop = DutyLoop(duty, threading.Event())
    assert loop.turn() == 3.0 and loop.turn() == 3.0  # retry_in's pause
    assert loop.turn() == 7.0  # step's own pause
    assert [exc for exc, _ in duty.retried] == [boom, boom]
    first, second = (backoff for _, backoff in duty.retried)
    assert 0.05 <= first <= 0.1 and 0.1 <= second <= 0.2  # the backoff doubles, with jitter
    assert not loop.backoff.failing


def test_a_failure_is_logged_once_with_its_traceback_then_quieter_then_its_end(caplog):
    caplog.set_level(logging.DEBUG, logger="django_delayq")
    loop = DutyLoop(
        Scripted(RuntimeError("boom"), RuntimeError("boom 2"), KeyError("k")), threading.Event()
    )
    for _ in range(4):
        loop.turn()
    (first, repeat, other, back) = records(caplog)
    assert first[0] == logging.WARNING and first[2]  # the traceback of a bug
    assert first[1].startswith("scripted duty: failed (RuntimeError: boom); trying again in 3")
    assert repeat[0] == logging.DEBUG and not repeat[2]  # the same error again: quieter
    assert other[0] == logging.WARNING and "KeyError" in other[1]  # another error: warned
    assert back == (logging.WARNING, "scripted duty: working again (after 3 failed tries)", False)


def test_an_outage_is_logged_without_a_traceback_and_redis_coming_back_is_said(caplog):
    caplog.set_level(logging.DEBUG, logger="django_delayq")
    outage = Backoff("heartbeat")
    pauses = [outage.failed(DelayQConnectionError("refused")) for _ in range(8)]
    outage.ok()
    assert all(p <= BACKOFF_MAX for p in pauses) and pauses[-1] >= BACKOFF_MAX / 2
    logged = records(caplog)
    assert logged[0][:2] == (
        logging.WARNING,
        f"heartbeat: Redis unreachable or failing (refused); trying again in {pauses[0]:.2g} s",
    )
    assert not logged[0][2] and {level for level, _, _ in logged[1:-1]} == {logging.DEBUG}
    assert logged[-1] == (logging.WARNING, "heartbeat: Redis is back (after 8 failed tries)", False)
    database = Backoff("relay")
    database.failed(OperationalError("no such table"))
    line = records(caplog)[-1][1]
    assert "the database unreachable or failing (no such table; has migrate run?)" in line


def test_a_stop_ends_the_loop_during_a_pause_and_before_a_first_step():
    duty = Scripted()
    duty.first = 3600.0
    stopped = threading.Event()
    thread = duty_thread(duty, stopped)
    assert thread.name == "delayq-scripted" and thread.daemon
    thread.start()
    stopped.set()
    thread.join(10)
    assert not thread.is_alive() and duty.steps == 0
    duty.first = 0.0  # a step at once, then a pause of 7 s cut short by the stop
    thread = duty_thread(duty, stopped := threading.Event())
    thread.start()
    deadline = time.monotonic() + 10
    while duty.steps == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    stopped.set()
    thread.join(10)
    assert not thread.is_alive() and duty.steps == 1


# -- each duty's pauses ---------------------------------------------------------------------


def test_heartbeat_waits_a_beat_first_and_backs_off_at_most_a_beat(fake_store):
    heartbeat = Heartbeat(fake_store, 30.0, list, lambda: None)
    assert heartbeat.first == heartbeat.interval == 10.0
    loop = DutyLoop(heartbeat, threading.Event())
    assert loop.turn() == 10.0 and heartbeat.beats == 1
    assert heartbeat.retry_in(DelayQError("x"), 4.0) == 4.0
    assert Heartbeat(fake_store, 0.75, list, lambda: None).retry_in(DelayQError("x"), 4.0) == 0.25


def test_recovery_runs_at_once_and_backs_off_whatever_its_interval(fake_store):
    options = {"dead_max_age": 3600.0, "dead_max_count": 100, "max_errors": 5}
    recovery = Recovery(
        fake_store, ["default"], "w~1", options, 3, threading.Event(), lambda: None, every=0.25
    )
    assert recovery.first == 0.0 and DutyLoop(recovery, threading.Event()).turn() == 0.25
    assert recovery.passes == 1 and recovery.retry_in(DelayQError("x"), 4.0) == 4.0


def test_presence_beats_at_once_and_backs_off_at_most_a_beat(fake_store):
    from django_delayq.worker.dispatch import Worker

    presence = Worker(["default"], store=fake_store).parts.presence
    assert presence.first == 0.0 and DutyLoop(presence, threading.Event()).turn() == presence.every
    assert presence.beats == 1 and presence.ok
    assert presence.retry_in(DelayQError("x"), 2 * presence.every) == presence.every
    assert isinstance(presence.new_thread(), threading.Thread)
    assert presence.thread is not None and presence.thread.name == "delayq-presence"
    assert Presence.name == "presence"


def test_the_relay_turns_every_second_failing_or_not_and_logs_under_outbox(fake_store, caplog):
    relay = relaying.Relay(fake_store, threading.Event())
    assert relay.first == 0.0 and relay.log.name == "django_delayq.outbox"
    loop = DutyLoop(relay, threading.Event())
    with mock.patch.object(relay, "turn", side_effect=OperationalError("database down")):
        assert loop.turn() == relaying.RELAY_EVERY and loop.turn() == relaying.RELAY_EVERY
    with mock.patch.object(relay, "turn", return_value=0):
        assert loop.turn() == relaying.RELAY_EVERY
    messages = [m for _, m, _ in records(caplog, "django_delayq.outbox")]
    assert messages[0].startswith(
        "outbox relay: the database unreachable or failing (database down; has migrate run?)"
    )
    assert messages[-1] == "outbox relay: working again (after 2 failed tries)"


def test_the_recurring_passes_wait_longer_after_a_database_error(fake_store, caplog):
    from django_delayq.recurring.reconcile import Reconciler

    duty = passes.duty(fake_store, None)
    duty.reconciler = Reconciler(fake_store, interval=2.0)
    assert duty.first == 0.0 and duty.log.name == "django_delayq.recurring"
    loop = DutyLoop(duty, threading.Event())
    with mock.patch.object(passes, "fingerprint", side_effect=DatabaseError("no table")):
        assert loop.turn() == passes.DATABASE_RETRY + 2.0
    with mock.patch.object(duty, "run_once", side_effect=DelayQError("Redis down")):
        assert loop.turn() == 2.0  # another failure: the next look as usual
    with mock.patch.object(duty, "run_once", return_value=False):
        assert loop.turn() == 2.0
    assert [level for level, _, _ in records(caplog, "django_delayq.recurring")] == [
        logging.WARNING
    ] * 3


# -- in a worker ----------------------------------------------------------------------------


@pytest.mark.parametrize("error", [RuntimeError("a bug"), DelayQError("refused")])
def test_a_worker_s_heartbeat_goes_on_after_any_error(store, error):
    """A heartbeat thread used to end at the first error that was not a DelayQError: every
    lease it held then expired, and its jobs ran twice."""
    from django_delayq.worker.dispatch import Worker

    real_extend, calls = store.extend, []

    def extend(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise error
        return real_extend(*args, **kwargs)

    name = f"beats-{uuid.uuid4().hex}"  # a gate of its own
    job = t.wait_for_gate.schedule(name)
    with mock.patch.object(delayq_settings, "VISIBILITY_TIMEOUT", 0.6):  # a beat every 0.2 s
        worker = Worker(["default"], store=store)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    with mock.patch.object(store, "extend", extend):
        thread.start()
        deadline = time.monotonic() + 30
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        t.gate(name).set()
        worker.request_stop()
        thread.join(30)
    assert len(calls) >= 3 and codes == [0]  # beats after the failed one
    assert worker.processed == 1 and worker.failed == 0 and get_job(job.id) is None
