"""The admin dashboard through Django's test client: pages, actions, confirmations,
permissions, CSRF, escaping, pagination, URLs. Read-only pages run on fakeredis and the
real server; actions on the real server (the same Lua scripts a worker runs). Every
action here goes through the HTML the admin serves, without JavaScript: a cancel or
delete posts the confirmation page's own form (see ``confirm``)."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import Client, override_settings
from django.urls import reverse

from django_delayq import schedule, signals
from django_delayq.admin.actions import ALL_MATCHING_LIMIT
from django_delayq.admin.views import duration, preview
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import Job
from django_delayq.jobs.record import encode_record
from django_delayq.storage.store import Store
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
    """The page's HTML, with the no-break spaces of Django's timesince as plain spaces."""
    return response.content.decode().replace("\xa0", " ")


class _Forms(HTMLParser):
    """The forms of a page: action, and the name/value of each input."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"action": attrs.get("action", ""), "fields": [], "ids": []})
        elif tag == "input" and self.forms:
            self.forms[-1]["ids"].append(attrs.get("id"))
            if attrs.get("name"):
                self.forms[-1]["fields"].append((attrs["name"], attrs.get("value", "")))


def confirm(client: Client, page, button: str = "dq-confirm-yes"):
    """Post the form holding the input #``button`` (as a browser without JavaScript
    would: its fields as they are), following the redirect."""
    assert page.status_code == 200, page.status_code
    parser = _Forms()
    parser.feed(page.content.decode())
    (form,) = [f for f in parser.forms if button in f["ids"]]
    data: dict[str, list[str]] = {}
    for name, value in form["fields"]:
        data.setdefault(name, []).append(value)
    return client.post(form["action"] or page.wsgi_request.path, data, follow=True)


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
    ("purge", ()),
    ("workers", ()),
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
    # Nor can it post a confirmation page's form.
    confirmed = {"action": action, "queue": Q, "job_ids": job_id, "confirmed": "yes"}
    assert client_for(user).post(url("action"), confirmed).status_code == 403
    assert real_store.fetch(Q, job_id) == before
    # With the permission (and nothing else) it works: cancel and delete after asking.
    allowed = client_for(staff(codename, username="allowed"))
    response = allowed.post(url("action"), {"action": action, "queue": Q, "ids": job_id})
    if action in ("cancel", "delete"):
        assert response.status_code == 200
        assert real_store.fetch(Q, job_id) == before
        response = confirm(allowed, response)
    else:
        response = allowed.get(response["Location"])
    assert msgs(response)[0].startswith("1 job ")
    assert real_store.fetch(Q, job_id) != before


def test_purge_needs_delete_permission(real_store):
    make_dead(real_store)
    viewer = client_for(staff("view_job"))
    assert viewer.get(url("purge", queue=Q)).status_code == 403
    assert viewer.post(url("purge"), {"queue": Q}).status_code == 403
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


def test_every_page_says_redis_cannot_be_read_when_it_is_down(admin_client, caplog):
    """Redis refusing connections: each page, GET or POST, answers 503 with a page saying
    so (the error escaped), never a server error; the error is logged. (Each page spends
    the API's 2 s budget of retries: four pages, one of each kind.)"""
    pages = [
        ("get", url("changelist"), {}),
        ("get", url("finished", queue="default", q="<b>x</b>"), {}),
        ("get", url("detail", "default", "01J0000000000000000000000Z"), {}),
        ("post", url("queue"), {"queue": "default", "operation": "pause"}),
    ]
    with override_settings(DELAYQ={"REDIS_URL": "redis://127.0.0.1:1/0"}):
        for method, address, data in pages:
            response = getattr(admin_client, method)(address, data)
            assert response.status_code == 503, (address, response.status_code)
            body = text(response)
            assert 'id="dq-unavailable"' in body and "unreachable" in body, address
            assert "<b>x</b>" not in body
    assert "django-delayq admin: GET" in caplog.text and "unreachable" in caplog.text


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
    assert (default["finished"], queues["emails"]["finished"]) == (2, 0)  # the two acked, kept
    body = text(response)
    finished_link = f'<a href="{url("finished")}?queue=default" class="dq-finished"'
    assert finished_link in body
    assert 'class="dq-done"' in body and 'class="dq-failed"' in body
    assert "Purge dead" in body


