"""The system checks of recurring schedules (delayq.E020-E022), one test per id, and one
that ``manage.py check`` runs them."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from tests.reliability import tasks as rtasks  # noqa: F401  (registers .occurrence)

TASK = "tests.reliability.tasks.occurrence"


def _ids(**delayq) -> list[str]:
    with override_settings(DELAYQ=delayq):
        return [m.id for m in run_checks() if m.id.startswith("delayq.E02")]


def test_check_e020_invalid_schedule():
    assert _ids(SCHEDULES={"bad": {"task": TASK, "cron": "nope"}}) == ["delayq.E020"]
    assert _ids(SCHEDULES=["not", "a", "dict"]) == ["delayq.E020"]


def test_check_e021_unknown_task():
    assert _ids(SCHEDULES={"x": {"task": "tests.nowhere.f", "every": 5}}) == ["delayq.E021"]


def test_check_e022_reconcile_interval():
    assert _ids(RECONCILE_INTERVAL=0) == ["delayq.E022"]
    assert _ids(SCHEDULES={"ok": {"task": TASK, "every": 5}}) == []


def test_call_command_check_runs_the_schedule_checks():
    bad = {"SCHEDULES": {"x": {"task": "tests.nowhere.f", "every": 5}}}
    with (
        override_settings(DELAYQ=bad),
        pytest.raises(SystemCheckError, match=r"delayq\.E021.*tests\.nowhere\.f"),
    ):
        call_command("check")
