"""The admin's Finished list (jobs kept since they succeeded or were cancelled), a kept job's
page and its timeline, and the admin log (Django's LogEntry) every action that changes jobs
writes, through Django's test client on fakeredis and the real server (``store``)."""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User
from django.db import DatabaseError
from django.utils import timezone

from django_delayq import cancel, schedule, schedule_many
from django_delayq.admin import audit
from django_delayq.admin.sets import kept_record
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.test_admin import (
    XSS,
    _post,
    client_for,
    confirm,
    make_dead,
    msgs,
    schedule_overdue,
    staff,
    text,
    url,
)
from tests.test_admin_search import shown_ids, summary
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db

Q = "default"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def succeed(store: Store, ids: list[str], worker: str = "web-1", ran_ms: float = 2.5) -> None:
    """What a worker does for due jobs that succeed: claim them, acknowledge them with the
    attempt that ended them (storage/finished.py's summary: number, start, duration, due
    time (here '-', not known), worker)."""
    token = f"{worker}#{new_job_id()}"
    claim = store.claim(Q, len(ids), lease=60, token=token, instance=worker)
    assert sorted(c.id for c in claim.jobs) == sorted(ids)
    started = round(claim.now * 1000) - 10
    acks = [(job_id, token, "", f"1 {started} {ran_ms:.3f} - {worker}") for job_id in ids]
    assert store.ack(Q, acks) == [1] * len(ids)


def finished_rows(response) -> list[tuple[str, str]]:
    """(job id, outcome) of the finished list's rows, in order."""
    return re.findall(
        r'<tr data-job-id="([^"]+)">.*?class="dq-outcome dq-outcome-(\w+)"', text(response), re.S
    )


def events(response) -> list[str]:
    """The kinds of the job page's timeline events, in order."""
    return re.findall(r'<li class="dq-event [^"]*" data-kind="(\w+)">', text(response))


# -- the finished list ---------------------------------------------------------------


def test_finished_list_shows_succeeded_and_cancelled_jobs_escaped(store, admin_client):
    nasty = store.schedule(Q, new_job_id(), encode_record(XSS, [XSS], {"k": XSS}), delay=0)
    succeed(store, [nasty.id], worker=XSS, ran_ms=16.4)
    cancelled = schedule(testtasks.remember, XSS, delay=600)
    assert cancel(cancelled.id)
    schedule(testtasks.add, 1, 2, delay=600)  # pending: not on the finished list

    response = admin_client.get(url("finished", queue=Q))
    assert response.status_code == 200
    assert finished_rows(response) == [(cancelled.id, "cancelled"), (nasty.id, "succeeded")]
    body = text(response)
    assert "<script>" not in body.replace('<script src="', "")
    assert body.count(ESCAPED) >= 3  # the task, its arguments and the worker, escaped
    assert "16.4 ms" in body  # the last attempt's run time
    assert "2 finished jobs, showing 1 to 2." in body
    assert 'name="action"' not in body and 'name="ids"' not in body  # no bulk actions
    assert response.context["status"] == "finished"
    # The tab is there, beside the others, on every page.
    tabs = text(admin_client.get(url("changelist")))
    assert f'href="{url("finished")}"' in tabs


def test_finished_list_pages_and_counts(store, admin_client):
    calls = [{"args": [i, 0]} for i in range(120)]
    ids = [job.id for job in schedule_many(testtasks.add, calls)]
    succeed(store, ids)
    assert store.finished.count(Q) == 120
    first = admin_client.get(url("finished", queue=Q, per_page="50"))
    assert len(shown_ids(first)) == 50
    assert "120 finished jobs, showing 1 to 50." in text(first)
    last = admin_client.get(url("finished", queue=Q, per_page="50", p="3"))
    assert "120 finished jobs, showing 101 to 120." in text(last)
    listed = shown_ids(first) + shown_ids(admin_client.get(url("finished", per_page="50", p="2")))
    listed += shown_ids(last)
    assert sorted(listed) == sorted(ids) and len(set(listed)) == 120  # each once, newest first
    assert listed == [job_id for job_id, _ in store.finished.page(Q, 0, 120)]
    empty = admin_client.get(url("finished", queue="emails"))
    assert "No finished jobs kept in emails" in text(empty)


