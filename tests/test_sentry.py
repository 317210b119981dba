"""The Sentry integration (monitoring/sentry.py, sentry_crons.py) against a local transport
that keeps every envelope (no network): a dead job is one event with the job as context, a
retried failure none by default, recurring occurrences check in, nothing without Sentry.
A real burst worker runs the jobs, over fakeredis and the real Redis (the store fixture)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sentry_sdk
from django.core.management import call_command
from django.test import override_settings
from sentry_sdk.transport import Transport

from django_delayq import current_job, get_job, signals, task
from django_delayq.monitoring import checks as sentry_checks
from django_delayq.monitoring import sentry, sentry_crons
from django_delayq.recurring import hooks
from django_delayq.recurring.reconcile import Reconciler
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.testapp import tasks as t

ROOT = Path(__file__).resolve().parent.parent


@task(name="tests.sentry.flaky", max_retries=1, retry_backoff=0)
def flaky() -> None:
    job = current_job()
    if job is not None and job.attempts == 1:
        raise KeyError("first attempt fails")


@task(name="tests.sentry.tick", max_retries=0)
def tick(fail: bool = False) -> None:
    if fail:
        raise RuntimeError("tick failed")


class Collector(Transport):
    """A transport that keeps the envelopes instead of sending them."""

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self.envelopes: list = []

    def capture_envelope(self, envelope) -> None:
        self.envelopes.append(envelope)

    def items(self, kind: str) -> list[dict]:
        return [
            item.payload.json
            for envelope in self.envelopes
            for item in envelope.items
            if item.type == kind
        ]


@pytest.fixture
def collector():
    """Sentry initialised with a Collector, the default integrations (logging's too) on."""
    transport = Collector()
    # The default integrations (logging's), not the auto-enabled ones (Django's, Redis's), whose
    # patches would stay in this test process.
    sentry_sdk.init(
        transport=transport, default_integrations=True, auto_enabling_integrations=False
    )
    assert sentry.connect()
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)
        sentry._stash.clear()


def run_burst(**kwargs) -> Worker:
    worker = Worker(["default"], burst=True, **kwargs)
    assert worker.run() == 0
    return worker


def flushed(collector: Collector) -> Collector:
    sentry_sdk.flush()
    return collector


def test_a_dead_job_sends_one_event_with_the_job_as_context(store, collector):
    job = t.always_fails.schedule("kaputt")
    run_burst()
    assert get_job(job.id).status == "dead"
    events = flushed(collector).items("event")
    assert len(events) == 1, events  # not the worker's ERROR log line as a second one
    event = events[0]
    (exception,) = event["exception"]["values"]
    assert exception["type"] == "ValueError" and exception["value"] == "kaputt"
    assert exception["mechanism"] == {"type": "django_delayq", "handled": False}
    frames = [frame["function"] for frame in exception["stacktrace"]["frames"]]
    assert frames[-1] == "always_fails"
    context = event["contexts"]["delayq"]
    assert context["job_id"] == job.id and context["task"] == t.always_fails.name
    assert context["queue"] == "default" and context["attempt"] == 3
    assert context["max_retries"] == 2 and context["final"] is True
    assert context["schedule"] is None and context["batch"] is None
    assert "args" not in context  # send_default_pii is off
    assert event["tags"]["delayq.task"] == t.always_fails.name
    assert event["transaction"] == t.always_fails.name and event["level"] == "error"
    assert sentry._stash == {}


@task(name="tests.sentry.async_fails", max_retries=0)
async def async_fails() -> None:
    raise LookupError("async kaputt")


def test_a_dead_async_job_on_the_event_loop_sends_one_event(store, collector):
    job = async_fails.schedule()
    run_burst(async_concurrency=2)
    assert get_job(job.id).status == "dead"
    (event,) = flushed(collector).items("event")
    assert event["exception"]["values"][0]["value"] == "async kaputt"
    assert event["contexts"]["delayq"]["job_id"] == job.id


def test_retried_failures_send_nothing_by_default_and_every_one_with_all(store, collector):
    flaky.schedule()
    run_burst()
    assert flushed(collector).items("event") == []
    with more_settings(store, SENTRY_FAILURES="all"):
        job = flaky.schedule()
        run_burst()
    (event,) = flushed(collector).items("event")
    assert event["level"] == "warning" and event["exception"]["values"][0]["type"] == "KeyError"
    context = event["contexts"]["delayq"]
    assert context["job_id"] == job.id and context["final"] is False and context["attempt"] == 1
    assert "batch" not in context  # an HGET only on the dead path


