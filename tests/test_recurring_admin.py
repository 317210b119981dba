"""The admin's Schedules page: the list (next run, last run, last outcome), the form's
errors for a bad cron expression, zone or task, and the enable / disable / run now actions."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from django_delayq import get_job, task
from django_delayq.models import Schedule, ScheduleState
from tests.conftest import more_settings
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
    timing = '0 3 * * * <span class="dq-zone">(Europe/<wbr>Berlin)</span>'  # may wrap at /
    assert timing in page and "succeeded" in page
    # Its times in its own zone, named (they were UTC without a word: "2 a.m." for 03:00).
    next_run = re.search(r'<td class="field-next_run">(.*?)</td>', page).group(1)
    assert re.fullmatch(
        r'<span title="Europe/Berlin">20\d\d-\d\d-\d\d 03:00:00 CES?T</span>', next_run
    )
    last_run = re.search(r'<td class="field-last_run">(.*?)</td>', page).group(1)
    assert last_run == '<span title="Europe/Berlin">2023-11-14 23:13:20 CET</span>'
    assert "in UTC (TIME_ZONE) for a schedule that runs every N seconds" in page
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


# -- the schedules of DELAYQ["SCHEDULES"], read-only under the rows --------------------

SCRIPT = "<script>alert(1)</script>"
SETTINGS = {
    "nightly-sweep": {
        "task": TASK, "cron": "0 3 * * *", "tz": "Europe/Berlin", "missed": "skip",
        "queue": "emails", "kwargs": {"tag": SCRIPT},
    },
    "paused-sweep": {"task": TASK, "every": 90, "enabled": False},
    SCRIPT: {"task": TASK, "every": 60},  # a name validation refuses: listed with the reason
    "unknown-task": {"task": f"shop.{SCRIPT}.sweep", "every": 60},  # valid, not registered
}  # fmt: skip


def _section(page: str) -> str:
    """The settings' table, and nothing of Django's list above it."""
    start = page.index('<section id="dq-settings-schedules"')
    return page[start : page.index("</section>", start)]


def _settings_row(section: str, name: str) -> str:
    start = section.index(f'<tr data-schedule="{name}">')
    return section[start : section.index("</tr>", start)]


def test_settings_schedules_are_listed_read_only_and_escaped(store, admin_client):
    """They were not listed at all: a newcomer thought the demo's nightly sweep had not
    loaded."""
    ScheduleState.objects.create(
        name="nightly-sweep", name_hash=1, digest="x", since_ms=0,
        last_fire_ms=1_700_000_000_000, last_outcome="failed",
    )  # fmt: skip
    with more_settings(store, SCHEDULES=SETTINGS):
        page = admin_client.get(reverse("admin:django_delayq_schedule_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    assert SCRIPT not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    section = _section(html)
    assert "From settings: DELAYQ['SCHEDULES'] (read-only)" in section
    assert "<a " not in section and "<input" not in section and "<form" not in section
    nightly = _settings_row(section, "nightly-sweep")
    for shown in ("from settings (read-only)", "0 3 * * *", "Europe/Berlin", "skip", "emails",
                  "2023-11-14 23:13:20 CET", "failed",
                  'title="tests.reliability.tasks.occurrence"',
                  "tag=&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;"):  # fmt: skip
        assert shown in nightly, shown
    # 03:00 in Berlin, said so (it showed "2 a.m.", UTC, with no zone).
    next_run = re.search(r'class="dq-next-run" title="Europe/Berlin">([^<]+)<', nightly).group(1)
    assert re.fullmatch(r"20\d\d-\d\d-\d\d 03:00:00 CES?T", next_run), next_run
    paused = _settings_row(section, "paused-sweep")
    assert "every 90 s" in paused and "disabled" in paused
    with more_settings(store, SCHEDULES={"often": {"task": TASK, "every": 90}}):
        page = admin_client.get(reverse("admin:django_delayq_schedule_changelist"))
    often = _settings_row(_section(page.content.decode()), "often")
    next_run = re.search(r'class="dq-next-run" title="UTC">([^<]+)<', often).group(1)
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC", next_run), next_run
    refused = _settings_row(section, "&lt;script&gt;alert(1)&lt;/script&gt;")
    assert "Workers leave it out: schedule name" in refused
    unknown = _settings_row(section, "unknown-task")
    assert "is not registered" in unknown and "shop.&lt;script&gt;" in unknown
    # Nothing of the settings is a row of Django's list (no edit or delete link for them).
    assert not Schedule.objects.exists() and "0 recurring schedules" in html


def test_a_row_named_like_a_settings_schedule_is_marked_ignored(store, admin_client):
    """definitions.load(): the settings' schedule wins, the row is an error. The recorded
    state of the name is the settings schedule's: the row showed its last run as its own."""
    Schedule.objects.create(name="nightly-sweep", task=TASK, every=3600)
    ScheduleState.objects.create(
        name="nightly-sweep", name_hash=1, digest="x", since_ms=0,
        last_fire_ms=1_700_000_000_000, last_outcome="succeeded",
    )  # fmt: skip
    with more_settings(store, SCHEDULES={"nightly-sweep": SETTINGS["nightly-sweep"]}):
        html = admin_client.get(reverse("admin:django_delayq_schedule_changelist")).content
    html = html.decode()
    start = html.index('id="result_list"')
    listed = html[start : html.index("</table>", start)]
    assert "the settings&#x27; one is used" in listed
    assert '<td class="field-last_outcome">-</td>' in listed and "succeeded" not in listed
    settings_row = _settings_row(_section(html), "nightly-sweep")
    assert "A database row has this name too: workers ignore the row" in settings_row
    assert "succeeded" in settings_row


