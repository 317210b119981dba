"""schedule()'s Plan is made once per task and options (scheduling/plan.py's cached_plan),
and made again when the settings change; ``at=`` and tasks given by name are planned on
each call."""

from __future__ import annotations

from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from django_delayq.scheduling.plan import cached_plan
from tests.testapp import tasks as t


def test_the_same_task_and_options_share_one_plan():
    plan = cached_plan(t.add, {"delay": 5, "queue": "default"})
    assert cached_plan(t.add, {"queue": "default", "delay": 5}) is plan
    assert cached_plan(t.add, {"delay": 6, "queue": "default"}) is not plan
    assert cached_plan(t.send_mail, {"delay": 5, "queue": "default"}).name != plan.name


def test_a_settings_change_plans_again():
    plan = cached_plan(t.add, {})
    with override_settings(DELAYQ={"MAX_RETRIES": 7, "DEFAULT_QUEUE": "other"}):
        changed = cached_plan(t.add, {})
        assert changed is not plan
        assert changed.queue == "other"
    assert cached_plan(t.add, {}) is not changed


def test_at_and_names_are_planned_each_call_keys_are_kept():
    at = {"at": timezone.now() + timedelta(hours=1)}
    assert cached_plan(t.add, at) is not cached_plan(t.add, at)
    assert cached_plan("tests.testapp.tasks.add", {}) is not cached_plan(
        "tests.testapp.tasks.add", {}
    )
    keyed = {"key": "k"}
    assert cached_plan(t.add, keyed) is cached_plan(t.add, dict(keyed))