def test_search_on_the_finished_list_finds_the_one_among_300(store, admin_client):
    calls = [{"kwargs": {"customer": f"cust-{i:04d}"}} for i in range(300)]
    ids = [job.id for job in schedule_many(testtasks.remember, calls)]
    succeed(store, ids)
    live = schedule(testtasks.remember, customer="cust-0142", delay=600)  # pending: not listed
    response = admin_client.get(url("finished", queue=Q, q="cust-0142"))
    assert shown_ids(response) == [ids[142]]
    assert summary(response) == "1 job matches “cust-0142”. Searched all 300 finished jobs."
    assert shown_ids(admin_client.get(url("finished", q='customer="CUST-0142"'))) == [ids[142]]
    task = admin_client.get(url("finished", q="cust-014", task="tests.testapp.tasks.add"))
    assert shown_ids(task) == []  # the task filter applies too
    # The exact id of a finished job, searched on the pending list: said to have finished.
    pending = text(admin_client.get(url("pending", q=ids[7])))
    assert f"Job {ids[7]}, whose id this is, has finished" in pending
    assert shown_ids(admin_client.get(url("pending", q="cust-0142"))) == [live.id]


def test_a_search_reads_at_most_its_limit_of_kept_jobs(store, admin_client, monkeypatch):
    from django_delayq.admin import search

    monkeypatch.setattr(search, "SEARCH_LIMIT", 100)
    ids = [job.id for job in schedule_many(testtasks.add, [{"args": [i, 0]} for i in range(150)])]
    succeed(store, ids)
    newest_first = [job_id for job_id, _ in store.finished.page(Q, 0, 150)]
    response = admin_client.get(url("finished", q="tests.testapp.tasks.add", per_page="500"))
    assert shown_ids(response) == newest_first[:100]
    assert "Searched the 100 newest of the 150 finished jobs" in summary(response)


def test_a_damaged_or_trimmed_kept_entry_does_not_break_the_list(store, admin_client):
    ids = [job.id for job in schedule_many(testtasks.add, [{"args": [i, 0]} for i in range(2)])]
    succeed(store, ids)
    store.client.hset(store.key(Q, "kept"), ids[0], b"garbage")
    store.client.hdel(store.key(Q, "kept"), ids[1])  # trimmed between the ZRANGE and the HMGET
    response = admin_client.get(url("finished", queue=Q))
    assert response.status_code == 200 and sorted(shown_ids(response)) == sorted(ids)
    assert admin_client.get(url("finished", q="add")).status_code == 200
    damaged = admin_client.get(url("detail", Q, ids[0]))  # shown raw, as a corrupt record
    assert damaged.status_code == 200 and "garbage" in text(damaged)
    assert "corrupt record" in text(damaged)
    assert kept_record(b"garbage") is None and kept_record(None) is None


# -- a finished job's page and its timeline ------------------------------------------------