def test_settings_schedules_need_the_view_permission(store, client):
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(user)
    changelist = reverse("admin:django_delayq_schedule_changelist")
    with more_settings(store, SCHEDULES=SETTINGS):
        refused = client.get(changelist)
        assert refused.status_code == 403 and b"nightly-sweep" not in refused.content
        user.user_permissions.add(Permission.objects.get(codename="view_schedule"))
        user = User.objects.get(pk=user.pk)  # permissions are cached on the instance
        client.force_login(user)
        page = client.get(changelist)
    assert page.status_code == 200
    assert 'data-schedule="nightly-sweep"' in _section(page.content.decode())


def test_a_note_when_workers_follow_other_settings(store, admin_client):
    """deploys: the version a worker ran last is current; the admin only reads it."""
    from django_delayq.recurring import definitions, deploys

    changelist = reverse("admin:django_delayq_schedule_changelist")
    now = int(time.time() * 1000)
    with more_settings(store, SCHEDULES={"nightly-sweep": SETTINGS["nightly-sweep"]}):
        assert b'id="dq-settings-version"' not in admin_client.get(changelist).content
        assert store.recurring.schedule_set_times() == {}  # reading recorded nothing
        ours = deploys.settings_version(definitions.from_settings()[0])
        deploys.is_current(store, ours, now - 5000)  # a worker of this code
        assert b'id="dq-settings-version"' not in admin_client.get(changelist).content
        deploys.is_current(store, "another-deploy", now)  # a worker of newer settings
        page = admin_client.get(changelist).content.decode()
        assert 'id="dq-settings-version"' in page
        assert "The workers follow another version of DELAYQ" in page
        assert set(store.recurring.schedule_set_times()) == {ours, "another-deploy"}


