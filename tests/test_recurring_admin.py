"""The admin's Schedules page: the list (next run, last run, last outcome), the form's
errors for a bad cron expression, zone or task, and the enable / disable / run now actions."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from django_delayq import get_job, task
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


@task(name="tests.recurring_admin.takes_any", max_retries=0)
def takes_any(**kwargs) -> None:
    """Takes any keyword argument, ``delay`` and ``queue`` included (by **kwargs: no
    parameter of its own is named like a schedule() option)."""


@pytest.mark.parametrize(
    ("kwargs", "queue"),
    [({"delay": 7, "priority": 3}, ""), ({"queue": "x"}, ""), ({"queue": "x"}, "emails")],
)
def test_run_now_gives_the_schedules_kwargs_to_the_task_not_to_schedule(
    store, admin_client, kwargs, queue
):
    """Run now used to hand the kwargs to schedule() as options: {"delay": 7, "priority": 3}
    ran 7 s later with no kwargs, {"queue": "x"} was a 500."""
    row = Schedule.objects.create(
        name="any", task=takes_any.name, every=3600, kwargs=kwargs, queue=queue
    )
    changelist = reverse("admin:django_delayq_schedule_changelist")
    before = time.time()
    response = admin_client.post(changelist, {"action": "run_now", "_selected_action": [row.pk]})
    assert response.status_code == 302
    on = queue or "default"
    [(job_id, due)] = store.client.zrange(store.key(on, "pending"), 0, -1, withscores=True)
    job = get_job(job_id.decode())
    assert job.kwargs == kwargs and job.args == [] and job.queue == on and job.priority == 0
    assert before - 1 <= due / 1000 <= time.time() + 1  # due now, on Redis's clock
