"""Queue control in the admin (issue 20): the dashboard's pause and resume buttons, the
paused state, and priorities on the dashboard, lists and job pages."""

from __future__ import annotations

import pytest
from django.test import Client

import django_delayq
from django_delayq import schedule
from tests.test_admin import client_for, msgs, staff, text, url
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db
Q = "default"


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_pause_and_resume_from_the_dashboard(store, admin_client):
    schedule(testtasks.add, 1, 2)
    page = text(admin_client.get(url("changelist")))
    assert 'value="pause"' in page and "dq-paused" not in page
    response = admin_client.post(url("queue"), {"queue": Q, "operation": "pause"}, follow=True)
    assert django_delayq.is_paused(Q)
    assert any("paused" in m for m in msgs(response))
    page = text(admin_client.get(url("changelist")))
    assert "dq-paused" in page and 'value="resume"' in page
    assert 'id="dq-unserved"' not in page  # due jobs, no worker: paused on purpose
    admin_client.post(url("queue"), {"queue": Q, "operation": "resume"}, follow=True)
    assert not django_delayq.is_paused(Q)


def test_pause_needs_its_permission_a_post_and_csrf(store):
    viewer = client_for(staff("view_job"))
    assert 'value="pause"' not in text(viewer.get(url("changelist")))
    assert viewer.post(url("queue"), {"queue": Q, "operation": "pause"}).status_code == 403
    operator = client_for(staff("view_job", "pause_queue", username="operator"))
    assert operator.get(url("queue"), {"queue": Q, "operation": "pause"}).status_code == 405
    assert not django_delayq.is_paused(Q)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff("view_job", "pause_queue", username="strict"))
    assert strict.post(url("queue"), {"queue": Q, "operation": "pause"}).status_code == 403
    assert not django_delayq.is_paused(Q)
    response = operator.post(url("queue"), {"queue": Q, "operation": "pause"}, follow=True)
    assert response.status_code == 200 and django_delayq.is_paused(Q)
    response = operator.post(url("queue"), {"queue": "bad queue!", "operation": "pause"})
    assert response.status_code == 404


def test_priorities_on_dashboard_lists_and_job_page(store, admin_client):
    urgent = schedule(testtasks.add, 1, 2, priority=10, delay=60)
    plain = schedule(testtasks.add, 3, 4, delay=30)
    page = text(admin_client.get(url("changelist")))
    assert "1 at priority 10" in page
    listing = text(admin_client.get(url("pending", queue=Q)))
    assert "priority 10" in listing
    assert listing.index(urgent.id) < listing.index(plain.id)  # claim order: priority first
    detail = text(admin_client.get(url("detail", Q, urgent.id)))
    assert "Priority" in detail and ">10" in detail


def test_limits_on_the_dashboard(store, admin_client):

    store.control.publish_rates([Q], {"shop.capture_payment": (10, 1000)})
    store.control.publish_concurrency([Q], {"shop.sync_warehouse": 1})
    page = text(admin_client.get(url("changelist")))
    assert "shop.capture_payment: at most 10/s" in page
    assert "shop.sync_warehouse: 0 of 1 at once" in page


def test_a_queue_limit_on_the_dashboard(store, admin_client):

    store.control.publish_queue_limits({Q: 3})
    page = text(admin_client.get(url("changelist")))
    assert "all its jobs: 0 of 3 at once" in page