def test_dashboard_lag_of_oldest_overdue_job(store, admin_client):
    placed = time.time()
    schedule_overdue(store, 300)
    response = admin_client.get(url("changelist"))
    default = response.context["queues"][0]
    assert default["due"] == 1
    assert 300 - 0.01 <= default["lag"] <= time.time() - placed + 300 + 0.01
    assert "5 minutes" in text(response)


# -- lists --------------------------------------------------------------------------


def test_pending_list_is_sorted_by_due_time_with_relative_times(store, admin_client):
    late = schedule(testtasks.add, 1, 2, delay=3600, key="order:1")
    soon = schedule(testtasks.add, 3, 4, delay=29 * 60 + 30)
    overdue = schedule_overdue(store, 200, 5, 6)
    response = admin_client.get(url("pending"))
    rows = response.context["rows"]
    assert [r.job.id for r in rows] == [overdue, soon.id, late.id]
    assert rows[0].when == "3\xa0minutes overdue" and rows[0].overdue
    assert rows[1].when == "in 29\xa0minutes"
    body = text(response)
    assert "order:1" in body and "3, 4" in body
    assert "Pending · default" in body  # breadcrumbs (<ol> on Django 6.1+, <div> before)


def test_pending_list_says_it_is_sorted_by_priority_then_due_time(store, admin_client):
    """A job of a higher priority due later is listed before one due earlier: the page
    says so (it said nothing, and read as a list by due time)."""
    earlier = schedule(testtasks.add, 1, 2, delay=60)
    urgent = schedule(testtasks.add, 3, 4, delay=3600, priority=10)
    response = admin_client.get(url("pending"))
    assert [r.job.id for r in response.context["rows"]] == [urgent.id, earlier.id]
    order = re.search(r'<p class="dq-quiet" id="dq-order">(.*?)</p>', text(response)).group(1)
    assert order.startswith(
        "In the order workers claim them: by priority, the highest first, then by due time"
    )
    for status, said in (
        ("running", "then by lease deadline"),
        ("dead", "By time of death, the oldest first."),
        ("finished", "By when they finished, the newest first."),
    ):
        assert said in text(admin_client.get(url(status))), status


def test_attempts_read_the_same_on_the_list_and_the_job_page(store, admin_client):
    """They read "0 / 4" on the list and "0 (retries allowed: 3)" on the job page."""
    job = schedule(testtasks.add, 1, 2, delay=600, max_retries=3)
    meaning = (
        "attempts made, a running one included, of the attempts allowed: the first and up "
        "to 3 retries"
    )
    listed = text(admin_client.get(url("pending")))
    row = re.search(rf'<tr data-job-id="{job.id}">.*?</tr>', listed, re.S).group(0)
    cell = re.search(r'<td class="num dq-attempts"[^>]*>(.*?)</td>', row).group(0)
    expected = f'<td class="num dq-attempts" data-label="Attempts" title="{meaning}">0 of 4</td>'
    assert cell == expected
    page = text(admin_client.get(url("detail", Q, job.id)))
    shown = re.search(r'<td id="dq-job-attempts">(.*?)</td>', page).group(1)
    assert shown == f'0 of 4 <span class="dq-quiet">({meaning})</span>'
    assert 'title="attempts made of attempts allowed">Attempts</th>' in listed


def test_running_list_shows_lease_and_worker(store, admin_client):
    make_running(store, worker="host-7.991")
    body = text(admin_client.get(url("running")))
    assert "host-7.991" in body
    assert "lease ends in 1 minute" in body


def test_dead_list_shows_died_at_and_last_error(store, admin_client):
    make_dead(store, message="card declined")
    response = admin_client.get(url("dead"))
    assert "builtins.ValueError: card declined" in text(response)
    assert response.context["rows"][0].when.endswith(" ago")
    assert "Purge all dead" in text(response)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("pending", "No pending jobs in default."),
        ("running", "No jobs in progress in default."),
        ("dead", "No dead jobs in default."),
    ],
)
def test_empty_lists(store, admin_client, status, message):
    response = admin_client.get(url(status))
    assert response.status_code == 200
    body = text(response)
    assert message in body
    # Nothing to select, so no checkboxes and no action bar.
    assert 'id="dq-toggle"' not in body and 'type="checkbox"' not in body
    assert 'name="action"' not in body


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


