"""Issue 36's counts in the monitoring: jobs expired and jobs rescheduled, per queue, in
delayq_status (text and JSON) and in /metrics (``delayq_jobs_expired_total``,
``delayq_jobs_rescheduled_total``). reschedule.lua counts a move once: a re-send after a lost
reply answers the first send and counts nothing. Over fakeredis and the real server."""

from __future__ import annotations

import json

import pytest

from django_delayq import reschedule
from django_delayq.admin.actions import ACTIONS
from django_delayq.jobs.ids import new_job_id
from tests.test_expiry import burst
from tests.test_reschedule_store import resent
from tests.test_workers import status
from tests.testapp import tasks as t

Q = "default"


def test_a_move_is_counted_once_a_resend_and_a_miss_not_at_all(store):
    job = t.add.schedule(1, 2, delay=60)
    op = store.reschedule_op(Q, job.id, delay=600)
    first = store.call(op)
    assert first is not None and store.totals(Q)["rescheduled"] == 1
    assert store.call(resent(op)) == first  # the mark answers: nothing moved again
    assert reschedule(new_job_id(), delay=5) is None  # nothing moved: not counted
    assert store.totals(Q)["rescheduled"] == 1
    assert reschedule(job.id, delay=5).id == job.id
    assert store.totals(Q)["rescheduled"] == 2


def test_delayq_status_shows_expired_and_rescheduled_per_queue(store):
    t.remember.schedule("late", expires=60)
    burst(offset=120)  # expired, never run
    job = t.add.schedule(1, 2, delay=60)
    reschedule(job.id, delay=600)
    reschedule(job.id, delay=900)
    code, out, _ = status("--queues", Q)
    header, row = out.splitlines()[:2]
    names = header.replace("in progress", "in_progress").split()
    cells = dict(zip(names, row.split(), strict=False))  # up to "lag": its "0.0 s" is two
    assert code == 0 and (cells["expired"], cells["rescheduled"]) == ("1", "2")
    code, out, _ = status("--queues", "emails", "--json")
    (emails,) = json.loads(out)["queues"]
    assert (emails["expired_total"], emails["rescheduled_total"]) == (0, 0)
    (default,) = json.loads(status("--queues", Q, "--json")[1])["queues"]
    assert (default["expired_total"], default["rescheduled_total"]) == (1, 2)


@pytest.mark.django_db
def test_the_metrics_count_moves_of_the_api_and_of_postpone(store, admin_client, client):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.conftest import more_settings
    from tests.test_admin import _post
    from tests.test_admin_postpone import confirm_with
    from tests.test_metrics import TOKEN, URL, values

    job = t.add.schedule(1, 2, delay=60)
    reschedule(job.id, delay=600)
    confirm_with(admin_client, _post(admin_client, action="postpone", ids=[job.id]))
    t.remember.schedule("late", expires=60)
    burst(offset=120)
    with more_settings(store, METRICS_TOKEN=TOKEN):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    _, samples = values(text_string_to_metric_families(response.content.decode()))
    assert samples["delayq_jobs_rescheduled_total", Q] == 2
    assert samples["delayq_jobs_expired_total", Q] == 1
    assert samples["delayq_jobs_rescheduled_total", "emails"] == 0


def test_run_now_and_postpone_share_one_missed_message():
    assert ACTIONS["postpone"].missed is ACTIONS["run_now"].missed
