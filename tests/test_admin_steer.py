"""The admin's lists show issue 36's options: a pending job's expiry under its due time, a
finished job's "expired" outcome; user text beside them escaped. The test client, over
fakeredis and the real Redis."""

from __future__ import annotations

import time
import uuid

import pytest

from django_delayq import schedule, task
from django_delayq.scheduling.registry import unregister
from tests.test_admin import text, url
from tests.test_expiry import burst
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db
Q = "default"


def row_of(page: str, job_id: str) -> str:
    start = page.index(f'data-job-id="{job_id}"')
    return page[start : page.index("</tr>", start)]


def test_the_pending_list_shows_the_expiry_under_the_due_time(store, admin_client):
    expiring = t.remember.schedule("<b>x</b>", delay=600, expires=3600, key="<i>k</i>")
    plain = t.remember.schedule("plain", delay=600)
    page = text(admin_client.get(url("pending", queue=Q)))
    row = row_of(page, expiring.id)
    when = expiring.expires_at.strftime("%Y-%m-%d %H:%M:%S")
    assert 'class="dq-quiet dq-expires"' in row and f"expires {when} UTC" in row
    assert "&lt;i&gt;k&lt;/i&gt;" in row and "<i>k</i>" not in row  # the key, escaped
    assert "<b>x</b>" not in page
    assert "dq-expires" not in row_of(page, plain.id)


def test_the_finished_list_shows_the_expired_outcome(store, admin_client):
    late = t.remember.schedule("late", expires=60)
    t.remember.schedule("ok")
    burst(offset=120)
    page = text(admin_client.get(url("finished", queue=Q)))
    row = row_of(page, late.id)
    assert 'class="dq-outcome dq-outcome-expired"' in row and "expired, not run</td>" in row


# The job page (issue 36's options, each value from Redis or a row escaped) ---------------


def job_page(admin_client, job, queue: str = Q) -> str:
    return text(admin_client.get(url("detail", queue, job.id)))


def field_of(page: str, field_id: str) -> str:
    start = page.index(f'id="{field_id}"')
    return page[start : page.index("</td>", start)]


def test_the_job_page_shows_each_option_of_a_steered_job(store, admin_client):
    job = t.remember.schedule(
        "<b>x</b>", key="<i>k</i>", delay=600, expires=3600, unique_for=30, unique_until="end"
    )
    page = job_page(admin_client, job)
    when = job.expires_at.strftime("%Y-%m-%d %H:%M:%S")
    assert f"{when} UTC" in field_of(page, "dq-job-expires")
    assert "30 s after it succeeds" in field_of(page, "dq-job-unique-for")
    assert "its end (the key holds while it runs)" in field_of(page, "dq-job-until")
    assert "&lt;i&gt;k&lt;/i&gt;" in page and "<i>k</i>" not in page
    assert "<b>x</b>" not in page
    plain = job_page(admin_client, t.remember.schedule("plain", delay=600))
    for field in ("expires", "unique-for", "until", "debounce", "group"):
        assert f'id="dq-job-{field}"' not in plain


def test_the_job_page_shows_a_debounce_s_first_due_time(store, admin_client):
    first = t.remember.schedule("a", key="<i>k</i>", delay=60, max_wait=300)
    again = t.remember.schedule("b", key="<i>k</i>", delay=3000, max_wait=300)
    assert again.id == first.id
    page = job_page(admin_client, first)
    shown = field_of(page, "dq-job-debounce")
    due0 = first.due_at.strftime("%Y-%m-%d %H:%M")
    assert f"its key's first due time, {due0}" in shown
    assert "plus the replacing call's max_wait" in shown  # t.remember has no default


def test_the_job_page_shows_the_task_s_max_wait_as_the_cap(store, admin_client):
    from tests.test_debounce import reindex  # @task(max_wait=60)

    first = reindex.schedule(42, key="idx:42", delay=10)
    page = job_page(admin_client, first)
    latest = (first.due_at.timestamp() + 60) // 60
    shown = field_of(page, "dq-job-debounce")
    assert "plus max_wait, 60 s" in shown
    assert time.strftime("%Y-%m-%d %H:%M", time.gmtime(latest * 60)) in shown


@pytest.mark.django_db(transaction=True)
def test_the_job_page_shows_a_debounced_row_s_cap(store, admin_client):
    from tests.conftest import more_settings

    with more_settings(store, HORIZON=60):
        first = t.remember.schedule("a", key="k", delay=600, max_wait=100)
        t.remember.schedule("b", key="k", delay=3600, max_wait=100)
        page = job_page(admin_client, first)
    shown = field_of(page, "dq-job-debounce")
    assert "plus max_wait, 100 s" in shown
    latest = time.strftime("%Y-%m-%d %H:%M", time.gmtime(first.due_at.timestamp() + 100))
    assert f"never past {latest}" in shown


def test_the_job_page_shows_the_group_and_a_fair_queue(store, admin_client):
    from tests.conftest import more_settings

    with more_settings(store, QUEUES={"fq": {"fair": True}}):
        job = schedule(t.remember, "x", queue="fq", group="<b>acme</b>", delay=600)
        page = job_page(admin_client, job, "fq")
    shown = field_of(page, "dq-job-group")
    assert "&lt;b&gt;acme&lt;/b&gt;" in shown and "<b>acme</b>" not in page
    assert "a fair queue" in shown
    limited = task(name=f"tests.steer_{uuid.uuid4().hex}", group_concurrency=2)(lambda v: None)
    try:
        job = limited.schedule("y", group="<b>acme</b>", delay=600)
        shown = field_of(job_page(admin_client, job), "dq-job-group")
    finally:
        unregister(limited.name)
    assert "&lt;b&gt;acme&lt;/b&gt;" in shown and "a fair queue" not in shown


@pytest.mark.django_db(transaction=True)
def test_the_job_page_shows_a_row_s_group(store, admin_client):
    from tests.conftest import more_settings

    with more_settings(store, HORIZON=60, QUEUES={"fq": {"fair": True}}):
        job = schedule(t.remember, "x", queue="fq", group="<b>acme</b>", delay=600)
        shown = field_of(job_page(admin_client, job, "fq"), "dq-job-group")
    assert "&lt;b&gt;acme&lt;/b&gt;" in shown and "a fair queue" in shown