def test_job_page_of_a_job_that_failed_once_then_succeeded(store, admin_client):
    """The issue's case, run by a real (burst) worker: both attempts, each with its worker
    and run time, the error with its traceback folded, the retry, the end."""
    job = testtasks.fails_first_attempt.schedule("x")
    worker = Worker(["default"], burst=True)
    assert worker.run() == 0
    response = admin_client.get(url("detail", Q, job.id))
    assert response.status_code == 200
    assert response.context["status_title"] == "Succeeded"
    assert events(response) == ["scheduled", "failed", "due", "succeeded", "end"]
    body = text(response)
    timeline = body[body.index('id="dq-timeline"') :]
    assert "Attempt 1 failed" in timeline and "Attempt 2 succeeded" in timeline
    assert timeline.count(f"worker {worker.name}") == 2
    assert timeline.count(" ms</span>") + timeline.count(" s</span>") >= 2  # both ran ...
    assert "builtins.ValueError</strong>: first attempt of x" in timeline
    assert "<details" in timeline and "Traceback (most recent call last)" in timeline
    assert "retried at once" in timeline  # retry_backoff=0
    assert re.search(r"· [0-9.,]+ (ms|s) after due</span>", timeline)  # the success's lateness
    assert 'id="dq-finished-at"' in body and "Last attempt" in body
    crumbs = [label for label, _ in response.context["crumbs"]]
    assert "Finished · default" in crumbs
    assert response.context["actions"] == []  # nothing to act on


def test_timeline_of_a_pending_job_with_a_retry_wait_and_an_old_error(store, admin_client):
    job = schedule(testtasks.add, 1, 2)
    token = f"w-9#{new_job_id()}"
    store.claim(Q, 1, lease=60, token=token, instance="w-9")
    new = {"type": "builtins.KeyError", "message": "k", "attempt": 1, "at": time.time()}
    new.update(worker="w-9", duration=0.25, retry_in=2.5)
    store.fail(Q, job.id, token, new, delay=3600, default_max_retries=5, **_dead_opts())
    token = f"w-9#{new_job_id()}"
    store.client.zadd(store.key(Q, "pending"), {job.id: 0})  # due again at once
    store.claim(Q, 1, lease=60, token=token, instance="w-9")
    old = {"type": "builtins.OSError", "message": "an error of 0.6", "attempt": 2}
    old["at"] = time.time()  # before 0.7: no duration, no wait, no worker
    store.fail(Q, job.id, token, old, delay=600, default_max_retries=5, **_dead_opts())
    response = admin_client.get(url("detail", Q, job.id))
    assert events(response) == ["scheduled", "failed", "failed", "due"]
    timeline = text(response)[text(response).index('id="dq-timeline"') :]
    assert "retried in 2.50 s" in timeline and "ran 250.0 ms" in timeline
    assert timeline.count("retried") == 1 and timeline.count("ran ") == 1  # unknown: not shown
    assert "No traceback recorded." in timeline


def test_a_running_job_s_attempt_in_progress_says_when_it_started(store, admin_client):
    """The timeline's attempt in progress has the start its worker's last beat gave (the
    Workers tab's figure); without a live worker saying so, "time unknown"."""
    from tests.test_admin import make_running
    from tests.test_admin_workers import beat

    job_id = make_running(store, worker="web-1.4242~1a2b")
    page = text(admin_client.get(url("detail", Q, job_id)))
    running = page[page.index('data-kind="running"') :]
    assert running.index("time unknown") < running.index("Attempt 1 in progress")
    before = time.time()
    beat(store, "web-1.4242~1a2b", running=[[Q, job_id, testtasks.add.name, 42.0]])
    page = text(admin_client.get(url("detail", Q, job_id)))
    after = time.time()
    running = page[page.index('data-kind="running"') :]
    started = re.search(r'<time datetime="([^"]+)"', running[: running.index("in progress")])
    assert started is not None, running[:400]
    at = datetime.fromisoformat(started.group(1)).timestamp()
    # 42 s before the beat, placed between ``before`` and ``after`` (as early as the page's
    # read of its TTL came after the page's now: see test_workers)
    assert before - (after - before) - 42 - 0.01 <= at <= after - 42 + 0.01


def _dead_opts() -> dict:
    return {"dead_max_age": 3600, "dead_max_count": 100, "max_errors": 10}


