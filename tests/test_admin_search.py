"""The lists' search (``?q=``, django_delayq/admin/search.py) and the bulk actions on what
it matches, through Django's test client, on fakeredis and the real server: what matches,
the bound on what one search reads, the confirmation before every "all matching" action,
what changed between the search and the POST, permissions, CSRF and escaping."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from django_delayq import schedule, schedule_many
from django_delayq.admin import search
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from tests.test_admin import (
    XSS,
    _post,
    client_for,
    confirm,
    make_dead,
    make_running,
    msgs,
    staff,
    text,
    url,
)
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db

Q = "default"


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def customers(count: int, delay: float = 600) -> list[str]:
    """``count`` pending jobs of remember(customer="cust-0000"...), due one second apart."""
    calls = [{"kwargs": {"customer": f"cust-{i:04d}"}, "delay": delay + i} for i in range(count)]
    return [job.id for job in schedule_many(testtasks.remember, calls)]


def shown_ids(response) -> list[str]:
    return re.findall(r'<tr data-job-id="([^"]+)"', text(response))


def summary(response) -> str:
    match = re.search(
        r'<p class="dq-search-summary" id="dq-search-summary">(.*?)</p>', text(response), re.S
    )
    assert match, "no search summary on the page"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


# -- what matches ----------------------------------------------------------------------


def test_an_argument_among_300_jobs_finds_exactly_the_one(store, admin_client):
    ids = customers(300)
    response = admin_client.get(url("pending", q="cust-0142"))
    assert response.status_code == 200
    assert shown_ids(response) == [ids[142]]
    assert summary(response) == "1 job matches “cust-0142”. Searched all 300 pending jobs."
    # Case does not matter; a keyword argument as the list shows it finds it too.
    assert shown_ids(admin_client.get(url("pending", q="CUST-0142"))) == [ids[142]]
    as_shown = admin_client.get(url("pending", q='customer="cust-0142"'))
    assert shown_ids(as_shown) == [ids[142]]
    # A substring: "cust-014" is ten customers, listed in the list's order.
    assert shown_ids(admin_client.get(url("pending", q="cust-014"))) == ids[140:150]
    nothing = admin_client.get(url("pending", q="cust-9999"))
    assert shown_ids(nothing) == [] and "0 jobs match “cust-9999”." in text(nothing)


def test_key_task_and_id_searches(store, admin_client):
    customers(5)
    keyed = schedule(testtasks.add, 1, 2, delay=700, key="Invoice:42")
    other = schedule(testtasks.add, 3, 4, delay=800)
    assert shown_ids(admin_client.get(url("pending", q="invoice:4"))) == [keyed.id]
    by_task = admin_client.get(url("pending", q="testapp.tasks.add"))
    assert shown_ids(by_task) == [keyed.id, other.id]
    assert shown_ids(admin_client.get(url("pending", q=other.id))) == [other.id]
    assert shown_ids(admin_client.get(url("pending", q=other.id[-10:].lower()))) == [other.id]
    # The task filter and the search together.
    both = admin_client.get(url("pending", task="tests.testapp.tasks.remember", q="cust-0003"))
    assert len(shown_ids(both)) == 1
    none = admin_client.get(url("pending", task="tests.testapp.tasks.add", q="cust-0003"))
    assert shown_ids(none) == []


def test_the_header_of_a_record_is_not_searched(store, admin_client):
    # Every record's header starts with its max_retries and flags ("3k..."): not text of
    # the job, so "3k" finds only the job whose id holds "3K" (ids are searched). The ids
    # are made here: random ones can all hold "3K" (20 made in one millisecond share most
    # of their characters), which left nothing the header could wrongly match.
    ids = [f"01JD000000{n:016d}" for n in range(4)] + ["01JD0000000000000000003K00"]
    for n, job_id in enumerate(ids):
        kwargs = {"customer": f"cust-{n:04d}"}
        record = encode_record(testtasks.remember.name, [], kwargs, max_retries=3)
        assert record.startswith(b"3k\n")
        store.schedule(Q, job_id, record, delay=600 + n)
    assert shown_ids(admin_client.get(url("pending", q="3k"))) == ids[-1:]


def test_in_progress_and_dead_lists_are_searched(store, admin_client):
    running = make_running(store)
    dead = make_dead(store, "card declined for order 77")
    make_dead(store, "card declined for order 78")
    assert shown_ids(admin_client.get(url("running", q="tasks.add"))) == [running]
    response = admin_client.get(url("dead", q="ORDER 77"))
    assert shown_ids(response) == [dead]
    assert "Searched all 2 dead jobs." in summary(response)
    # The exact id of a job in another list: said, with a link to its page.
    elsewhere = text(admin_client.get(url("pending", q=dead)))
    assert f"Job {dead}, whose id or unique key this is, is dead." in elsewhere
    assert url("detail", Q, dead) in elsewhere


def test_a_gone_or_corrupt_record_does_not_break_the_search(store, admin_client):
    ids = customers(3)
    store.client.hset(store.key(Q, "jobs"), ids[1], b"\xffgarbage cust-0001")
    response = admin_client.get(url("pending", q="cust-0001"))
    assert response.status_code == 200 and shown_ids(response) == [ids[1]]
    assert search.matches(search.needles("x"), "id", None) is False
    assert search.matches(search.needles("ID"), "an-id", None) is True


# -- the bound --------------------------------------------------------------------------


def test_a_search_reads_at_most_its_limit_and_says_where_it_stopped(
    store, admin_client, monkeypatch
):
    monkeypatch.setattr(search, "SEARCH_LIMIT", 100)
    monkeypatch.setattr(search, "SEARCH_CHUNK", 30)
    ids = customers(300)
    read: list[int] = []
    records = type(store).records

    def counting(self, queue, job_ids):
        read.append(len(job_ids))
        return records(self, queue, job_ids)

    monkeypatch.setattr(type(store), "records", counting)
    response = admin_client.get(url("pending", q="cust-0250"))
    assert shown_ids(response) == []
    assert sum(read) == 100 and max(read) == 30
    assert summary(response) == (
        "0 jobs match “cust-0250”. Searched the 100 most urgent of the 300 pending jobs "
        "(one search reads at most 100 jobs); the jobs after them were not searched. "
        "Search the next 100 jobs"
    )
    # The next window, from where the first stopped.
    later = re.search(r'<a href="([^"]+)" id="dq-search-next">', text(response)).group(1)
    response = admin_client.get(later.replace("&amp;", "&"))
    assert shown_ids(response) == []
    assert "Searched the jobs at positions 101 to 200 of 300" in summary(response)
    response = admin_client.get(url("pending", q="cust-0250") + "&from=200")
    assert shown_ids(response) == [ids[250]]
    # An exact id or unique key is looked up directly, wherever the job is.
    read.clear()
    assert shown_ids(admin_client.get(url("pending", q=ids[299]))) == [ids[299]]
    assert sum(read) == 100


def test_matches_page_through(store, admin_client):
    ids = customers(60)
    first = admin_client.get(url("pending", q="cust-00"))
    assert shown_ids(first) == ids[:50]
    assert "60 matching jobs, showing 1 to 50." in text(first)
    second = admin_client.get(url("pending", q="cust-00", p="2"))
    assert shown_ids(second) == ids[50:]


# -- bulk actions on what a search matches -----------------------------------------------


def test_bulk_cancel_asks_with_the_count_then_reports_what_changed(store, admin_client):
    ids = customers(300)
    matching = ids[100:110]  # cust-0100 ... cust-0109
    fields = {"action": "cancel", "select_across": "1", "q": "cust-010"}
    page = _post(admin_client, **fields, next=url("pending", q="cust-010"))
    assert page.status_code == 200 and not page.redirect_chain
    assert page.context["title"] == "Cancel 10 pending jobs?"
    assert "These are the jobs that matched “cust-010”." in text(page)
    assert store.size(Q, "pending") == 300  # nothing yet
    # Meanwhile: one starts running, one is cancelled, one gets other arguments under its
    # key, and a new matching job is scheduled.
    store.run_now(Q, [matching[0]])
    claim = store.claim(Q, 1, lease=90, token=f"w#{new_job_id()}", instance="w")
    assert [j.id for j in claim.jobs] == [matching[0]]
    store.cancel(Q, job_id=matching[1])
    record = encode_record("tests.testapp.tasks.remember", [], {"customer": "someone else"})
    store.client.hset(store.key(Q, "jobs"), matching[2], record)
    later = schedule(testtasks.remember, customer="cust-0109b", delay=600)
    response = confirm(admin_client, page)
    assert msgs(response) == [
        "7 jobs cancelled, 1 is being run by a worker, 1 was already gone.",
        "1 no longer matched “cust-010” and was left alone.",
    ]
    assert all(store.fetch(Q, job_id) is None for job_id in matching[3:])
    assert store.fetch(Q, matching[0]).status == "running"
    assert store.fetch(Q, matching[2]).status == "pending"
    assert store.fetch(Q, later.id).status == "pending"
    assert store.size(Q, "pending") == 300 - 10 + 1 + 1


def test_bulk_cancel_sends_job_cancelled(store, admin_client):
    from django_delayq import signals

    ids = customers(15)[:10]  # cust-0000 ... cust-0009 match; cust-0010 ... do not
    seen = []

    def receiver(sender, job, **kwargs):
        seen.append(job.id)

    page = _post(admin_client, action="cancel", select_across="1", q="cust-000")
    signals.job_cancelled.connect(receiver)
    try:
        assert msgs(confirm(admin_client, page)) == ["10 jobs cancelled."]
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert sorted(seen) == sorted(ids)
    assert store.size(Q, "pending") == 5


def test_bulk_requeue_of_what_a_search_matches(store, admin_client):
    card = [make_dead(store, f"card declined {i}") for i in range(3)]
    make_dead(store, "timeout")
    page = _post(admin_client, action="requeue", select_across="1", q="card declined")
    assert page.context["title"] == "Requeue 3 dead jobs?"
    assert store.size(Q, "dead") == 4
    response = confirm(admin_client, page)
    assert msgs(response) == ["3 jobs requeued."]
    assert [store.fetch(Q, job_id).status for job_id in card] == ["pending"] * 3
    assert store.size(Q, "dead") == 1


def test_bulk_run_now_of_what_a_search_matches(store, admin_client):
    ids = customers(20, delay=3600)
    page = _post(admin_client, action="run_now", select_across="1", q="cust-001")
    assert page.context["title"] == "Run 10 pending jobs now?"
    assert 'value="Yes, run them now"' in text(page)
    assert store.fetch(Q, ids[10]).score > store.server_time() + 3000
    response = confirm(admin_client, page)
    assert msgs(response) == ["10 jobs made due now."]
    now = store.server_time()
    assert all(store.fetch(Q, job_id).score <= now for job_id in ids[10:20])
    assert all(store.fetch(Q, job_id).score > now for job_id in ids[:10])
    # Those already due are left out of a second one.
    page = _post(admin_client, action="run_now", select_across="1", q="cust-001")
    assert msgs(page) == ["No pending jobs matched."]


def test_a_bulk_action_past_the_bound_says_so(store, admin_client, monkeypatch):
    monkeypatch.setattr(search, "SEARCH_LIMIT", 50)
    ids = customers(120)
    page = _post(admin_client, action="cancel", select_across="1", q="cust-00")
    assert page.context["title"] == "Cancel 50 pending jobs?"
    note = (
        "Only 50 pending jobs of queue default were searched for “cust-00”; the jobs after "
        "them are left alone."
    )
    assert note in text(page)
    assert msgs(confirm(admin_client, page)) == ["50 jobs cancelled.", note]
    assert store.fetch(Q, ids[50]) is not None and store.fetch(Q, ids[49]) is None


def test_bulk_actions_need_their_permission(store):
    customers(3)
    make_dead(store, "x")
    viewer = client_for(staff("view_job"))
    assert viewer.get(url("pending", q="cust")).status_code == 200
    for action, q in (("cancel", "cust"), ("run_now", "cust"), ("requeue", "x")):
        fields = {"action": action, "select_across": "1", "q": q, "queue": Q}
        assert viewer.post(url("action"), fields).status_code == 403
        confirmed = {
            **fields,
            "confirmed": "yes",
            "job_ids": " ".join(store.page_ids(Q, "pending", 0, 3)),
        }
        assert viewer.post(url("action"), confirmed).status_code == 403
    runner = client_for(staff("view_job", "run_job", username="runner"))
    fields = {"action": "cancel", "select_across": "1", "q": "cust", "queue": Q}
    assert runner.post(url("action"), fields).status_code == 403
    page = runner.post(url("action"), {**fields, "action": "run_now"})
    assert page.status_code == 200 and page.context["title"] == "Run 3 pending jobs now?"
    assert store.size(Q, "pending") == 3
    nobody = client_for(staff(username="nobody"))
    assert nobody.get(url("pending", q="cust")).status_code == 403


def test_bulk_actions_need_the_csrf_token_and_a_post(store, admin_user):
    ids = customers(3)
    other = schedule(testtasks.add, 1, 2, delay=60)
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    fields = {"action": "cancel", "queue": Q, "select_across": "1", "q": "cust"}
    assert client.post(url("action"), fields).status_code == 403
    confirmed = {**fields, "confirmed": "yes", "job_ids": " ".join(ids)}
    assert client.post(url("action"), confirmed).status_code == 403
    assert client.get(url("action"), confirmed).status_code == 405
    assert client.get(url("pending", q="cust")).status_code == 200
    assert store.size(Q, "pending") == 4
    # With the token the list's own form carries, the same POST asks, and then acts.
    page = client.get(url("pending", q="cust"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', text(page)).group(1)
    asked = client.post(url("action"), {**fields, "csrfmiddlewaretoken": token})
    assert asked.status_code == 200 and asked.context["title"] == "Cancel 3 pending jobs?"
    assert msgs(confirm(client, asked)) == ["3 jobs cancelled."]
    assert store.page_ids(Q, "pending", 0, 10) == [other.id]


def test_values_and_the_query_are_escaped(store, admin_client):
    nasty = XSS + "\"'&"
    job = schedule(testtasks.remember, nasty, note=nasty, delay=60, key="k" + nasty)
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    pages = [
        admin_client.get(url("pending", q="<script>")),
        admin_client.get(url("pending", q=nasty.replace("&", "%26"))),
        _post(admin_client, action="cancel", select_across="1", q="<script>"),
    ]
    for response in pages:
        body = text(response)
        assert response.status_code == 200
        assert "<script>alert" not in body
        assert escaped in body
    assert shown_ids(pages[0]) == [job.id]
    assert 'value="&lt;script&gt;"' in text(pages[0])  # the query, echoed in its field
    assert "1 job matches “&lt;script&gt;”." in text(pages[0])
    assert pages[2].context["title"] == "Cancel 1 pending job?"


def test_what_a_record_matches():
    """The rules of search.py's docstring, record by record (no Redis)."""
    import json

    looked = search.needles
    job_id = "01JABCDEFGHJKMNPQRSTVWXYZ0"
    keyed = encode_record("shop.tasks.bill", [42, "Müller"], {"note": 'say "hi"'}, key="a\nb:c")
    ranked = encode_record("shop.tasks.bill", [7], {}, key="inv:9", priority=10, max_retries=5)
    assert search.matches(looked("müLLER"), job_id, keyed)  # casefolded, non-ASCII as is
    assert search.matches(looked("a\nb:c"), job_id, keyed)  # a key with a newline in it
    assert search.matches(looked('say \\"hi\\"'), job_id, keyed)  # quotes as JSON escapes
    assert not search.matches(looked('say "hi"'), job_id, keyed)
    assert search.matches(looked('note="say'), job_id, keyed)
    assert search.matches(looked("42,"), job_id, keyed)
    assert search.matches(looked("shop.tasks"), job_id, keyed, task="shop.tasks.bill")
    assert not search.matches(looked("42"), job_id, keyed, task="shop.tasks.other")
    assert search.matches(looked("inv:9"), job_id, ranked)
    assert not search.matches(looked("^10"), job_id, ranked)  # the header: not searched
    assert not search.matches(looked("5"), job_id, ranked)
    assert search.matches(looked("jabcdef"), job_id, ranked)  # the id
    assert not search.matches(looked("jabcdef"), job_id, ranked, task="shop.tasks.x")
    # A 0.1 record (JSON, non-ASCII escaped) is decoded; a damaged one is read as text.
    legacy = json.dumps({"t": "shop.tasks.bill", "a": ["Müller"], "u": "old:1"}).encode()
    assert b"\\u00fc" in legacy
    assert search.matches(looked("müller"), job_id, legacy)
    assert search.matches(looked("old:1"), job_id, legacy)
    assert search.matches(looked("garbage"), job_id, b"9z=99:garbage")
    assert not search.matches(looked("garbage"), job_id, b"9z=99:garbage", task="shop.x")
    assert search.needles("  ") == () and search.needles(" x ") == ("x",)
    assert search.needles("customer_id=42") == ("customer_id=42", '"customer_id":42')


def test_the_search_reads_in_the_list_s_order(store, admin_client):
    """Prioritised jobs come first in the pending list: first in the search too."""
    ids = customers(5)
    urgent = schedule(testtasks.remember, customer="cust-0009", delay=3600, priority=10)
    response = admin_client.get(url("pending", q="cust-000"))
    assert shown_ids(response) == [urgent.id, *ids]
    assert shown_ids(admin_client.get(url("pending"))) == [urgent.id, *ids]
