"""The admin's Schedules page: the list (next run, last run, last outcome), the form's
errors for a bad cron expression, zone or task, and the enable / disable / run now actions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_delayq.models import Schedule, ScheduleState
from tests.reliability import tasks as rtasks  # noqa: F401  (registers .occurrence)

pytestmark = pytest.mark.django_db
TASK = "tests.reliability.tasks.occurrence"


def _post(admin_client, **fields):
    data = {
        "name": "nightly",
        "task": TASK,
        "cron": "",
        "every": "",
        "args": "[]",
        "kwargs": '{"tag": "admin"}',
        "queue": "",
        "tz": "",
        "missed": "once",
        "enabled": "on",
        **fields,
    }
    return admin_client.post(reverse("admin:django_delayq_schedule_add"), data)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"cron": "0 25 * * *"}, "cron &#x27;0 25 * * *&#x27; is not valid"),
        ({"cron": "0 3 * * *", "tz": "Europe/Nowhere"}, "is not a known time zone"),
        ({"every": "30", "task": "tests.nowhere.f"}, "is not registered"),
        ({}, "exactly one of"),
    ],
)
def test_the_form_refuses_bad_schedules_with_the_reason(store, admin_client, fields, error):
    response = _post(admin_client, **fields)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Schedule.objects.exists()


def test_add_list_and_actions(store, admin_client):
    response = _post(admin_client, cron="0 3 * * *", tz="Europe/Berlin")
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Schedule.objects.get(name="nightly")
    ScheduleState.objects.create(
        name="nightly", name_hash=1, digest="x", since_ms=0, last_fire_ms=1_700_000_000_000,
        last_outcome="succeeded",
    )  # fmt: skip
    changelist = reverse("admin:django_delayq_schedule_changelist")
    page = admin_client.get(changelist).content.decode()
    assert "0 3 * * * (Europe/Berlin)" in page and "succeeded" in page and "2023" in page
    admin_client.post(changelist, {"action": "disable", "_selected_action": [row.pk]})
    assert not Schedule.objects.get(pk=row.pk).enabled
    admin_client.post(changelist, {"action": "enable", "_selected_action": [row.pk]})
    assert Schedule.objects.get(pk=row.pk).enabled
    admin_client.post(changelist, {"action": "run_now", "_selected_action": [row.pk]})
    assert store.client.zcard(store.key("default", "pending")) == 1  # an extra job, due now