def test_a_kept_job_is_found_by_id_and_a_missing_one_is_still_404(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=600)
    assert cancel(job.id)
    found = admin_client.get(url("find", q=job.id))
    assert found.status_code == 302 and found["Location"] == url("detail", Q, job.id)
    page = admin_client.get(url("detail", Q, job.id))
    assert page.status_code == 200 and events(page) == ["scheduled", "end"]
    due = timezone.localtime(job.due_at).strftime("%Y-%m-%d %H:%M:%S")
    assert f"was due {due}" in text(page)
    assert page.context["status_title"] == "Cancelled"
    missing = admin_client.get(url("detail", Q, "01J0000000000000000000000Z"))
    assert missing.status_code == 404 and events(missing) == []
    # By its unique key too (freed when it ended: only the kept record says it), the newest
    # kept job of that key; a key no job had is still not found.
    schedule_many(testtasks.add, [{"args": [i, i], "delay": 600} for i in range(5)])
    first = schedule(testtasks.add, 5, 6, delay=600, key="reminder:42")
    assert cancel(first.id)
    second = schedule(testtasks.add, 7, 8, delay=600, key="reminder:42")
    assert cancel(second.id)
    found = admin_client.get(url("find", q="reminder:42"))
    assert found.status_code == 302 and found["Location"] == url("detail", Q, second.id)
    nothing = admin_client.get(url("find", q="reminder:4"), follow=True)
    assert "No job has the id or unique key “reminder:4”" in text(nothing)


def test_finished_pages_need_view_job_and_staff(store, client):
    job = schedule(testtasks.add, 1, 2, delay=600)
    assert cancel(job.id)
    pages = [url("finished"), url("detail", Q, job.id), url("finished", q=job.id)]
    viewer = client_for(staff("view_job"))
    assert all(viewer.get(page).status_code == 200 for page in pages)
    nobody = client_for(staff(username="nobody"))
    assert all(nobody.get(page).status_code == 403 for page in pages)
    outsider = client_for(User.objects.create_user("outsider"))  # not staff
    assert all(outsider.get(page).status_code == 302 for page in pages)
    assert all(client.get(page).status_code == 302 for page in pages)  # anonymous


# -- the admin log ----------------------------------------------------------------------


def entries() -> list[tuple]:
    return [
        (e.user.username, e.object_id, e.object_repr, e.action_flag, e.change_message)
        for e in LogEntry.objects.order_by("pk")
    ]


def test_each_single_action_writes_a_log_entry_shown_on_the_job_page(store, admin_client):
    add = "tests.testapp.tasks.add"
    dead, gone = make_dead(store), make_dead(store)
    later = schedule(testtasks.add, 1, 2, delay=600)
    confirm(admin_client, _post(admin_client, one=f"cancel:{later.id}", from_detail="1"))
    soon = schedule(testtasks.add, 3, 4, delay=600)
    _post(admin_client, one=f"run_now:{soon.id}")
    _post(admin_client, one=f"requeue:{dead}")
    confirm(admin_client, _post(admin_client, one=f"delete:{gone}"))
    always = "tests.testapp.tasks.always_fails"
    assert entries() == [
        ("admin", later.id, add, CHANGE, "Cancelled"),
        ("admin", soon.id, add, CHANGE, "Ran now"),
        ("admin", dead, always, CHANGE, "Requeued"),
        ("admin", gone, always, DELETION, "Deleted"),
    ]
    assert {e.content_type.model_class().__name__ for e in LogEntry.objects.all()} == {"Job"}
    # The cancelled job's page: its end and who cancelled it.
    page = admin_client.get(url("detail", Q, later.id))
    assert events(page) == ["scheduled", "admin", "end"] or events(page) == [
        "scheduled",
        "end",
        "admin",
    ]
    assert 'Cancelled</strong> <span class="dq-quiet">· by admin</span>' in text(page)
    # The deleted one is gone, yet its page says who deleted it.
    deleted = admin_client.get(url("detail", Q, gone))
    assert deleted.status_code == 404 and events(deleted) == ["admin"]
    assert 'Deleted</strong> <span class="dq-quiet">· by admin</span>' in text(deleted)