def test_redis_data_is_escaped_everywhere(real_store, admin_client):
    nasty = XSS + "\"'&"
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;"
    job = schedule(testtasks.add, nasty, {"k": nasty}, delay=60, key=nasty)
    dead_id = make_dead(real_store, nasty, message=nasty)
    with_data = [  # pages that show the jobs' key, arguments or errors
        admin_client.get(url("pending")),
        admin_client.get(url("detail", Q, job.id)),
        admin_client.get(url("dead")),
        admin_client.get(url("detail", Q, dead_id)),
        # The confirmation pages: one job, ticked jobs, all matching.
        _post(admin_client, one=f"cancel:{job.id}", next=url("detail", Q, job.id)),
        _post(admin_client, action="delete", ids=[dead_id]),
        _post(admin_client, action="cancel", select_across="1"),
    ]
    for response in with_data:
        assert escaped in text(response), response.wsgi_request.get_full_path()
    echoing = [  # pages that show what was typed
        admin_client.get(url("pending", task=XSS)),
        admin_client.get(url("find", q=XSS), follow=True),  # in the warning
    ]
    for response in echoing:
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text(response)
    for response in [*with_data, *echoing, admin_client.get(url("purge", queue=Q))]:
        assert response.status_code == 200
        assert "<script>alert" not in text(response), response.wsgi_request.get_full_path()
    assert real_store.fetch(Q, job.id) is not None and real_store.size(Q, "dead") == 1


# -- URLs ------------------------------------------------------------------------------


def test_job_pages_have_one_job_segment_and_old_urls_redirect(store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=60)
    detail = url("detail", Q, job.id)
    assert detail == f"/admin/django_delayq/job/{Q}/{job.id}/"
    assert "/job/job/" not in text(admin_client.get(url("pending")))
    old = f"/admin/django_delayq/job/job/{Q}/{job.id}/"
    response = admin_client.get(old)
    assert response.status_code == 301 and response["Location"] == detail
    assert admin_client.get(detail).status_code == 200
    # A queue named like a page still has job pages: only they have two segments.
    mail = schedule(testtasks.add, 1, 2, delay=60, queue="purge")
    assert admin_client.get(url("detail", "purge", mail.id)).context["job"].id == mail.id


# -- actions (real Redis) -------------------------------------------------------------


def _post(client: Client, **data):
    data.setdefault("queue", Q)
    return client.post(url("action"), data, follow=True)


def test_bulk_cancel_asks_then_reports_jobs_gone_and_sends_signals(real_store, admin_client):
    jobs = [schedule(testtasks.add, i, i, delay=600) for i in range(4)]
    ids = [j.id for j in jobs]
    real_store.cancel(Q, job_id=ids[3])  # gone meanwhile
    seen: list[Job] = []

    def receiver(sender, job, **kwargs):
        seen.append(job)

    page = _post(admin_client, action="cancel", ids=ids, next=url("pending"))
    # The confirmation page: nothing cancelled yet, every job listed, the gone one too.
    assert page.status_code == 200 and not page.redirect_chain
    assert page.context["title"] == "Cancel 4 pending jobs?"
    body = text(page)
    assert all(f'data-job-id="{job_id}"' in body for job_id in ids)
    assert "already gone" in body and "This cannot be undone." in body
    assert 'value="Yes, cancel them"' in body and "No, take me back" in body
    assert real_store.size(Q, "pending") == 3
    signals.job_cancelled.connect(receiver)
    try:
        response = confirm(admin_client, page)
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert location(response) == url("pending")
    assert msgs(response) == ["3 jobs cancelled, 1 was already gone."]
    assert real_store.size(Q, "pending") == 0
    assert sorted(j.id for j in seen) == sorted(ids[:3])
    assert {j.status for j in seen} == {"cancelled"}


