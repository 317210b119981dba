"""The dashboard's History section (admin/history.py) through Django's test client: the chart
of each queue for the window ``?history=`` picks, staff with view_job only, nothing loaded
from outside, what comes from Redis or the URL escaped."""

from __future__ import annotations

import math

import pytest
from django.test import Client

from django_delayq.admin.history import BAR, HEIGHT, WINDOWS, history_chart, time_axis
from django_delayq.storage.history import Point, bucket_of, bucket_value
from tests.test_admin import XSS, client_for, staff, text, url
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def history_table(body: str) -> str:
    return body.split('id="dq-history"', 1)[1].split("</table>", 1)[0]


def test_the_dashboard_draws_each_queues_history(store, admin_client):
    testtasks.add.schedule(1, 2, delay=60)  # the queue exists
    minute = int(store.server_time() // 60)
    late = f"l{bucket_of(1500)}"
    store.history.flush({("default", minute): {"d": 12, "f": 3, "x": 1, late: 15}})
    response = admin_client.get(url("changelist"))
    assert response.status_code == 200
    [chart] = [h for h in response.context["history"] if h["name"] == "default"]
    assert (chart["chart"]["done"], chart["chart"]["failed"], chart["chart"]["dead"]) == (12, 3, 1)
    assert response.context["history_window"].key == "1h"
    table = history_table(text(response))
    assert 'data-queue="default"' in table and "<svg" in table
    assert 'class="dq-p50"' in table and 'class="dq-p99"' in table
    shown = f"{bucket_value(bucket_of(1500)) / 1000:.1f} s"  # the bucket's middle: 1.6 s
    assert f"12 done, 3 failed, 1 dead; lateness p50 {shown}, p99 {shown}" in table
    assert "http" not in table.split("<svg", 1)[1]  # nothing loaded from outside


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: w.key)
def test_each_window_shows_its_points(store, admin_client, window):
    testtasks.add.schedule(1, 2, delay=60)
    now = store.server_time()
    old = int(now // 60) - window.minutes + window.step  # inside the window, far back
    store.history.flush({("default", old): {"d": 4}})
    response = admin_client.get(url("changelist", history=window.key))
    [chart] = [h["chart"] for h in response.context["history"] if h["name"] == "default"]
    assert len(chart["bars"]) == window.minutes // window.step
    assert chart["done"] == 4
    assert f'<strong aria-current="true">{window.label}</strong>' in text(response)


def test_values_from_the_url_and_redis_are_escaped(store, admin_client, redis_client):
    testtasks.add.schedule(1, 2, delay=60)
    minute = int(store.server_time() // 60)
    store.history.flush({("default", minute): {"d": 1}})
    redis_client.hset(
        store.history_key("default", minute - minute % 10), XSS, XSS
    )  # garbage: skipped
    response = admin_client.get(url("changelist", history=XSS))
    body = text(response)
    assert response.status_code == 200 and XSS not in body
    assert response.context["history_window"].key == "1h"  # unknown: the default
    assert "1 done, 0 failed, 0 dead" in history_table(body)


def test_the_history_needs_staff_and_view_permission(fake_store):
    assert client_for(staff()).get(url("changelist")).status_code == 403
    response = client_for(staff("view_job", username="viewer")).get(url("changelist"))
    assert response.status_code == 200 and 'id="dq-history"' in text(response)
    anonymous = Client().get(url("changelist"))
    assert anonymous.status_code == 302  # to the admin's login


def test_the_chart_scales_bars_to_the_peak_and_lateness_to_a_log_scale():
    points = [Point(0, 1, done=10, failed=0), Point(60, 1, done=5, failed=5)]
    points[1].lateness = {bucket_of(10): 1, bucket_of(10_000): 1}
    chart = history_chart(points)
    first, second = chart["bars"]
    half = HEIGHT / 2
    assert first["done_h"] == HEIGHT and second["done_h"] == half == second["failed_h"]
    # one line point per point with attempts, at its middle; log scale from 1 ms (y HEIGHT)
    # to the highest p99 (y 0)
    p50, p99 = bucket_value(bucket_of(10)), bucket_value(bucket_of(10_000))
    y50 = round(HEIGHT - math.log10(p50) / math.log10(p99) * HEIGHT, 1)
    middle = f"{BAR * 1.5:g}"
    assert chart["lines"]["p50"] == f"{middle},{y50:g}" and chart["lines"]["p99"] == f"{middle},0"
    assert second["p99"] == f"{bucket_value(bucket_of(10_000)) / 1000:.1f} s"


def test_the_dashboard_says_when_history_is_off(store, admin_client):
    from tests.conftest import more_settings

    assert 'id="dq-history-off"' not in text(admin_client.get(url("changelist")))
    with more_settings(store, HISTORY=False):
        assert 'id="dq-history-off"' in text(admin_client.get(url("changelist")))


def test_the_chart_has_a_time_axis_in_the_admins_zone(settings):
    """It was a sparkline with no time on it: five labels at their bars' middles, the last
    with the zone; the date too when the window spans days."""
    settings.TIME_ZONE = "Europe/Berlin"
    start = 1_764_633_600  # 2025-12-02 00:00 UTC
    hour = [Point(start + 60 * i, 1) for i in range(60)]
    axis = time_axis(hour)
    assert [t["label"] for t in axis] == ["01:00", "01:15", "01:30", "01:45", "01:59 CET"]
    assert [t["left"] for t in axis] == [0.83, 25.83, 50.83, 75.83, 99.17]
    assert [t["edge"] for t in axis] == ["first", "", "", "", "last"]
    days = [Point(start + 1800 * i, 30) for i in range(144)]
    assert time_axis(days)[0]["label"] == "Dec 2, 01:00"
    assert time_axis(days)[-1]["label"] == "Dec 5, 00:30 CET"
    assert time_axis([]) == []