def test_the_page_goes_on_without_the_note_when_redis_cannot_say(
    store, admin_client, monkeypatch, caplog
):
    from django_delayq.exceptions import ConnectionError as DelayQConnectionError
    from django_delayq.recurring import deploys

    def down(*args, **kwargs):
        raise DelayQConnectionError("Redis is down")

    monkeypatch.setattr(deploys, "current_version", down)
    with more_settings(store, SCHEDULES={"nightly-sweep": SETTINGS["nightly-sweep"]}):
        page = admin_client.get(reverse("admin:django_delayq_schedule_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-schedule="nightly-sweep"' in html and 'id="dq-settings-version"' not in html
    assert "cannot read the workers' settings versions: Redis is down" in caplog.text


def test_the_list_reads_the_states_of_its_page_only_and_keeps_them_on_the_rows(store, admin_client):
    """The recorded states are read for the rows of the page shown (not the whole table,
    which may hold 100,000 schedules) and kept on that request's row objects: the admin
    object is shared by every request, so state kept there leaked between requests."""
    from django.contrib import admin
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for n in range(3):
        Schedule.objects.create(name=f"s{n}", task=TASK, every=60)
        ScheduleState.objects.create(
            name=f"s{n}", name_hash=n, digest="x", since_ms=0, last_outcome=f"outcome-{n}"
        )
    ScheduleState.objects.create(name="gone", name_hash=9, digest="x", since_ms=0)
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(reverse("admin:django_delayq_schedule_changelist"))
    assert page.status_code == 200
    assert all(f"outcome-{n}" in page.content.decode() for n in range(3))
    reads = [q["sql"] for q in queries if 'FROM "django_delayq_schedule_state"' in q["sql"]]
    assert reads and all(" IN (" in sql for sql in reads), reads
    model_admin = admin.site._registry[Schedule]
    assert not {"_states", "_settings_names"} & set(vars(model_admin))


@pytest.mark.django_db(transaction=True)
def test_an_occurrence_page_does_not_say_it_was_created_at_its_fire_time(store, admin_client):
    """A pending occurrence's id holds its fire time: its page said "Created" then (hours in
    the future) and its timeline "Scheduled" then. It says who stored it and that the time
    is not recorded, and names its schedule and fire time."""
    from django_delayq.recurring.reconcile import Reconciler
    from tests.test_admin import url

    now = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)  # 00:30 in Berlin: 03:00 is ahead
    schedules = {"nightly-sweep": {"task": TASK, "cron": "0 3 * * *", "tz": "Europe/Berlin"}}
    with more_settings(store, SCHEDULES=schedules):
        assert Reconciler(store, clock=now.timestamp).run_pass().created == 1
        [raw_id] = store.client.zrange(store.key("default", "pending"), 0, -1)
        job = get_job(raw_id.decode())
        assert job.fire_time == datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
        page = admin_client.get(url("detail", "default", job.id))
    assert page.status_code == 200
    html = page.content.decode()
    created = re.search(r'id="dq-job-created">(.*?)</td>', html, re.S).group(1)
    assert "2026-12-02 02:00:00" not in created
    assert "not recorded: a worker stores an occurrence ahead of its fire time" in created
    schedule = re.search(r'id="dq-job-schedule">(.*?)</td>', html, re.S).group(1)
    assert "an occurrence of nightly-sweep, for its fire time 2026-12-02 02:00:00 UTC" in schedule
    events = page.context["timeline"]
    assert [e.kind for e in events] == ["scheduled", "due"]
    assert events[0].at is None and events[0].title == "Stored by a worker, ahead of its fire time"
    assert events[1].at == job.fire_time


def test_a_rows_task_and_zone_are_escaped_where_they_may_wrap(store, admin_client):
    """The list cuts a task name after its dots and a zone after its slash (<wbr>): the
    parts are escaped, whatever a row written around the form holds."""
    Schedule.objects.create(name="raw", task=f"shop.{SCRIPT}.sweep", cron="0 3 * * *", tz=SCRIPT)
    html = admin_client.get(reverse("admin:django_delayq_schedule_changelist")).content.decode()
    start = html.index('id="result_list"')
    listed = html[start : html.index("</table>", start)]
    assert "<script>" not in listed
    assert "shop.<wbr>&lt;script&gt;alert(1)&lt;/script&gt;.<wbr>sweep" in listed
    assert "(&lt;script&gt;alert(1)&lt;/<wbr>script&gt;)" in listed