def test_cancel_confirmation_lists_twenty_and_counts_the_rest(real_store, admin_client):
    from django_delayq import schedule_many

    ids = [j.id for j in schedule_many(testtasks.add, [{"args": [i, i]} for i in range(23)])]
    page = _post(admin_client, action="cancel", ids=ids)
    assert len(page.context["shown"]) == 20
    assert "…and 3 more jobs." in text(page)
    assert text(page).count("data-job-id=") == 20
    page = _post(admin_client, one=f"cancel:{ids[0]}")
    assert page.context["title"] == "Cancel 1 pending job?"
    assert 'value="Yes, cancel it"' in text(page) and "more job" not in text(page)


def test_taking_the_way_back_changes_nothing(real_store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=600)
    detail = url("detail", Q, job.id)
    page = _post(admin_client, one=f"cancel:{job.id}", next=detail, from_detail="1")
    back = re.search(r'<a href="([^"]+)" class="button cancel-link"', text(page)).group(1)
    assert back == detail
    assert admin_client.get(back).status_code == 200
    assert real_store.fetch(Q, job.id).status == "pending"


def test_cancel_of_a_job_a_worker_claimed_meanwhile_is_reported(real_store, admin_client):
    job_id = make_running(real_store)
    response = confirm(admin_client, _post(admin_client, one=f"cancel:{job_id}"))
    assert msgs(response) == ["0 jobs cancelled, 1 is being run by a worker."]
    assert real_store.fetch(Q, job_id).status == "running"
    gone = schedule(testtasks.add, 1, 2, delay=600)
    page = _post(admin_client, action="cancel", ids=[job_id, gone.id, "no-such-id"])
    response = confirm(admin_client, page)
    assert msgs(response) == ["1 job cancelled, 1 is being run by a worker, 1 was already gone."]


def test_cancel_releases_the_unique_key(real_store, admin_client):
    job = schedule(testtasks.add, 1, 2, delay=600, key="k1")
    confirm(admin_client, _post(admin_client, one=f"cancel:{job.id}"))
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


def test_delete_dead_asks_first(real_store, admin_client):
    dead_ids = [make_dead(real_store) for _ in range(2)]
    page = _post(admin_client, action="delete", ids=dead_ids)
    assert page.context["title"] == "Delete 2 dead jobs?"
    assert "builtins.ValueError: boom" in text(page)  # the last errors, before they go
    assert real_store.size(Q, "dead") == 2
    response = confirm(admin_client, page)
    assert msgs(response) == ["2 jobs deleted."]
    assert real_store.size(Q, "dead") == 0 and real_store.fetch(Q, dead_ids[0]) is None
    response = confirm(admin_client, _post(admin_client, action="delete", ids=dead_ids))
    assert msgs(response) == ["0 jobs deleted, 2 were already gone."]


def test_all_matching_cancel_acts_on_the_jobs_it_counted(real_store, admin_client):
    adds = [schedule(testtasks.add, i, i, delay=600 + i) for i in range(3)]
    keep = schedule(testtasks.remember, 1, delay=601)
    page = _post(
        admin_client,
        action="cancel",
        select_across="1",
        task="tests.testapp.tasks.add",
        ids=[adds[0].id],
    )
    assert page.context["title"] == "Cancel 3 pending jobs?"
    assert real_store.size(Q, "pending") == 4
    later = schedule(testtasks.add, 9, 9, delay=600)  # scheduled after the page: kept
    response = confirm(admin_client, page)
    assert msgs(response) == ["3 jobs cancelled."]
    assert real_store.page_ids(Q, "pending", 0, 10) == [later.id, keep.id]


def test_all_matching_requeues_the_whole_dead_set_after_asking(real_store, admin_client):
    for _ in range(3):
        make_dead(real_store)
    page = _post(admin_client, action="requeue", select_across="1")
    assert page.context["title"] == "Requeue 3 dead jobs?"  # every "all matching" asks
    assert real_store.size(Q, "dead") == 3
    response = confirm(admin_client, page)
    assert msgs(response) == ["3 jobs requeued."]
    assert real_store.size(Q, "dead") == 0 and real_store.size(Q, "pending") == 3


