"""The admin's Postpone (reschedule.lua through the action endpoint): on a job page and on a
list's filter, with the run_job permission, after its confirmation page with a delay field;
an audit entry "Postponed" per job moved. The test client, over fakeredis and the real
Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE
from django.db import connections
from django.test import override_settings

from django_delayq import schedule
from django_delayq.models import OutboxJob
from django_delayq.storage import connection
from tests.test_admin import (
    _Forms,
    _post,
    client_for,
    location,
    make_running,
    msgs,
    staff,
    text,
    url,
)
from tests.test_admin_finished import entries
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db
Q = "default"


def confirm_with(client, page, amount: str = "2", unit: str = "hours"):
    """Post the confirmation page's form (its hidden fields as they are) with a delay."""
    assert page.status_code == 200, page.status_code
    assert 'id="dq-delay-amount"' in text(page) and 'id="dq-delay-unit"' in text(page)
    parser = _Forms()
    parser.feed(page.content.decode())
    (form,) = [f for f in parser.forms if "dq-confirm-yes" in f["ids"]]
    data: dict[str, list[str]] = {}
    for name, value in form["fields"]:
        data.setdefault(name, []).append(value)
    data["delay_amount"], data["delay_unit"] = [amount], [unit]
    return client.post(form["action"], data, follow=True)


def due(store, job_id: str) -> float:
    return store.fetch(Q, job_id).score


def test_postpone_from_the_job_page_asks_for_the_delay_then_stays_there(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=60, key="k")
    detail = url("detail", Q, job.id)
    body = text(admin_client.get(detail))
    assert f'value="postpone:{job.id}"' in body
    page = _post(admin_client, one=f"postpone:{job.id}", next=detail, from_detail="1")
    assert page.context["title"] == "Postpone 1 pending job?"
    before = store.server_time()
    assert due(store, job.id) < before + 120  # nothing moved yet
    response = confirm_with(admin_client, page, "2", "hours")
    assert msgs(response) == ["1 job postponed."]
    assert location(response) == detail  # it is still pending: its page, not the list
    assert before + 7200 <= due(store, job.id) <= store.server_time() + 7200
    assert store.id_for_key(Q, "k") == job.id
    assert entries() == [("admin", job.id, "tests.testapp.tasks.add", CHANGE, "Postponed")]


def test_a_bad_delay_shows_the_page_again_and_moves_nothing(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=60)
    page = _post(admin_client, one=f"postpone:{job.id}")
    before = due(store, job.id)
    for amount, unit in (
        ("0", "hours"),
        ("x", "hours"),
        ("10001", "days"),
        ("2", "weeks"),
        ("²", "days"),
    ):
        again = confirm_with(admin_client, page, amount, unit)
        assert again.context["title"] == "Postpone 1 pending job?"
        assert msgs(again) == [
            "Give the delay as a whole number from 1 to 10000, in minutes, hours or days."
        ]
        assert due(store, job.id) == before
    assert entries() == []


def test_postpone_a_filter_moves_what_the_page_counted(store, admin_client):
    adds = [schedule(testtasks.add, i, i, delay=60 + i) for i in range(3)]
    other = schedule(testtasks.remember, 1, delay=61)
    page = _post(admin_client, action="postpone", select_across="1", task="tests.testapp.tasks.add")
    assert page.context["title"] == "Postpone 3 pending jobs?"
    before = store.server_time()
    response = confirm_with(admin_client, page, "3", "days")
    assert msgs(response) == ["3 jobs postponed."]
    for job in adds:
        assert due(store, job.id) >= before + 3 * 86400
    assert due(store, other.id) < before + 120
    assert len(entries()) == 3


def test_postpone_reports_jobs_no_longer_pending(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=60)
    running = make_running(store)
    page = _post(admin_client, action="postpone", ids=[job.id, running, "gone-id"])
    response = confirm_with(admin_client, page, "5", "minutes")
    assert msgs(response) == [
        "1 job postponed, 1 is being run by a worker, 1 was no longer pending."
    ]
    assert store.fetch(Q, running).status == "running"


def test_postpone_needs_the_run_job_permission(store):
    job = schedule(testtasks.add, 1, 2, delay=60)
    before = due(store, job.id)
    others = client_for(staff("view_job", "cancel_job", "requeue_job", "delete_job"))
    assert f"postpone:{job.id}" not in text(others.get(url("detail", Q, job.id)))
    posted = {"action": "postpone", "queue": Q, "job_ids": job.id, "confirmed": "yes"}
    posted |= {"delay_amount": "1", "delay_unit": "hours"}
    assert others.post(url("action"), posted).status_code == 403
    assert others.post(url("action"), {"one": f"postpone:{job.id}", "queue": Q}).status_code == 403
    assert due(store, job.id) == before
    allowed = client_for(staff("view_job", "run_job", username="runner"))
    assert msgs(allowed.post(url("action"), posted, follow=True)) == ["1 job postponed."]
    assert due(store, job.id) > before + 3000
    assert allowed.get(url("action")).status_code == 405  # a POST only


def test_postpone_is_no_button_of_each_row(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=60)
    body = text(admin_client.get(url("pending", queue=Q)))
    assert f'value="run_now:{job.id}"' in body and f'value="postpone:{job.id}"' not in body
    assert '<option value="postpone">Postpone…</option>' in body


@pytest.mark.django_db(transaction=True)
def test_postpone_a_row_beyond_the_horizon(store, admin_client):
    with override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 600}):
        connection._stores[(None, False, "default", store.prefix)] = store
        far = schedule(testtasks.add, 1, 2, delay=timedelta(days=7))
        assert far.waits_in == "database"
        page = _post(admin_client, action="postpone", ids=[far.id])
        response = confirm_with(admin_client, page, "11", "minutes")  # still beyond 600 s
        assert msgs(response) == ["1 job postponed."]
        (row,) = OutboxJob.objects.all()
        assert abs(row.due_at.timestamp() - store.server_time() - 660) < 5
        page = _post(admin_client, action="postpone", ids=[far.id])
        assert msgs(confirm_with(admin_client, page, "5", "minutes")) == ["1 job postponed."]
        assert not OutboxJob.objects.exists()  # within the horizon: relayed
        assert store.fetch(Q, far.id).status == "pending"
    assert connections["default"].vendor == "sqlite"
