"""The admin's Workers tab and the dashboard's live workers per queue, through Django's
test client (the browser test is in test_admin_browser.py)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import django_delayq
from django_delayq.storage.roster import encode_description
from django_delayq.worker.dispatch import Worker
from tests.test_admin import XSS, Q, client_for, make_running, schedule_overdue, staff, text, url
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db


def beat(store, instance: str, **fields) -> None:
    description = {
        "name": instance.split("~")[0],
        "host": "web-1.internal",
        "pid": 4242,
        "queues": [Q],
        "concurrency": 4,
        "version": "0.1.0",
        "uptime": 7200.0,
        "every": 5.0,
        "ttl": 15.0,
        "running": [],
        "done": 1234,
        "failed": 5,
        "stopping": False,
        "burst": False,
        **fields,
    }
    ops = store.roster.beat_ops(instance, encode_description(**description), 15, time.time())
    assert not any(isinstance(r, Exception) for r in store.run(ops))


def wait_until(predicate, timeout: float = 20.0):
    """Wait for ``predicate``; its timeout only guards against a hang (what the tests wait for takes
    milliseconds to a second), so it is many times that, for a loaded machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {predicate}")


def test_workers_tab_shows_a_running_worker_and_links_its_jobs(store, admin_client):
    gate = f"g-{uuid.uuid4().hex[:8]}"
    job = testtasks.wait_for_gate.schedule(gate)
    worker = Worker([Q, "emails"], concurrency=2, name="web-7")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.holding() and worker.holding()[0].fields is not None)
        # No beat written since the job started (beats come every 5 s): the tab reads the
        # running sets, so it agrees with In progress at once.
        response = admin_client.get(url("workers"))
        assert response.status_code == 200
        body = text(response)
        (row,) = response.context["rows"]
        assert row.worker.instance == worker.instance and row.worker.name == "web-7"
        assert f'data-worker="{worker.instance}"' in body
        assert f"{worker.parts.presence.host}, pid {worker.parts.presence.pid}" in body
        assert f'<a href="{url("pending")}?queue=emails">emails</a>' in body
        assert "1 of 2" in body and f"django-delayq {django_delayq.__version__}" in body
        (running,) = row.running
        assert running.id == job.id and running.url == url("detail", Q, job.id)
        assert f'href="{url("detail", Q, job.id)}" class="dq-task"' in body
        assert "wait_for_gate" in body and running.preview == f'"{gate}"'
        assert 'aria-current="page">Workers</a>' in body
        assert "1 live worker, running 1 job now" in body
        testtasks.gate(gate).set()
        wait_until(lambda: worker.processed == 1)
        worker.request_stop()
        thread.join(10)
        body = text(admin_client.get(url("workers")))
        assert "No live workers." in body and worker.instance not in body
    finally:
        testtasks.gate(gate).set()
        worker.request_stop(force=True)


def test_workers_tab_fields_and_escaping(real_store, admin_client):
    job_id = make_running(real_store, worker="web-2~1")
    beat(
        real_store,
        "web-2~1",
        running=[[Q, job_id, "tests.testapp.tasks.add", 75.0]],
        stopping=True,
    )
    beat(
        real_store,
        f"{XSS}~2",
        host=XSS,
        queues=[XSS, "emails"],
        running=[[XSS, XSS, XSS, 1.0], [Q, "no/such/id", "x.y", 2.0]],
        version=XSS,
        burst=True,
    )
    response = admin_client.get(url("workers"))
    assert response.status_code == 200
    body = text(response)
    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    rows = {r.worker.instance: r for r in response.context["rows"]}
    web2 = rows["web-2~1"]
    assert web2.worker.stopping and web2.started.replace("\xa0", " ") == "2 hours ago"
    assert "second" in web2.beat
    (running,) = web2.running
    assert running.since.replace("\xa0", " ") == "for 1 minute" and running.preview == "1, 2"
    assert ">stopping</span>" in body and ">burst</span>" in body
    nasty = rows[f"{XSS}~2"]
    assert [u for _, u in nasty.queues] == ["", f"{url('pending')}?queue=emails"]
    # The roster's own list is not shown: only jobs the running sets hold (none of these).
    assert nasty.running == []
    assert '1,234 / <span class="dq-error">5</span>' in body


def test_a_supervised_worker_shows_its_name_unquoted(store, admin_client):
    """Issue 26: the children of `delayq_worker --processes` are named `host:pid/1`; the
    Workers tab, In progress and a job's page showed their instance id as `host:42%2F1~...`
    (the encoding that keeps '/' out of lease tokens). They show the name as given; the
    encoded id stays in the data-worker attribute, the key."""
    instance = "host:42%2F1~1a2b3c4d"
    beat(store, instance, name="host:42/1")
    job_id = make_running(store, worker=instance)
    body = text(admin_client.get(url("workers")))
    assert f'data-worker="{instance}"' in body
    assert '<div class="dq-quiet dq-mono dq-instance">host:42/1~1a2b3c4d</div>' in body
    assert body.count("%2F") == 1  # the attribute only
    body = text(admin_client.get(url("running")))
    assert ">host:42/1~1a2b3c4d</td>" in body and "%2F" not in body
    body = text(admin_client.get(url("detail", Q, job_id)))
    assert '<td class="dq-mono">host:42/1~1a2b3c4d</td>' in body and "%2F" not in body


def test_dashboard_shows_live_workers_per_queue_and_flags_unserved_queues(store, admin_client):
    schedule_overdue(store, 60)
    testtasks.send_mail.schedule("a@b.c", delay=600)  # emails: nothing due
    response = admin_client.get(url("changelist"))
    queues = {q["name"]: q for q in response.context["queues"]}
    assert (queues[Q]["workers"], queues[Q]["unserved"]) == (0, True)
    assert (queues["emails"]["workers"], queues["emails"]["unserved"]) == (0, False)
    body = text(response)
    assert 'id="dq-unserved"' in body
    assert "Queue default has due jobs and no live worker serves it" in body
    assert "delayq_worker --queues default" in body
    assert 'title="Due jobs and no live worker serves this queue">none</a>' in body
    beat(store, "web-1~1", queues=[Q, "emails"])
    beat(store, "web-2~2", queues=["emails"])
    response = admin_client.get(url("changelist"))
    queues = {q["name"]: q for q in response.context["queues"]}
    assert (queues[Q]["workers"], queues[Q]["unserved"]) == (1, False)
    assert queues["emails"]["workers"] == 2
    assert 'id="dq-unserved"' not in text(response)
    assert f'<a href="{url("workers")}">2</a>' in text(response)


def test_workers_tab_needs_view_permission(fake_store):
    assert client_for(staff("cancel_job")).get(url("workers")).status_code == 403
    assert client_for(staff("view_job", username="v")).get(url("workers")).status_code == 200
