"""The Prometheus endpoint (django_delayq.urls, at /delayq/metrics in tests/urls.py): its
output read back with prometheus_client's own parsers, and who may read it."""

from __future__ import annotations

import time

import prometheus_client
import pytest
from django.contrib.auth.models import Permission, User
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.storage.roster import encode_description
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db

URL = "/delayq/metrics"
TOKEN = "0123456789abcdef-metrics-token"
GAUGES = {
    "delayq_pending_jobs",
    "delayq_due_jobs",
    "delayq_running_jobs",
    "delayq_dead_jobs",
    "delayq_finished_jobs",
    "delayq_lag_seconds",
    "delayq_live_workers",
    "delayq_queue_paused",
}
COUNTERS = {
    "delayq_jobs_done",
    "delayq_attempts_failed",
    "delayq_attempts_retried",
    "delayq_jobs_dead_lettered",
    "delayq_jobs_recovered",
    "delayq_jobs_limited",
    "delayq_jobs_expired",
    "delayq_jobs_rescheduled",
}


def values(families) -> tuple[dict[str, str], dict[tuple[str, str], float]]:
    """(type per family, value per (sample name, queue))."""
    types, samples = {}, {}
    for family in families:
        types[family.name] = family.type
        for sample in family.samples:
            label = sample.labels.get("queue", sample.labels.get("state"))
            samples[sample.name, label] = sample.value
    return types, samples


def live_worker(store, queues: list[str]) -> None:
    description = encode_description(
        name="web-1",
        host="h",
        pid=1,
        queues=queues,
        concurrency=1,
        version="0",
        uptime=1,
        every=5,
        ttl=15,
        running=[],
        done=0,
        failed=0,
        stopping=False,
        burst=False,
    )
    store.run(store.roster.beat_ops("web-1~1", description, 15, time.time()))


def test_per_queue_gauges_and_counters_parsed_by_prometheus_client(store, client):
    t.add.schedule(1, 2)
    t.add.schedule(3, 4)
    t.always_fails.schedule("declined")  # max_retries=2: three failed attempts, then dead
    assert Worker(["default"], burst=True).run() == 0
    record = encode_record(t.add.name, [5, 6], {})
    placed = time.time()
    store.schedule("default", new_job_id(), record, now=placed - 120)  # 2 min overdue
    t.send_mail.schedule("a@b.c", delay=3600)
    live_worker(store, ["emails"])
    with more_settings(store, METRICS_TOKEN=TOKEN):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "no-cache" in response["Cache-Control"]
    types, samples = values(text_string_to_metric_families(response.content.decode()))
    schedules = dict.fromkeys(
        ("delayq_schedule_missing", "delayq_schedule_overdue", "delayq_schedule_invalid"), "gauge"
    )
    assert types == {
        **dict.fromkeys(GAUGES, "gauge"),
        **dict.fromkeys(COUNTERS, "counter"),
        **schedules,  # recurring schedules (none here: no samples)
        "delayq_batches": "gauge",
    }
    assert samples["delayq_jobs_done_total", "default"] == 2
    assert samples["delayq_attempts_failed_total", "default"] == 3
    assert samples["delayq_attempts_retried_total", "default"] == 2
    assert samples["delayq_jobs_dead_lettered_total", "default"] == 1
    assert samples["delayq_jobs_recovered_total", "default"] == 0
    assert samples["delayq_dead_jobs", "default"] == 1
    assert samples["delayq_finished_jobs", "default"] == 2  # the two adds, kept
    assert samples["delayq_finished_jobs", "emails"] == 0
    assert samples["delayq_pending_jobs", "default"] == samples["delayq_due_jobs", "default"] == 1
    assert samples["delayq_running_jobs", "default"] == 0
    lag = samples["delayq_lag_seconds", "default"]
    assert 120 - 0.01 <= lag <= time.time() - placed + 120 + 0.01  # 120 s, and the test's time
    assert samples["delayq_live_workers", "default"] == 0
    assert samples["delayq_queue_paused", "default"] == 0
    assert (
        samples["delayq_pending_jobs", "emails"] == 1 and samples["delayq_due_jobs", "emails"] == 0
    )
    assert samples["delayq_live_workers", "emails"] == 1
    assert samples["delayq_lag_seconds", "emails"] == 0
    # a registry of its own per request: the process's global one stays clean
    assert not any(n.startswith("delayq_") for n in prometheus_client.REGISTRY._names_to_collectors)


