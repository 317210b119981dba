"""The admin dashboard through Django's test client: pages, actions, permissions, CSRF,
escaping, pagination. Read-only pages run on fakeredis and the real server; actions on the
real server (the same Lua scripts a worker runs)."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_delayq import schedule, signals
from django_delayq.admin_views import ALL_MATCHING_LIMIT, humanize, preview
from django_delayq.job import Job, encode_record, new_job_id
from django_delayq.store import Store
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


Q = "default"
XSS = "<script>alert(1)</script>"


def url(name: str, *args: str, **query: str) -> str:
    base = reverse(f"admin:django_delayq_job_{name}", args=args)
    if query:
        base += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return base


def staff(*codenames: str, username: str = "staff") -> User:
    user = User.objects.create_user(username, is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_delayq", codename=codename)
        )
    return User.objects.get(pk=user.pk)  # fresh permission cache


def client_for(user: User, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def msgs(response) -> list[str]:
    """The messages shown after a POST (followed, so each page consumes its own)."""
    if response.context is not None and "messages" in response.context:
        return [str(m) for m in response.context["messages"]]
    return [str(m) for m in get_messages(response.wsgi_request)]


def location(response) -> str:
    return response.redirect_chain[-1][0] if response.redirect_chain else response["Location"]


def text(response) -> str:
    return response.content.decode()


def schedule_overdue(store: Store, seconds: float, *args) -> str:
    """A pending job whose due time is ``seconds`` in the past (as if no worker ran)."""
    job_id = new_job_id()
    record = encode_record("tests.testapp.tasks.add", list(args or (1, 2)), {})
    store.schedule(Q, job_id, record, delay=0, now=time.time() - seconds)
    return job_id


def make_running(store: Store, queue: str = Q, worker: str = "web-1.4242") -> str:
    job = schedule(testtasks.add, 1, 2, queue=queue)
    claim = store.claim(queue, 1, lease=90, token=f"{worker}#{new_job_id()}", instance=worker)
    assert [c.id for c in claim.jobs] == [job.id]
    store.call(store.mark_op(queue, job.id, claim.now + 90))  # its runner started it
    return job.id


def make_dead(store: Store, *args, queue: str = Q, message: str = "boom") -> str:
    job = schedule(testtasks.always_fails, *args, queue=queue)
    token = f"w-dead#{new_job_id()}"  # one token per claim: the same one would be a re-send
    store.claim(queue, 1, lease=90, token=token, instance="w-dead")
    error = {
        "type": "builtins.ValueError",
        "message": message,
        "traceback": 'Traceback (most recent call last):\n  File "tasks.py"\nValueError: '
        + message,
        "attempt": 1,
        "at": time.time(),
        "worker": "w-dead",
    }
    outcome, _ = store.fail(
        queue,
        job.id,
        token,
        error,
        delay=-1,
        default_max_retries=0,
        dead_max_age=3600,
        dead_max_count=1000,
        max_errors=10,
    )
    assert outcome == "dead"
    return job.id


# -- entry, permissions --------------------------------------------------------


def test_admin_index_lists_the_dashboard(store, admin_client):
    response = admin_client.get(reverse("admin:index"))
    assert response.status_code == 200
    assert url("changelist") in text(response)
    assert "Delayed jobs" in text(response)


PAGES = [
    ("changelist", ()),
    ("pending", ()),
    ("running", ()),
    ("dead", ()),
    ("detail", (Q, "01JXXXXXXXXXXXXXXXXXXXXXXX")),
    ("purge", (Q,)),
]


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_anonymous_is_sent_to_the_login_page(fake_store, client, name, args):
    response = client.get(url(name, *args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_anonymous_post_changes_nothing(real_store, client):
    job = schedule(testtasks.add, 1, 2, delay=60)
    response = client.post(url("action"), {"action": "cancel", "queue": Q, "ids": [job.id]})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert real_store.fetch(Q, job.id).status == "pending"


def test_non_staff_user_cannot_enter(fake_store):
    user = User.objects.create_user("u", is_staff=False)
    response = client_for(user).get(url("changelist"))
    assert response.status_code == 302


@pytest.mark.parametrize(("name", "args"), [*PAGES, ("find", ())])
def test_staff_without_view_permission_gets_403(fake_store, name, args):
    response = client_for(staff()).get(url(name, *args), {"q": "x"})
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("action", "codename", "state"),
    [
        ("cancel", "cancel_job", "pending"),
        ("run_now", "run_job", "pending"),
        ("requeue", "requeue_job", "dead"),
        ("delete", "delete_job", "dead"),
    ],
)
def test_each_action_needs_its_own_permission(real_store, action, codename, state):
    job_id = schedule(testtasks.add, 1, 2, delay=600).id if state == "pending" else None
    job_id = job_id or make_dead(real_store)
    everything = ("view_job", "cancel_job", "run_job", "requeue_job", "delete_job")
    others = [c for c in everything if c != codename]
    user = staff(*others)
    before = real_store.fetch(Q, job_id)
    response = client_for(user).post(url("action"), {"action": action, "queue": Q, "ids": job_id})
    assert response.status_code == 403
    response = client_for(user).post(url("action"), {"one": f"{action}:{job_id}", "queue": Q})
    assert response.status_code == 403
    assert real_store.fetch(Q, job_id) == before
    # With the permission (and nothing else) it works.
    allowed = staff(codename, username="allowed")
    response = client_for(allowed).post(
        url("action"), {"action": action, "queue": Q, "ids": job_id}
    )
    assert response.status_code == 302
    assert msgs(response)[0].startswith("1 job ")


def test_purge_needs_delete_permission(real_store):
    make_dead(real_store)
    viewer = client_for(staff("view_job"))
    assert viewer.get(url("purge", Q)).status_code == 403
    assert viewer.post(url("purge", Q)).status_code == 403
    assert real_store.size(Q, "dead") == 1


def test_admin_index_lists_the_dashboard_only_for_viewers(fake_store):
    index = reverse("admin:index")
    link = url("changelist")
    assert link not in text(client_for(staff("delete_job", "cancel_job")).get(index))
    assert link in text(client_for(staff("view_job", username="viewer")).get(index))


def test_viewer_sees_no_action_controls(store):
    schedule(testtasks.add, 1, 2, delay=60)
    response = client_for(staff("view_job")).get(url("pending"))
    assert response.status_code == 200
    assert 'name="ids"' not in text(response)
    assert 'name="one"' not in text(response)


# -- dashboard -----------------------------------------------------------------------


def test_dashboard_empty_state(store, admin_client):
    response = admin_client.get(url("changelist"))
    assert response.status_code == 200
    body = text(response)
    assert 'data-queue="default"' in body
    assert "<svg" in body and "http" not in body.split("<svg", 1)[1].split("</svg>", 1)[0][10:]
    assert re.search(r"Purge dead", body) is None


def test_dashboard_counts_lag_and_throughput(store, admin_client):
    make_dead(store)
    for value in (3, 4):
        schedule(testtasks.add, value, value)
    claim = store.claim(Q, 5, lease=60, token="w#x", instance="w")
    assert len(claim.jobs) == 2
    store.ack(Q, [(c.id, "w#x", "") for c in claim.jobs])
    make_running(store)
    schedule(testtasks.add, 1, 2, delay=3600)
    schedule(testtasks.send_mail, "a@example.com", delay=60)  # queue "emails"
    response = admin_client.get(url("changelist"))
    queues = {q["name"]: q for q in response.context["queues"]}
    default = queues["default"]
    assert (default["pending"], default["due"], default["running"], default["dead"]) == (
        1,
        0,
        1,
        1,
    )
    assert queues["emails"]["pending"] == 1
    assert default["done_total"] == 2 and default["failed_total"] == 1
    body = text(response)
    assert 'class="dq-done"' in body and 'class="dq-failed"' in body
    assert "Purge dead" in body


def test_dashboard_lag_of_oldest_overdue_job(store, admin_client):
    schedule_overdue(store, 300)
    response = admin_client.get(url("changelist"))
    default = response.context["queues"][0]
    assert default["due"] == 1
    assert 299 <= default["lag"] < 330
    assert "5 min" in text(response)


# -- lists --------------------------------------------------------------------------


def test_pending_list_is_sorted_by_due_time_with_relative_times(store, admin_client):
    late = schedule(testtasks.add, 1, 2, delay=3600, key="order:1")
    soon = schedule(testtasks.add, 3, 4, delay=29 * 60 + 30)
    overdue = schedule_overdue(store, 200, 5, 6)
    response = admin_client.get(url("pending"))
    rows = response.context["rows"]
    assert [r.job.id for r in rows] == [overdue, soon.id, late.id]
    assert rows[0].when == "3 min overdue" and rows[0].overdue
    assert rows[1].when == "in 29 min"
    body = text(response)
    assert "order:1" in body and "3, 4" in body
    assert "Pending · default" in body  # breadcrumbs (<ol> on Django 6.1+, <div> before)


def test_running_list_shows_lease_and_worker(store, admin_client):
    make_running(store, worker="host-7.991")
    body = text(admin_client.get(url("running")))
    assert "host-7.991" in body
    assert "lease ends in 1 min" in body


def test_dead_list_shows_died_at_and_last_error(store, admin_client):
    make_dead(store, message="card declined")
    response = admin_client.get(url("dead"))
    assert "builtins.ValueError: card declined" in text(response)
    assert response.context["rows"][0].when.endswith(" ago")
    assert "Purge all dead" in text(response)


@pytest.mark.parametrize("status", ["pending", "running", "dead"])
def test_empty_lists(store, admin_client, status):
    response = admin_client.get(url(status))
    assert response.status_code == 200
    assert f"No {response.context['status_title'].lower()} jobs in default." in text(response)


def test_pagination_edges(store, admin_client):
    from django_delayq import schedule_many

    jobs = schedule_many(testtasks.add, [{"args": [i, i], "delay": 60 + i} for i in range(120)])
    ids = [j.id for j in jobs]

    def page(**query):
        response = admin_client.get(url("pending", **query))
        assert response.status_code == 200
        return response.context["page"], [r.job.id for r in response.context["rows"]]

    p, rows = page()
    assert p.number == 1 and rows == ids[:50] and p.paginator.num_pages == 3
    p, rows = page(p="3")
    assert rows == ids[100:]
    for bad in ("0", "-4", "abc", "999999"):
        p, rows = page(p=bad)  # get_page(): invalid -> 1, past the end -> last
        assert p.number == (3 if bad == "999999" else 1)
    p, rows = page(per_page="7", p="2")
    assert rows == ids[7:14]
    p, rows = page(per_page="0")
    assert len(rows) == 1
    p, rows = page(per_page="100000")
    assert len(rows) == 120
    body = text(admin_client.get(url("pending", p="2")))
    assert "showing 51 to 100" in body and 'rel="next"' in body and 'rel="prev"' in body


def test_filter_by_queue_and_task(store, admin_client):
    a = schedule(testtasks.add, 1, 2, delay=60)
    schedule(testtasks.remember, "x", delay=61)
    mail = schedule(testtasks.send_mail, "a@example.com", delay=62)
    response = admin_client.get(url("pending", task="tests.testapp.tasks.add"))
    assert [r.job.id for r in response.context["rows"]] == [a.id]
    response = admin_client.get(url("pending", queue="emails"))
    assert [r.job.id for r in response.context["rows"]] == [mail.id]
    response = admin_client.get(url("pending", task="no.such.task"))
    assert response.context["rows"] == []
    assert "No pending jobs of no.such.task in default" in text(response)
    assert admin_client.get(url("pending", queue="bad%20name")).status_code == 404


def test_task_filter_pages_with_a_cursor(store, admin_client):
    from django_delayq import schedule_many

    adds = schedule_many(testtasks.add, [{"args": [i, i], "delay": 100 + 2 * i} for i in range(5)])
    schedule_many(testtasks.remember, [{"args": [i], "delay": 101 + 2 * i} for i in range(5)])
    query = {"task": "tests.testapp.tasks.add", "per_page": "2"}
    response = admin_client.get(url("pending", **query))
    assert [r.job.id for r in response.context["rows"]] == [adds[0].id, adds[1].id]
    next_url = response.context["next_url"]
    assert "from=3" in next_url
    response = admin_client.get(next_url)
    assert [r.job.id for r in response.context["rows"]] == [adds[2].id, adds[3].id]
    response = admin_client.get(response.context["next_url"])
    assert [r.job.id for r in response.context["rows"]] == [adds[4].id]
    assert response.context["next_url"] == ""


# -- find and detail ------------------------------------------------------------------


def test_find_by_id_and_by_unique_key(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=60, key="invoice:7")
    mail = schedule(testtasks.send_mail, "x@example.com", key="mail:1")
    detail = url("detail", Q, job.id)
    assert admin_client.get(url("find", q=job.id))["Location"] == detail
    assert admin_client.get(url("find", q="invoice:7"))["Location"] == detail
    assert admin_client.get(url("find", q="mail:1"))["Location"] == url("detail", "emails", mail.id)
    response = admin_client.get(url("find", q="nothing-here"))
    assert response["Location"] == url("changelist")
    assert "No job has the id or unique key “nothing-here”" in msgs(response)[0]
    assert admin_client.get(url("find"))["Location"] == url("changelist")


def test_detail_shows_every_field_and_every_error(store, admin_client):
    job_id = make_dead(store, "x" * 300, message="first")
    response = admin_client.get(url("detail", Q, job_id))
    assert response.status_code == 200
    body = text(response)
    assert job_id in body and "tests.testapp.tasks.always_fails" in body
    assert "x" * 300 in body  # full arguments, not the preview
    assert "ValueError: first" in body and "Traceback (most recent call last)" in body
    assert "w-dead" in body
    assert [a.name for a in response.context["actions"]] == ["requeue", "delete"]


def test_detail_of_a_missing_job_is_404(store, admin_client):
    response = admin_client.get(url("detail", Q, "01J0000000000000000000000Z"))
    assert response.status_code == 404
    assert "No job 01J0000000000000000000000Z in queue default" in text(response)
    assert admin_client.get(url("detail", "bad{queue", "x")).status_code == 404


def test_redis_data_is_escaped_everywhere(store, admin_client):
    job = schedule(testtasks.add, XSS, {"k": XSS}, delay=60, key=XSS)
    dead_id = make_dead(store, XSS, message=XSS)
    pages = [
        url("pending"),
        url("detail", Q, job.id),
        url("dead"),
        url("detail", Q, dead_id),
        url("pending", task=XSS),
    ]
    for page in pages:
        body = text(admin_client.get(page))
        assert "<script>alert" not in body, page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body, page


# -- actions (real Redis) -------------------------------------------------------------


def _post(client: Client, **data):
    data.setdefault("queue", Q)
    return client.post(url("action"), data, follow=True)


def test_bulk_cancel_reports_jobs_already_gone_and_sends_signals(real_store, admin_client):
    jobs = [schedule(testtasks.add, i, i, delay=600) for i in range(4)]
    ids = [j.id for j in jobs]
    real_store.cancel(Q, job_id=ids[3])  # gone meanwhile
    seen: list[Job] = []

    def receiver(sender, job, **kwargs):
        seen.append(job)

    signals.job_cancelled.connect(receiver)
    try:
        response = _post(admin_client, action="cancel", ids=ids, next=url("pending"))
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert location(response) == url("pending")
    assert msgs(response) == ["3 jobs cancelled, 1 was already gone."]
    assert real_store.size(Q, "pending") == 0
    assert sorted(j.id for j in seen) == sorted(ids[:3])
    assert {j.status for j in seen} == {"cancelled"}


def test_cancel_of_a_job_a_worker_claimed_meanwhile_is_reported(real_store, admin_client):
    job_id = make_running(real_store)
    response = _post(admin_client, one=f"cancel:{job_id}")
    assert msgs(response) == ["0 jobs cancelled, 1 is being run by a worker."]
    assert real_store.fetch(Q, job_id).status == "running"
    gone = schedule(testtasks.add, 1, 2, delay=600)
    response = _post(admin_client, action="cancel", ids=[job_id, gone.id, "no-such-id"])
    assert msgs(response) == ["1 job cancelled, 1 is being run by a worker, 1 was already gone."]


def test_cancel_releases_the_unique_key(real_store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=600, key="k1")
    _post(admin_client, one=f"cancel:{job.id}")
    assert real_store.id_for_key(Q, "k1") is None


def test_run_now(real_store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=3600)
    response = _post(admin_client, action="run_now", ids=[job.id, "gone-id"])
    assert msgs(response) == ["1 job made due now, 1 was no longer pending."]
    raw = real_store.fetch(Q, job.id)
    assert raw.status == "pending" and raw.score <= real_store.server_time()


def test_requeue_resets_attempts(real_store, admin_client):
    dead_id = make_dead(real_store)
    response = _post(admin_client, action="requeue", ids=[dead_id, dead_id])
    assert msgs(response) == ["1 job requeued."]
    from django_delayq import get_job

    job = get_job(dead_id)
    assert job.status == "pending" and job.attempts == 0 and len(job.errors) == 1


def test_delete_dead(real_store, admin_client):
    dead_ids = [make_dead(real_store) for _ in range(2)]
    response = _post(admin_client, action="delete", ids=dead_ids)
    assert msgs(response) == ["2 jobs deleted."]
    assert real_store.size(Q, "dead") == 0 and real_store.fetch(Q, dead_ids[0]) is None
    response = _post(admin_client, action="delete", ids=dead_ids)
    assert msgs(response) == ["0 jobs deleted, 2 were already gone."]


def test_all_matching_with_a_task_filter(real_store, admin_client):
    adds = [schedule(testtasks.add, i, i, delay=600 + i) for i in range(3)]
    keep = schedule(testtasks.remember, 1, delay=601)
    response = _post(
        admin_client,
        action="cancel",
        select_across="1",
        task="tests.testapp.tasks.add",
        ids=[adds[0].id],
    )
    assert msgs(response) == ["3 jobs cancelled."]
    assert real_store.page_ids(Q, "pending", 0, 10) == [keep.id]


def test_all_matching_requeues_the_whole_dead_set(real_store, admin_client):
    for _ in range(3):
        make_dead(real_store)
    response = _post(admin_client, action="requeue", select_across="1")
    assert msgs(response) == ["3 jobs requeued."]
    assert real_store.size(Q, "dead") == 0 and real_store.size(Q, "pending") == 3


def test_all_matching_is_capped(real_store, admin_client, monkeypatch):
    from django_delayq import admin_views

    monkeypatch.setattr(admin_views, "ALL_MATCHING_LIMIT", 2)
    for i in range(3):
        schedule(testtasks.add, i, i, delay=600)
    response = _post(admin_client, action="cancel", select_across="1")
    assert msgs(response)[0] == "2 jobs cancelled."
    assert "Stopped after 2 jobs" in msgs(response)[1]
    assert real_store.size(Q, "pending") == 1
    assert ALL_MATCHING_LIMIT == 10_000


def test_all_matching_run_now_skips_jobs_already_due(real_store, admin_client, monkeypatch):
    from django_delayq import admin_views

    monkeypatch.setattr(admin_views, "ALL_MATCHING_LIMIT", 2)
    overdue = [schedule_overdue(real_store, 60) for _ in range(3)]
    later = [schedule(testtasks.add, i, i, delay=3600 + i).id for i in range(2)]
    response = _post(admin_client, action="run_now", select_across="1")
    assert msgs(response) == ["2 jobs made due now."]
    now = real_store.server_time()
    assert all(real_store.fetch(Q, job_id).score <= now for job_id in overdue + later)


def test_all_matching_task_search_says_how_far_it_looked(real_store, admin_client, monkeypatch):
    from django_delayq import admin_views

    monkeypatch.setattr(admin_views, "ALL_SCAN", 3)
    others = [schedule(testtasks.remember, i, delay=600 + i) for i in range(3)]
    far = schedule(testtasks.add, 1, 1, delay=700)
    fields = {"action": "cancel", "select_across": "1", "task": "tests.testapp.tasks.add"}
    response = _post(admin_client, **fields)
    assert msgs(response)[0] == "0 jobs cancelled."
    assert msgs(response)[1] == (
        "Only the first 3 pending jobs of queue default were searched for "
        "tests.testapp.tasks.add; jobs further back were not touched."
    )
    assert real_store.size(Q, "pending") == 4
    for job in others:
        real_store.cancel(Q, job_id=job.id)
    response = _post(admin_client, **fields)
    assert msgs(response) == ["1 job cancelled."]
    assert real_store.fetch(Q, far.id) is None
    response = _post(admin_client, **fields)
    assert msgs(response) == ["No pending jobs matched."]


def test_action_edge_cases(real_store, admin_client):
    assert admin_client.get(url("action")).status_code == 405
    response = _post(admin_client, action="explode", ids=["x"])
    assert msgs(response) == ["Choose an action."]
    response = _post(admin_client, action="cancel")
    assert msgs(response) == ["No jobs were selected: tick the jobs to act on."]
    # An off-site "next" is ignored.
    job = schedule(testtasks.add, 1, 2, delay=600)
    response = _post(admin_client, action="run_now", ids=[job.id], next="https://evil.example/")
    assert location(response) == url("pending", queue=Q)
    assert _post(admin_client, action="cancel", ids=[job.id], queue="no good").status_code == 404


def test_detail_page_actions_return_to_the_list_when_the_job_is_gone(real_store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=600)
    detail = url("detail", Q, job.id)
    body = text(admin_client.get(detail))
    assert f'value="run_now:{job.id}"' in body and f'value="cancel:{job.id}"' in body
    response = _post(admin_client, one=f"run_now:{job.id}", next=detail, from_detail="1")
    assert location(response) == detail
    response = _post(admin_client, one=f"cancel:{job.id}", next=detail, from_detail="1")
    assert location(response) == url("pending", queue=Q)


def test_purge_with_confirmation(real_store, admin_client):
    for _ in range(3):
        make_dead(real_store)
    pending = schedule(testtasks.add, 1, 2, delay=600)
    response = admin_client.get(url("purge", Q))
    assert response.status_code == 200
    assert "all 3 dead jobs" in text(response)
    assert real_store.size(Q, "dead") == 3  # GET changes nothing
    shown = re.search(r'name="died_before" value="([0-9.]+)"', text(response)).group(1)
    time.sleep(0.01)
    later = make_dead(real_store)  # died after the page was shown: kept
    response = admin_client.post(url("purge", Q), {"died_before": shown}, follow=True)
    assert location(response) == url("dead", queue=Q)
    assert msgs(response) == ["Purged 3 dead jobs of queue default."]
    assert real_store.page_ids(Q, "dead", 0, 10) == [later]
    response = admin_client.post(url("purge", Q), follow=True)  # no time posted: all
    assert msgs(response) == ["Purged 1 dead job of queue default."]
    assert real_store.size(Q, "dead") == 0
    assert real_store.fetch(Q, pending.id).status == "pending"
    assert "has no dead jobs" in text(admin_client.get(url("purge", Q)))


# -- CSRF ----------------------------------------------------------------------------


def test_actions_and_purge_enforce_csrf(real_store, admin_user):
    job = schedule(testtasks.add, 1, 2, delay=600)
    make_dead(real_store)
    client = client_for(admin_user, enforce_csrf_checks=True)
    response = client.post(url("action"), {"action": "cancel", "queue": Q, "ids": [job.id]})
    assert response.status_code == 403
    assert client.post(url("purge", Q)).status_code == 403
    assert real_store.fetch(Q, job.id).status == "pending"
    assert real_store.size(Q, "dead") == 1
    # With the token from the page it goes through.
    page = client.get(url("pending"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', text(page)).group(1)
    response = client.post(
        url("action"),
        {"action": "cancel", "queue": Q, "ids": [job.id], "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    assert real_store.fetch(Q, job.id) is None


# -- helpers ---------------------------------------------------------------------------


def test_humanize_and_preview():
    assert [humanize(s) for s in (5, 59.9, 60, 3599, 3600, 3660, 86400, 90000)] == [
        "5 s",
        "59 s",
        "1 min",
        "59 min",
        "1 h",
        "1 h 1 min",
        "1 d",
        "1 d 1 h",
    ]
    job = Job(id="x", task="t.t", args=[42, "a"], kwargs={"r": None}, queue=Q, status="pending")
    assert preview(job) == '42, "a", r=null'
    long = Job(id="x", task="t.t", args=["y" * 500], kwargs={}, queue=Q, status="pending")
    assert len(preview(long)) == 120 and preview(long).endswith("…")


def test_admin_reads_of_the_store(store):
    jobs = [schedule(testtasks.add, i, i, delay=60 + i, key=f"k{i}") for i in range(3)]
    ids = [j.id for j in jobs]
    assert store.size(Q, "pending") == 3 and store.size(Q, "dead") == 0
    assert store.page_ids(Q, "pending", 1, 5) == ids[1:]
    assert store.page_ids(Q, "pending", 0, 0) == [] and store.page_ids(Q, "pending", -1, 2) == []
    assert store.id_for_key(Q, "k2") == ids[2] and store.id_for_key(Q, "nope") is None
    with pytest.raises(ValueError):
        store.size(Q, "done")