def test_sentry_failures_none_sends_nothing_and_keeps_the_log_line(store, collector):
    with more_settings(store, SENTRY_FAILURES=None):
        t.always_fails.schedule("quiet")
        run_burst()
    events = flushed(collector).items("event")
    # The logging integration's event of the worker's ERROR line, as before this integration.
    assert [e["logger"] for e in events] == ["django_delayq.worker"], events


def test_a_lease_lost_on_the_last_attempt_sends_a_message(store, collector):
    job = t.remember.schedule(1, max_retries=0)
    claim = store.claim("default", 1, lease=0.5, token="ghost~1#1", instance="ghost~1")
    store.call(store.mark_op("default", job.id, claim.now + 0.5))
    worker = Worker(["default"], burst=True, clock=lambda: time.time() + 1)
    assert worker.parts.recovery.run_pass() == 1
    assert get_job(job.id).status == "dead"
    (event,) = flushed(collector).items("event")
    assert "exception" not in event and event["level"] == "error"
    assert event["logentry"]["params"][0] == t.remember.name
    assert "ghost" in event["logentry"]["params"][1]
    assert event["fingerprint"] == ["django-delayq", "dead", t.remember.name, "LeaseLost"]
    assert event["contexts"]["delayq"]["job_id"] == job.id


def test_a_corrupt_record_sends_one_message_and_not_the_log_line(store, collector):
    bad = t.remember.schedule("bad")
    store.client.hset(store.key("default", "jobs"), bad.id, b"\xff not json")
    run_burst()
    assert get_job(bad.id).status == "dead"
    (event,) = flushed(collector).items("event")
    assert "exception" not in event and "CorruptJob" in event["logentry"]["params"][1]
    assert event["contexts"]["delayq"]["job_id"] == bad.id
    assert event["fingerprint"][-1] == "django_delayq.exceptions.CorruptJob"


def test_a_timed_out_death_is_a_message_with_the_runner_threads_stack(store, collector):
    gate_name = f"sentry-timeout-{uuid.uuid4().hex}"
    try:
        job = t.always_hangs.schedule(gate_name)
        run_burst(concurrency=1)
    finally:
        t.gate(gate_name).set()
    assert get_job(job.id).status == "dead"
    events = flushed(collector).items("event")
    # Besides the death, the worker's own ERROR about its hung runner thread (not a job's).
    (event,) = [e for e in events if "delayq" in e.get("contexts", {})]
    others = [e["logentry"]["message"] for e in events if e is not event]
    assert others and not set(others) & set(sentry.DEATH_LINES), others
    assert event["fingerprint"] == ["django-delayq", "dead", t.always_hangs.name, "TimeoutError"]
    context = event["contexts"]["delayq"]
    assert context["attempt"] == 2 and "Stack of the runner thread" in context["traceback"]


def test_nothing_is_sent_while_sentry_is_not_initialised(store, collector):
    sentry_sdk.get_global_scope().set_client(None)  # connected, but no active client
    assert sentry.sdk() is None
    t.always_fails.schedule("unseen")
    run_burst()
    assert collector.envelopes == [] and sentry._stash == {}


