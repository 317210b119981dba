"""A roster entry of the wrong type (a hash where a worker's description should be, left by
hand or by another program under the prefix) or garbage: every surface that reads the
roster answers normally, without that entry (the Workers tab names it), rather than
500 / 503 / exit 2, which would make a liveness probe on ``delayq_status`` restart every
worker. Fakeredis and the real server."""

from __future__ import annotations

import json
import time

import pytest

from django_delayq.monitoring import health
from tests.conftest import more_settings
from tests.test_admin import Q, text, url
from tests.test_admin_workers import beat
from tests.test_metrics import TOKEN, URL, values
from tests.test_workers import status

pytestmark = pytest.mark.django_db


def plant(store) -> list[str]:
    """A live worker, then three entries no worker wrote: a hash, a list, and a string that
    is not JSON, each listed on the roster as a worker would be."""
    beat(store, "web-1~1", queues=[Q])
    planted = ["hash~1", "list~2", "junk~3"]
    store.client.hset(store.worker_key("hash~1"), "name", "not a description")
    store.client.rpush(store.worker_key("list~2"), "x")
    store.client.set(store.worker_key("junk~3"), b"\xff{not json")
    store.client.zadd(store.workers_key, {p: int(time.time() * 1000) for p in planted})
    return planted


def test_the_roster_read_skips_wrong_typed_entries_and_names_them(store, caplog):
    plant(store)
    unreadable: list[str] = []
    workers = store.roster.live(store.server_time(), unreadable)
    assert sorted(w.instance for w in workers) == ["junk~3", "web-1~1"]  # garbage: no details
    assert sorted(unreadable) == [store.worker_key("hash~1"), store.worker_key("list~2")]
    assert "hash~1" in caplog.text and "WRONGTYPE" in caplog.text
    caplog.clear()
    store.roster.live(store.server_time())
    assert "hash~1" not in caplog.text  # logged once per process, not at every read
    assert store.client.zscore(store.workers_key, "hash~1") is not None  # left for the operator


def test_dashboard_and_workers_tab_answer(store, admin_client):
    plant(store)
    dashboard = admin_client.get(url("changelist"))
    assert dashboard.status_code == 200
    queues = {q["name"]: q for q in dashboard.context["queues"]}
    assert queues[Q]["workers"] == 1
    workers = admin_client.get(url("workers"))
    assert workers.status_code == 200
    assert sorted(r.worker.instance for r in workers.context["rows"]) == ["junk~3", "web-1~1"]
    body = text(workers)
    assert "2 keys of the workers' roster could not be read" in body
    assert f"{store.worker_key('hash~1')}, {store.worker_key('list~2')}" in body


def test_metrics_answer(store, client):
    plant(store)
    with more_settings(store, METRICS_TOKEN=TOKEN):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    from prometheus_client.parser import text_string_to_metric_families

    _, samples = values(text_string_to_metric_families(response.content.decode()))
    assert samples["delayq_live_workers", Q] == 1


def test_delayq_status_answers(store):
    plant(store)
    code, out, err = status()
    last = out.splitlines()[-1]
    assert code == 0 and last.startswith("OK: ") and last.endswith("healthy, 2 live workers")
    keys = [store.worker_key("hash~1"), store.worker_key("list~2")]
    assert f"roster entries of another type, left out: {keys[0]}, {keys[1]}" in err
    code, out, _ = status("--json")
    report = json.loads(out)
    assert code == 0 and sorted(w["instance"] for w in report["workers"]) == ["junk~3", "web-1~1"]
    assert report["unreadable_roster_entries"] == keys
    report = health.report(store)
    assert {q.queue: q.workers for q in report.queues}[Q] == 1


def test_a_roster_of_the_wrong_type_reads_as_no_worker_and_is_named(store, admin_client, client):
    store.client.hset(store.workers_key, "x", "1")
    unreadable: list[str] = []
    assert store.roster.live(store.server_time(), unreadable) == []
    assert unreadable == [store.workers_key]
    assert admin_client.get(url("changelist")).status_code == 200
    workers = admin_client.get(url("workers"))
    assert workers.status_code == 200 and store.workers_key in text(workers)
    with more_settings(store, METRICS_TOKEN=TOKEN):
        assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    code, _, err = status()
    assert code == 0 and store.workers_key in err  # nothing due: healthy