def test_bulk_actions_write_one_entry_per_job_changed_in_chunks(
    store, admin_client, monkeypatch, django_assert_max_num_queries
):
    monkeypatch.setattr(audit, "LOG_CHUNK", 100)
    ids = [
        job.id
        for job in schedule_many(
            testtasks.add, [{"args": [i, 0], "delay": 600} for i in range(250)]
        )
    ]
    assert cancel(ids[0])  # gone before the action: missed, not logged
    page = _post(admin_client, action="cancel", select_across="1")
    assert page.context["count"] == 249
    done = confirm(admin_client, page)
    assert msgs(done) == ["249 jobs cancelled."]
    logged = LogEntry.objects.filter(change_message="Cancelled")
    assert sorted(logged.values_list("object_id", flat=True)) == sorted(ids[1:])
    assert set(logged.values_list("object_repr", flat=True)) == {"tests.testapp.tasks.add"}
    # Ticked jobs: each one changed, by the user who posted.
    operator = staff("view_job", "run_job", username="operator")
    ticked = [
        job.id
        for job in schedule_many(testtasks.add, [{"args": [i, 0], "delay": 600} for i in range(3)])
    ]
    client = client_for(operator)
    client.post(url("action"), {"queue": Q, "action": "run_now", "ids": [*ticked, "nope"]})
    ran = LogEntry.objects.filter(change_message="Ran now")
    assert sorted(ran.values_list("object_id", flat=True)) == sorted(ticked)
    assert set(ran.values_list("user__username", flat=True)) == {"operator"}
    with django_assert_max_num_queries(10):  # 250 entries: a few INSERTs, not one each
        audit.log(operator, "requeue", [(i, "t") for i in ids])


def test_a_database_that_refuses_the_log_never_breaks_the_action(
    store, admin_client, monkeypatch, caplog
):
    def refuse(*args, **kwargs):
        raise DatabaseError("disk full")

    monkeypatch.setattr(LogEntry.objects, "bulk_create", refuse)
    job = schedule(testtasks.add, 1, 2, delay=600)
    with caplog.at_level(logging.ERROR, logger="django_delayq.admin.audit"):
        done = confirm(admin_client, _post(admin_client, one=f"cancel:{job.id}"))
    assert msgs(done) == ["1 job cancelled."] and store.fetch(Q, job.id) is None
    assert "refused the entries of cancel" in caplog.text
    assert admin_client.get(url("detail", Q, job.id)).status_code == 200  # the page still works


def test_get_never_acts_nor_logs(store, admin_client):
    job_id = schedule_overdue(store, 60)
    assert (
        admin_client.get(url("action"), {"queue": Q, "one": f"cancel:{job_id}"}).status_code == 405
    )
    admin_client.get(url("detail", Q, job_id))
    admin_client.get(url("finished", q=job_id))
    assert store.fetch(Q, job_id).status == "pending" and LogEntry.objects.count() == 0


def test_purge_pause_and_batch_cancel_write_one_entry_each(store, admin_client):
    from django_delayq import batch

    make_dead(store), make_dead(store)
    page = admin_client.get(url("purge", queue=Q))
    confirm(admin_client, page, "dq-purge")
    confirm(admin_client, page, "dq-purge")  # posted again: none left to purge, no entry
    admin_client.post(url("queue"), {"queue": Q, "operation": "pause"})
    admin_client.post(url("queue"), {"queue": Q, "operation": "pause"})  # no change: no entry
    with batch() as made:
        schedule(testtasks.add, 1, 2, delay=600)
        schedule(testtasks.add, 3, 4, delay=600)
    admin_client.post(url("cancel_batch"), {"id": made.id})
    assert [(e[1], e[4]) for e in entries()] == [
        (Q, "Purged the dead jobs"),
        (Q, "Paused the queue"),
        (made.id, "Cancelled the batch"),
    ]