def test_all_matching_is_capped(real_store, admin_client, monkeypatch):
    from django_delayq.admin import actions as admin_actions

    monkeypatch.setattr(admin_actions, "ALL_MATCHING_LIMIT", 2)
    for i in range(3):
        schedule(testtasks.add, i, i, delay=600)
    body = text(admin_client.get(url("pending")))
    assert "the first 2 of the 3 pending jobs of default" in body
    page = _post(admin_client, action="cancel", select_across="1")
    assert page.context["title"] == "Cancel 2 pending jobs?"
    note = "Only the first 2 matching jobs are included; run the action again for the rest."
    assert note in text(page)
    response = confirm(admin_client, page)
    assert msgs(response) == ["2 jobs cancelled.", note]
    assert real_store.size(Q, "pending") == 1
    assert ALL_MATCHING_LIMIT == 10_000


def test_all_matching_run_now_skips_jobs_already_due(real_store, admin_client, monkeypatch):
    from django_delayq.admin import actions as admin_actions

    monkeypatch.setattr(admin_actions, "ALL_MATCHING_LIMIT", 2)
    overdue = [schedule_overdue(real_store, 60) for _ in range(3)]
    later = [schedule(testtasks.add, i, i, delay=3600 + i).id for i in range(2)]
    response = confirm(admin_client, _post(admin_client, action="run_now", select_across="1"))
    assert msgs(response) == ["2 jobs made due now."]
    now = real_store.server_time()
    assert all(real_store.fetch(Q, job_id).score <= now for job_id in overdue + later)


def test_all_matching_task_search_says_how_far_it_looked(real_store, admin_client, monkeypatch):
    from django_delayq.admin import actions as admin_actions

    monkeypatch.setattr(admin_actions, "ALL_SCAN", 3)
    others = [schedule(testtasks.remember, i, delay=600 + i) for i in range(3)]
    far = schedule(testtasks.add, 1, 1, delay=700)
    fields = {"action": "cancel", "select_across": "1", "task": "tests.testapp.tasks.add"}
    searched = (
        "Only the first 3 pending jobs of queue default were searched for "
        "tests.testapp.tasks.add; jobs further back are left alone."
    )
    response = _post(admin_client, **fields)
    assert msgs(response) == ["No pending jobs matched.", searched]
    assert real_store.size(Q, "pending") == 4
    for job in others:
        real_store.cancel(Q, job_id=job.id)
    response = confirm(admin_client, _post(admin_client, **fields))
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
    response = _post(admin_client, action="cancel", confirmed="yes", job_ids="")
    assert msgs(response) == ["No jobs were selected: tick the jobs to act on."]
    # An off-site "next" is ignored, on the confirmation page's way back too.
    job = schedule(testtasks.add, 1, 2, delay=600)
    response = _post(admin_client, action="run_now", ids=[job.id], next="https://evil.example/")
    assert location(response) == url("pending", queue=Q)
    page = _post(admin_client, action="cancel", ids=[job.id], next="https://evil.example/")
    assert "evil.example" not in text(page)
    assert _post(admin_client, action="cancel", ids=[job.id], queue="no good").status_code == 404


def test_job_page_actions_land_on_the_list(real_store, admin_client):
    """Run now, cancel, requeue and delete from a job's page: the job leaves the page's
    state (a job due now is claimed at once), so the admin shows its list, not a 404."""
    job = schedule(testtasks.add, 1, 2, delay=600)
    detail = url("detail", Q, job.id)
    body = text(admin_client.get(detail))
    assert f'value="run_now:{job.id}"' in body and f'value="cancel:{job.id}"' in body
    response = _post(admin_client, one=f"run_now:{job.id}", next=detail, from_detail="1")
    assert location(response) == url("pending", queue=Q)
    assert response.status_code == 200 and msgs(response) == ["1 job made due now."]
    page = _post(admin_client, one=f"cancel:{job.id}", next=detail, from_detail="1")
    assert page.context["title"] == "Cancel 1 pending job?"
    response = confirm(admin_client, page)
    assert location(response) == url("pending", queue=Q)
    assert msgs(response) == ["1 job cancelled."]
    dead_id = make_dead(real_store)
    detail = url("detail", Q, dead_id)
    response = _post(admin_client, one=f"requeue:{dead_id}", next=detail, from_detail="1")
    assert location(response) == url("pending", queue=Q)
    real_store.cancel(Q, job_id=dead_id)  # else make_dead() would claim it
    dead_id = make_dead(real_store)
    detail = url("detail", Q, dead_id)
    page = _post(admin_client, one=f"delete:{dead_id}", next=detail, from_detail="1")
    response = confirm(admin_client, page)
    assert location(response) == url("dead", queue=Q)
    # An action that changed nothing returns to the job's page, which tells why.
    running = make_running(real_store)
    detail = url("detail", Q, running)
    response = _post(admin_client, one=f"run_now:{running}", next=detail, from_detail="1")
    assert location(response) == detail
    assert response.context["job"].status == "running"


