"""Bad Schedule rows written from code (issue 25 item 5): a bad cron, an unknown zone, a task
this process does not register, a name DELAYQ["SCHEDULES"] uses. full_clean() refuses each
as the admin's form does; a worker logs each once (definitions.ErrorLog, as the reconcile
pass calls it); delayq_status lists it and exits 1; /metrics has delayq_schedule_invalid;
the admin's list and change page show it, escaped."""

from __future__ import annotations

import json
import logging
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

from django_delayq.models import Schedule
from django_delayq.recurring import definitions
from django_delayq.recurring.reconcile import Reconciler
from tests.conftest import more_settings
from tests.reliability import tasks as rtasks  # noqa: F401  (registers .occurrence)

pytestmark = pytest.mark.django_db(transaction=True)
TASK = "tests.reliability.tasks.occurrence"
LOGGER = "tests.recurring_rows"

BAD_ROWS = {
    "bad-cron": ({"cron": "0 25 * * *"}, "cron '0 25 * * *' is not valid"),
    "bad-zone": (
        {"cron": "0 3 * * *", "tz": "Europe/Nowhere"},
        "tz 'Europe/Nowhere' is not a known time zone",
    ),
    "bad-task": (
        {"every": 30, "task": "tests.nowhere.f"},
        "task 'tests.nowhere.f' is not registered in this process",
    ),
    "clash": ({"every": 30}, "is defined in DELAYQ['SCHEDULES'] and in the database"),
}
BAD = pytest.mark.parametrize("name", list(BAD_ROWS))


@pytest.fixture
def settings_schedule(real_store):
    """DELAYQ["SCHEDULES"] with a valid schedule named 'clash', on the real Redis."""
    spec = {"task": TASK, "every": 60, "kwargs": {"tag": real_store.prefix}}
    with more_settings(real_store, SCHEDULES={"clash": spec}):
        yield real_store


def bad_row(name: str) -> Schedule:
    fields, _ = BAD_ROWS[name]
    return Schedule.objects.create(**{"name": name, "task": TASK, **fields})


def status(*args: str) -> tuple[int, str]:
    """delayq_status's exit status and output."""
    out = StringIO()
    try:
        call_command("delayq_status", *args, stdout=out, stderr=StringIO())
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


@BAD
def test_full_clean_refuses_what_the_form_refuses(settings_schedule, name):
    row = bad_row(name)  # objects.create() does not call full_clean (Django's convention)
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert BAD_ROWS[name][1].split("schedule ")[-1] in str(caught.value)


def test_full_clean_accepts_a_good_row_and_tidies_its_cron(settings_schedule):
    row = Schedule(name="good", task=TASK, cron="0  3 * * *", tz="Europe/Berlin")
    row.full_clean()
    assert row.cron == "0 3 * * *"


@BAD
def test_a_bad_row_is_logged_once_across_passes(settings_schedule, name, caplog):
    row = bad_row(name)
    log = definitions.ErrorLog(logging.getLogger(LOGGER))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(2):  # two reconcile passes
            log.report(definitions.load()[1])
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and BAD_ROWS[name][1] in lines[0], lines
    assert f"schedule {name!r}" in lines[0]
    caplog.clear()
    Schedule.objects.filter(pk=row.pk).update(name=f"{name}-2")  # another error text
    with caplog.at_level(logging.INFO, logger=LOGGER):
        log.report(definitions.load()[1])
        row.delete()  # fixed (or gone): said once, then nothing
        log.report(definitions.load()[1])
        log.report(definitions.load()[1])
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    if name == "clash":  # the renamed row is a valid one: its error is gone
        assert len(lines) == 1 and "no error any more" in lines[0], lines
    else:
        assert len(lines) == 3, lines
        assert f"schedule '{name}-2'" in lines[0] and "no error any more" in lines[1]


@BAD
def test_delayq_status_lists_a_bad_row_and_exits_1(settings_schedule, name, client):
    from tests.test_metrics import TOKEN

    Reconciler(settings_schedule).run_pass()  # 'clash' of the settings has its next occurrence
    assert status()[0] == 0
    row = bad_row(name)
    Reconciler(settings_schedule).run_pass()
    code, out = status()
    assert code == 1 and f"SCHEDULE {name}" in out and BAD_ROWS[name][1] in out, out
    assert "MISSING" not in out and "OVERDUE" not in out
    code, out = status("--json")
    found = {s["name"]: s for s in json.loads(out)["schedules"]}
    assert code == 1 and BAD_ROWS[name][1] in found[name]["error"]
    with more_settings(settings_schedule, METRICS_TOKEN=TOKEN):
        text = client.get("/delayq/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert f'delayq_schedule_invalid{{schedule="{name}"}} 1.0' in text
    row.delete()
    assert status()[0] == 0


@BAD
def test_the_admin_list_and_change_page_show_the_error(settings_schedule, admin_client, name):
    row = bad_row(name)
    page = admin_client.get(reverse("admin:django_delayq_schedule_changelist")).content.decode()
    escaped = BAD_ROWS[name][1].replace("'", "&#x27;")
    assert f"invalid: schedule &#x27;{name}&#x27;" in page and escaped in page
    change = reverse("admin:django_delayq_schedule_change", args=[row.pk])
    assert escaped in admin_client.get(change).content.decode()


def test_the_admin_escapes_a_task_name_with_markup(settings_schedule, admin_client):
    Schedule.objects.create(name="xss", task="<script>alert(1)</script>", every=30)
    page = admin_client.get(reverse("admin:django_delayq_schedule_changelist")).content.decode()
    assert "invalid: schedule &#x27;xss&#x27;: task &#x27;&lt;script&gt;alert(1)" in page
    assert "<script>alert(1)" not in page
