"""The loop of a worker's background duties (worker/duties.py): the pause after a step and
after a failure, the way failures are logged, a stop seen at once; and each duty's own
pauses (heartbeat, recovery, presence, the outbox relay, the recurring passes), which the
duties kept when they moved onto the one loop."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import uuid
from functools import partial
from unittest import mock

import pytest
import redis
from django.core.management import call_command
from django.db import DatabaseError, OperationalError
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_delayq import get_job
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.exceptions import DelayQError
from django_delayq.outbox import relay as relaying
from django_delayq.recurring import passes
from django_delayq.storage.store import Store
from django_delayq.worker import duties
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.duties import (
    BACKOFF_MAX,
    STILL_EVERY,
    Backoff,
    DutyLoop,
    Outage,
    duty_thread,
)
from django_delayq.worker.maintenance import Heartbeat, Recovery
from django_delayq.worker.presence import Presence
from tests.conftest import more_settings
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
    assert not logged[0][2] and {level for level, _, _ in logged[1:-2]} == {logging.DEBUG}
    assert logged[-2][0] == logging.WARNING and not logged[-2][2]
    assert re.fullmatch(r"heartbeat: Redis reachable again after \d+ s", logged[-2][1])
    assert logged[-1] == (logging.DEBUG, "heartbeat: working again (after 8 failed tries)", False)
    database = Backoff("relay")
    database.failed(OperationalError("no such table"))
    line = records(caplog)[-1][1]
    assert "the database unreachable or failing (no such table; has migrate run?)" in line


def test_an_outage_says_every_few_seconds_that_it_is_still_retrying_where_and_for_how_long(
    caplog,
):
    """Issue 33: with Redis down a worker logged one warning, then nothing (repeats are
    DEBUG) until Redis came back, 97 s later: it looked hung. Its threads' backoffs share
    one Outage, which says every STILL_EVERY seconds, once for all of them, that it still
    retries, where and for how long; and once that Redis is back."""
    caplog.set_level(logging.DEBUG, logger="django_delayq")
    now = [100.0]
    outage = Outage("127.0.0.1:1/3", clock=lambda: now[0])
    dispatcher = Backoff("dispatcher", outage=outage)
    heartbeat = Backoff("heartbeat", outage=outage)
    for second in range(24):  # both fail once a second, 0 to 23 s into the outage
        now[0] = 100.0 + second
        dispatcher.failed(DelayQConnectionError("refused"))
        heartbeat.failed(DelayQConnectionError("refused"))
    assert STILL_EVERY == 5.0 and outage.down_for() == 23.0
    still = [message for level, message, _ in records(caplog) if level == logging.INFO]
    assert still == [
        f"Redis at 127.0.0.1:1/3 unreachable or failing for {seconds} s, still retrying "
        "(dispatcher, heartbeat waiting)"
        for seconds in (5, 10, 15, 20)
    ]
    caplog.clear()
    now[0] = 136.0
    heartbeat.ok()
    dispatcher.ok()
    assert records(caplog) == [
        (logging.WARNING, "heartbeat: Redis at 127.0.0.1:1/3 reachable again after 36 s", False),
        (logging.DEBUG, "heartbeat: working again (after 24 failed tries)", False),
        (logging.DEBUG, "dispatcher: working again (after 24 failed tries)", False),
    ]
    assert outage.down_for() == 0.0 and not outage.waiting


def test_an_outage_s_line_comes_once_a_period_however_the_tries_fall(caplog):
    """Tries wider apart than STILL_EVERY (a backoff's pause, up to 5 s plus a blocked
    connect) each say it; tries closer together say it once a period; a failure that is
    not Redis's (the database's) says nothing of Redis, nor does its end."""
    caplog.set_level(logging.INFO, logger="django_delayq")
    now = [0.0]
    outage = Outage("db.internal:6380/0", clock=lambda: now[0])
    relay = Backoff("relay", outage=outage)
    for second in (0.0, 4.9, 12.0, 14.0, 15.0, 15.5, 29.0):
        now[0] = second
        relay.failed(DelayQConnectionError("timeout"))
    still = [m for level, m, _ in records(caplog) if level == logging.INFO]
    assert [int(re.search(r"for (\d+) s", m)[1]) for m in still] == [12, 15, 29]
    now[0] = 30.0
    relay.ok()
    caplog.clear()
    relay.failed(OperationalError("no such table"))  # the database: no Redis outage
    now[0] = 60.0
    relay.failed(OperationalError("no such table"))
    relay.ok()
    assert outage.since is None and [m for _, m, _ in records(caplog)][-1] == (
        "relay: working again (after 2 failed tries)"
    )
    assert not any("Redis" in m for _, m, _ in records(caplog))


def unreachable(url: str = "redis://:hunter2@127.0.0.1:1/3") -> redis.Redis:
    """A client of a closed port of this host that tries once a call (redis-py's default
    retries ten times with backoff: 4 s a call)."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))