def test_purge_with_confirmation(real_store, admin_client):
    for _ in range(3):
        make_dead(real_store)
    pending = schedule(testtasks.add, 1, 2, delay=600)
    response = admin_client.get(url("purge", queue=Q))
    assert response.status_code == 200
    assert "all 3 dead jobs" in text(response)
    assert 'value="Yes, purge them"' in text(response)
    assert real_store.size(Q, "dead") == 3  # GET changes nothing
    time.sleep(0.01)
    later = make_dead(real_store)  # died after the page was shown: kept
    response = confirm(admin_client, response, "dq-purge")
    assert location(response) == url("dead", queue=Q)
    assert msgs(response) == ["Purged 3 dead jobs of queue default."]
    assert real_store.page_ids(Q, "dead", 0, 10) == [later]
    response = admin_client.get(url("purge", queue=Q))
    body = text(response)
    assert "Delete <strong>1 dead job</strong>" in body and "all 1" not in body
    assert 'value="Yes, purge it"' in body
    response = admin_client.post(url("purge"), {"queue": Q}, follow=True)  # no time: all
    assert msgs(response) == ["Purged 1 dead job of queue default."]
    assert real_store.size(Q, "dead") == 0
    assert real_store.fetch(Q, pending.id).status == "pending"
    assert "has no dead jobs" in text(admin_client.get(url("purge", queue=Q)))


def test_purge_buttons_are_the_admins_confirmation_buttons(real_store, admin_client):
    """Both are styled by the admin's own .delete-confirmation rules, which give a submit
    input and a.cancel-link the same padding (the browser test measures them)."""
    make_dead(real_store)
    body = text(admin_client.get(url("purge", queue=Q)))
    form = body.split('<div class="delete-confirmation">', 1)[1].split("</form>", 1)[0]
    assert re.search(r'<input type="submit" value="[^"]+" id="dq-purge">', form)
    assert 'class="button cancel-link"' in form and "<button" not in form


# -- CSRF ----------------------------------------------------------------------------


def test_actions_and_purge_enforce_csrf(real_store, admin_user):
    job = schedule(testtasks.add, 1, 2, delay=600)
    make_dead(real_store)
    client = client_for(admin_user, enforce_csrf_checks=True)
    response = client.post(url("action"), {"action": "cancel", "queue": Q, "ids": [job.id]})
    assert response.status_code == 403
    confirmed = {"action": "cancel", "queue": Q, "job_ids": job.id, "confirmed": "yes"}
    assert client.post(url("action"), confirmed).status_code == 403
    assert client.post(url("purge"), {"queue": Q}).status_code == 403
    assert real_store.fetch(Q, job.id).status == "pending"
    assert real_store.size(Q, "dead") == 1
    # With the token from the page it goes through, the confirmation page's form too.
    page = client.get(url("pending"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', text(page)).group(1)
    response = client.post(
        url("action"),
        {"action": "cancel", "queue": Q, "ids": [job.id], "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 200
    assert real_store.fetch(Q, job.id) is not None
    response = confirm(client, response)
    assert msgs(response) == ["1 job cancelled."]
    assert real_store.fetch(Q, job.id) is None


# -- helpers ---------------------------------------------------------------------------


def test_duration_and_preview():
    spans = [(0, 1), (0, 5), (0, 59.9), (0, 60), (3600, 0), (0, 3660), (0, 86400), (0, 90000)]
    assert [duration(a, b) for a, b in spans] == [
        "1\xa0second",
        "5\xa0seconds",
        "59\xa0seconds",
        "1\xa0minute",
        "1\xa0hour",
        "1\xa0hour, 1\xa0minute",
        "1\xa0day",
        "1\xa0day, 1\xa0hour",
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