def test_nothing_is_imported_or_hooked_without_sentry_sdk():
    """A process where sentry_sdk cannot be imported loads none of the integration."""
    code = (
        "import sys; sys.modules['sentry_sdk'] = None\n"
        "import django; django.setup()\n"
        "from django_delayq import signals\n"
        "hooked = [f.__module__ for hooks in signals._HOOKS.values() for f, _ in hooks]\n"
        "receivers = [str(r[0][0]) for r in signals.job_dead.receivers]\n"
        "assert not any('sentry' in m for m in hooked + receivers), (hooked, receivers)\n"
        "assert 'django_delayq.monitoring.sentry' not in sys.modules\n"
        "print('ok')\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.django_db(transaction=True)
def test_an_occurrence_checks_in_progress_then_ok_or_error(store, collector):
    start = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    now = start.timestamp()
    schedules = {
        "Nightly.Tick": {"task": tick.name, "every": 10},
        "failing-tick": {"task": tick.name, "cron": "* * * * *", "kwargs": {"fail": True},
                         "tz": "Europe/Berlin"},
        "unmonitored": {"task": tick.name, "every": 10},
    }  # fmt: skip
    crons = {"Nightly.Tick": {"checkin_margin": 2}, "failing-tick": True}
    hooks.forget_known()
    try:
        with more_settings(store, SCHEDULES=schedules, SENTRY_CRONS=crons):
            assert Reconciler(store, clock=lambda: now).run_pass().created == 3
            now = start.replace(minute=1, second=0).timestamp()
            run_burst(clock=lambda: now, store=store)
    finally:
        hooks.forget_known()
    checkins = flushed(collector).items("check_in")
    by_slug: dict[str, list] = {}
    for checkin in checkins:
        by_slug.setdefault(checkin["monitor_slug"], []).append(checkin)
    assert set(by_slug) == {"nightly-tick", "failing-tick"}, by_slug
    runs: dict[str, list] = {}  # check_in_id -> statuses, in the order sent
    for checkin in checkins:
        runs.setdefault(checkin["check_in_id"], []).append(checkin["status"])
    ok = by_slug["nightly-tick"]
    assert ok and all(runs[c["check_in_id"]] == ["in_progress", "ok"] for c in ok), runs
    assert all(c["duration"] >= 0 for c in ok if c["status"] == "ok")
    assert ok[0]["monitor_config"] == {
        "schedule": {"type": "interval", "value": 1, "unit": "minute"},
        "checkin_margin": 2,
    }
    failed = by_slug["failing-tick"]
    assert len(failed) == 2 and runs[failed[0]["check_in_id"]] == ["in_progress", "error"]
    assert failed[0]["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "* * * * *"},
        "timezone": "Europe/Berlin",
    }
    (event,) = [e for e in collector.items("event") if "exception" in e]  # its death
    assert event["contexts"]["delayq"]["schedule"] == "failing-tick"
    assert event["tags"]["delayq.schedule"] == "failing-tick"


@pytest.mark.django_db(transaction=True)
def test_the_recovery_closes_a_dead_workers_checkin_with_error(store, collector):
    start = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    now = start.timestamp()
    hooks.forget_known()
    try:
        with more_settings(store, SCHEDULES={"tick": {"task": tick.name, "every": 10}},
                           SENTRY_CRONS=["tick"]):  # fmt: skip
            assert Reconciler(store, clock=lambda: now).run_pass().created == 1
            claim = store.claim(
                "default", 1, lease=0.5, token="ghost~1#1", instance="ghost~1",
                now=start.replace(second=10).timestamp(),
            )  # fmt: skip
            (claimed,) = claim.jobs
            store.call(store.mark_op("default", claimed.id, claim.now + 0.5))
            worker = Worker(["default"], burst=True, clock=lambda: claim.now + 1)
            assert worker.parts.recovery.run_pass() == 1
    finally:
        hooks.forget_known()
    (checkin,) = flushed(collector).items("check_in")
    assert checkin["status"] == "error" and checkin["monitor_slug"] == "tick"
    assert checkin["check_in_id"] == sentry_crons.checkin_id(claimed.id, 1)  # the lost one


def test_no_checkin_without_sentry_crons(store, collector):
    job_like = type("J", (), {"id": "x", "attempts": 1})()
    sentry_crons.checkin(job_like, "in_progress")  # SENTRY_CRONS is False: returns at once
    assert flushed(collector).items("check_in") == []


def test_monitor_config_and_slugs():
    assert sentry_crons.interval(10_000) == (1, "minute")  # rounded up: Sentry's least unit
    assert sentry_crons.interval(90_000) == (2, "minute")
    assert sentry_crons.interval(7_200_000) == (2, "hour")
    assert sentry_crons.interval(2 * 86_400_000) == (2, "day")
    assert sentry_crons.slug_of("Shop:Nightly.Report") == "shop-nightly-report"
    assert len(sentry_crons.slug_of("x" * 100)) == 50
    assert sentry_crons.selected(["a"], "a") == {} and sentry_crons.selected(["a"], "b") is None
    assert sentry_crons.selected({"a": {"slug": "s"}}, "a") == {"slug": "s"}
    assert sentry_crons.selected(True, "z") == {} and sentry_crons.selected(False, "z") is None
    assert sentry_crons.checkin_id("J", 1) == sentry_crons.checkin_id("J", 1)
    assert sentry_crons.checkin_id("J", 1) != sentry_crons.checkin_id("J", 2)


@pytest.mark.parametrize(
    ("delayq", "fragment"),
    [
        ({"SENTRY_FAILURES": "final"}, "'dead', 'all' or None, got 'final'"),
        ({"SENTRY_CRONS": "yes"}, "True, False, a list of schedule names or a dict"),
        ({"SENTRY_CRONS": [3]}, "3 is not a schedule name"),
        ({"SENTRY_CRONS": {"a": {"margin": 5}}}, "'a': unknown option 'margin'"),
        ({"SENTRY_CRONS": {"a": {"max_runtime": 0}}}, "max_runtime must be a whole number"),
        ({"SENTRY_CRONS": {"a": {"slug": "No Slug"}}}, "slug must be 1-50 lowercase"),
        ({"SENTRY_CRONS": {"a": 5}}, "give a dict of options, True or None"),
    ],
)
def test_e014_names_the_bad_value(delayq, fragment):
    with override_settings(DELAYQ=delayq):
        errors = sentry_checks.check_sentry()
    assert [e.id for e in errors] == ["delayq.E014"], errors
    assert fragment in errors[0].msg


def test_w008_two_schedules_checking_in_to_one_monitor(collector):
    every = {"task": "tests.testapp.tasks.add", "every": 60}
    schedules = {"Nightly.Report": every, "nightly-report": every, "other": every}
    with override_settings(DELAYQ={"SCHEDULES": schedules, "SENTRY_CRONS": True}):
        (warning,) = sentry_checks.check_sentry()
    assert warning.id == "delayq.W008"
    assert "schedules 'Nightly.Report', 'nightly-report' would check in" in warning.msg
    assert "one Sentry monitor, 'nightly-report'" in warning.msg
    own = {"Nightly.Report": {"slug": "nightly-a"}, "nightly-report": True}
    with override_settings(DELAYQ={"SCHEDULES": schedules, "SENTRY_CRONS": own}):
        assert sentry_checks.check_sentry() == []
    same = {"a": {"slug": "same"}, "b": {"slug": "same"}}
    with override_settings(DELAYQ={"SENTRY_CRONS": same}):
        (warning,) = sentry_checks.check_sentry()
    assert warning.id == "delayq.W008" and "'a', 'b'" in warning.msg
    # Names with nothing of a slug in them fall back alike; a list names them too.
    clashes = sentry_crons.slug_clashes(["Ä report", "report", "ÄÖ", "Ü"], {})
    assert clashes == [("report", ["report", "Ä report"]), ("schedule", ["ÄÖ", "Ü"])]


def test_w007_crons_without_sentry_and_silence_with_it(collector):
    with override_settings(DELAYQ={"SENTRY_CRONS": True}):
        assert sentry_checks.check_sentry() == []
        sentry_sdk.get_global_scope().set_client(None)
        (warning,) = sentry_checks.check_sentry()
    assert warning.id == "delayq.W007" and "not initialised" in warning.msg
    with override_settings(DELAYQ={}):
        assert sentry_checks.check_sentry() == []  # the defaults are valid
        call_command("check")  # registered with the other checks


def test_hooks_are_connected_once(collector):
    assert sentry.connect()
    hooked = [f for f, _ in signals._HOOKS[signals.job_failed] if f is sentry.on_failed]
    assert len(hooked) == 1


def test_a_django_tasks_job_is_shown_under_the_tasks_path():
    from django_delayq.django_tasks.runner import DJANGO_TASK_RUNNER
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.job import RUNNING, make_job
    from django_delayq.jobs.record import Fields

    call = ["shop.tasks.send_invoice", [42], {"copy": True}, {"priority": 0}]
    job = make_job(new_job_id(), "default", RUNNING, Fields(DJANGO_TASK_RUNNER, call, {}), 0)
    context = sentry.job_context(job, final=False, pii=True)
    assert context["task"] == "shop.tasks.send_invoice"
    assert context["args"] == [42] and context["kwargs"] == {"copy": True}
    assert "args" not in sentry.job_context(job, final=False, pii=False)