def test_an_outage_names_its_redis_by_address_never_by_password():
    """What the lines say of "where": host:port/db, a unix socket, Sentinel's service; no
    password, whichever way the URL gave it."""
    from redis.sentinel import Sentinel

    for url, where in [
        ("redis://:hunter2@10.0.0.7:6380/4", "10.0.0.7:6380/4"),
        ("redis://user:hunter2@cache.internal/0", "cache.internal:6379/0"),
        ("redis://127.0.0.1:6379/2?password=hunter2", "127.0.0.1:6379/2"),
        ("unix:///run/redis.sock?db=5&password=hunter2", "unix:/run/redis.sock/5"),
    ]:
        assert Store(redis.Redis.from_url(url)).address() == where
    primary = Sentinel([("127.0.0.1", 1)]).master_for("shop", password="hunter2", db=1)
    assert Store(primary).address() == "Sentinel's 'shop'/1"


@pytest.mark.slow  # each try is real: the transport re-sends for 1.5 s
def test_a_worker_that_cannot_reach_redis_says_so_every_few_seconds_of_its_clock(caplog):
    """A worker started with Redis down waits in its layout check: it says at first what is
    wrong, then at each try STILL_EVERY seconds or more after the last line (here one try
    every 10 s of its outage's clock) where it still retries and for how long, with the
    host, port and database, never the password."""
    caplog.set_level(logging.INFO, logger="django_delayq")
    worker = Worker(["default"], store=Store(unreachable()))
    ticks = itertools.count(0.0, 10.0)

    def clock() -> float:  # ten seconds a try; at 30 s, a stop
        now = next(ticks)
        if now == 30.0:
            worker.request_stop()
        return now

    worker.outage.clock = clock
    with mock.patch.object(duties, "BACKOFF_MAX", 0.001):  # the real pauses: 1 ms
        assert worker.run() == 0  # asked to stop while it waited
    logged = records(caplog)
    assert logged[0][0] == logging.WARNING and logged[0][1].startswith(
        "layout check: Redis unreachable or failing (Redis is unreachable"
    )
    still = [m for level, m, _ in logged if level == logging.INFO and "still" in m]
    assert still == [
        f"Redis at 127.0.0.1:1/3 unreachable or failing for {seconds} s, still retrying "
        "(layout check waiting)"
        for seconds in (10, 20, 30)
    ]
    assert "hunter2" not in caplog.text


@pytest.mark.slow  # as above: 6 tries of 1.5 s
def test_delayq_worker_s_still_retrying_lines_follow_its_verbosity(real_store, caplog):
    """The lines are INFO: ``-v 1`` (the default) shows them, ``-v 0`` only the warnings (the
    first failure, Redis back); ``--burst`` still gives up after 10 s of its clock."""
    caplog.set_level(logging.NOTSET)
    level = logging.getLogger("django_delayq").level
    shown = {}
    for verbosity in (0, 1):
        caplog.clear()
        fake = itertools.count(0.0, 6.0).__next__  # a try 12 s after the last
        clocked = mock.patch("django_delayq.worker.dispatch.Outage", partial(Outage, clock=fake))
        client = mock.patch("django_delayq.storage.connection.make_client", unreachable)
        try:
            with (
                more_settings(real_store, REDIS_URL="redis://:hunter2@127.0.0.1:1/3"),
                clocked,
                client,
                mock.patch.object(duties, "BACKOFF_MAX", 0.001),
                pytest.raises(SystemExit) as exited,
            ):
                call_command("delayq_worker", "--burst", "--force", verbosity=verbosity)
        finally:
            logging.getLogger("django_delayq").setLevel(level)
        assert exited.value.code == 2
        messages = [r.getMessage() for r in caplog.records if r.name.startswith("django_delayq")]
        assert messages[-1].startswith("--burst: Redis unreachable or failing for 10 s (Redis")
        assert messages[-1].endswith("giving up") and "hunter2" not in caplog.text
        shown[verbosity] = [m for m in messages if "still retrying" in m]
    assert shown == {
        0: [],
        1: [
            "Redis at 127.0.0.1:1/3 unreachable or failing for 12 s, still retrying "
            "(layout check waiting)"
        ],
    }


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