def test_batches_per_state(store, client):
    """delayq_batches: open (a member not ended) and done, from two ZCARDs."""
    from django_delayq import batch, cancel_batch
    from django_delayq.batches import forwarding

    def scrape() -> dict:
        with more_settings(store, METRICS_TOKEN=TOKEN):
            response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        return values(text_string_to_metric_families(response.content.decode()))[1]

    assert scrape()["delayq_batches", "open"] == scrape()["delayq_batches", "done"] == 0
    with batch(on_complete=t.add.call(1, 2)):
        t.add.schedule(1, 1)
    with batch() as waiting:
        t.add.schedule(2, 2, delay=600)
    with batch():
        pass  # no member, no callback: done when sealed
    samples = scrape()
    assert (samples["delayq_batches", "open"], samples["delayq_batches", "done"]) == (2, 1)
    assert Worker(["default"], burst=True).run() == 0  # the first batch's member, its callback
    # Done once its callback is stored: the forwarding that stored it closes it.
    samples = scrape()
    assert (samples["delayq_batches", "open"], samples["delayq_batches", "done"]) == (1, 2)
    forwarding.sweep(store, ["default"], now=time.time() + 61)  # changes nothing
    assert scrape()["delayq_batches", "open"] == 1
    assert cancel_batch(waiting.id) == 1
    samples = scrape()
    assert (samples["delayq_batches", "open"], samples["delayq_batches", "done"]) == (0, 3)


def test_the_limited_counter_says_it_counts_hold_backs():
    """Issue 26: delayq_jobs_limited_total read 573 for 43 jobs: it counts each time a claim
    held a job back. The name is kept (dashboards use it); its HELP says what it counts."""
    from django_delayq.monitoring.metrics import COUNTERS as DEFINED

    (help_text,) = [text for name, text, _ in DEFINED if name == "delayq_jobs_limited"]
    assert help_text.startswith("Hold-backs, not jobs: each time a claim held a due job back")


def test_openmetrics_when_the_scraper_asks_for_it(store, client):
    t.add.schedule(1, 2)
    with more_settings(store, METRICS_TOKEN=TOKEN):
        response = client.get(
            URL,
            HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
            HTTP_ACCEPT="application/openmetrics-text; version=1.0.0, text/plain;q=0.5",
        )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    _, samples = values(openmetrics_families(response.content.decode()))
    assert samples["delayq_pending_jobs", "default"] == 1


def test_who_may_read_the_metrics(store, client):
    anonymous = client.get(URL)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer anything").status_code == 401  # no token set
    with more_settings(store, METRICS_TOKEN=TOKEN):
        assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 401
        assert client.get(URL, HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
        assert client.get(URL, HTTP_AUTHORIZATION=f"bearer {TOKEN}").status_code == 200
        assert client.post(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405
    user = User.objects.create_user("ops", password="x", is_staff=False)
    client.force_login(user)
    assert client.get(URL).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(User.objects.get(pk=user.pk))  # a fresh permission cache
    assert client.get(URL).status_code == 200
    client.logout()
    assert client.get(URL).status_code == 401


def test_503_when_redis_cannot_be_read(store, client):
    with more_settings(store, METRICS_TOKEN=TOKEN, REDIS_URL="redis://127.0.0.1:1/0"):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 503 and b"Redis cannot be read" in response.content
