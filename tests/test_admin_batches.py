"""The admin's Batches pages through Django's test client: the list of batches, a batch's
page (state, callbacks, members), its cancel page (permission, CSRF, GET changes nothing),
escaping, and the Batch line of a job's page; on fakeredis and the real server."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from django_delayq import batch, cancel, get_batch, get_job
from django_delayq.admin import batch_views
from django_delayq.batches.links import derived_id
from django_delayq.worker.dispatch import Worker
from tests.test_admin import XSS, client_for, confirm, msgs, staff, text, url
from tests.test_admin_i18n import pseudo, untranslated  # noqa: F401  (pseudo: a fixture)
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db

Q = "default"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def burst() -> None:
    assert Worker([Q], burst=True).run() == 0


def batch_url(batch_id: str, **query: str) -> str:
    return url("batch", id=batch_id, **query)


def three_pending(**callbacks):
    """A batch of three members due in ten minutes (add, nothing recorded in Redis)."""
    with batch(**callbacks) as b:
        jobs = [t.add.schedule(i, i, delay=600) for i in range(3)]
    return b, jobs


# -- the list ---------------------------------------------------------------------------


def test_the_list_shows_each_batch_newest_first(store, admin_client):
    first_batch, _ = three_pending(on_complete=t.add.call(1, 2))
    with batch(on_complete=t.add.call(3, 4), on_death=t.add.call(5, 6)) as empty:
        pass  # sealed with no member: on_complete decided and stored at once
    open_batch, _ = three_pending(on_success=t.add.call(7, 8))
    response = admin_client.get(url("batches"))
    assert response.status_code == 200
    ids = [row.id for row in response.context["rows"]]
    assert ids == [open_batch.id, empty.id, first_batch.id]
    body = text(response)
    assert "3 batches, showing 1 to 3." in body
    assert 'aria-current="page">Batches</a>' in body
    empty_row = response.context["rows"][1]
    assert (empty_row.state.total, empty_row.percent, str(empty_row.status)) == (0, 100, "done")
    assert [(c.kind, c.state) for c in empty_row.callbacks] == [
        ("complete", "scheduled"),
        ("death", None),
    ]
    # Its job was stored and has not run (no worker): the list says so, not "scheduled".
    assert "on complete: job pending" in body and "on death: not decided" in body
    row = re.search(rf'<tr data-batch-id="{open_batch.id}">.*?</tr>', body, re.S).group(0)
    assert f'href="{batch_url(open_batch.id)}"' in row
    assert "on success: not decided" in row and "0%" in row and "in progress" in row


def test_the_list_counts_progress_after_a_worker_ran(store, admin_client):
    with batch(on_success=t.add.call(1, 2), on_complete=t.add.call(3, 4)) as b:
        for i in range(3):
            t.add.schedule(i, i)
        t.add.schedule(9, 9, delay=600)
    burst()
    response = admin_client.get(url("batches"))
    (row,) = response.context["rows"]
    state = row.state
    assert (state.total, state.pending, state.succeeded, state.dead) == (4, 1, 3, 0)
    assert row.percent == 75 and not state.done
    assert {c.kind: c.state for c in row.callbacks} == {"success": None, "complete": None}
    assert "75%" in text(response)
    assert get_batch(b.id).pending == 1


def test_the_list_pages_and_shows_expired_batches(store, admin_client, monkeypatch):
    monkeypatch.setattr(batch_views, "PER_PAGE", 2)
    made = [three_pending()[0].id for _ in range(3)]
    # Expired: its keys are gone (a week after it finished), its line in the list is left.
    store.client.delete(*store.batch_keys(made[0]))
    first = admin_client.get(url("batches"))
    assert [r.id for r in first.context["rows"]] == [made[2], made[1]]
    assert "3 batches, showing 1 to 2." in text(first)
    second = admin_client.get(url("batches", p="2"))
    (expired,) = second.context["rows"]
    assert expired.id == made[0] and expired.state is None and expired.created_at is not None
    assert "expired: its details are gone" in text(second)
    assert admin_client.get(url("batches", p="99")).context["page"].number == 2
    assert admin_client.get(url("batches", p="x")).status_code == 200


def test_no_batches(store, admin_client):
    response = admin_client.get(url("batches"))
    assert response.status_code == 200
    assert "No batches in the last 30 days." in text(response)
    assert "0 batches." in text(response)


# -- a batch's page ------------------------------------------------------------------------


def test_a_batch_page_shows_its_state_callbacks_and_members(store, admin_client):
    with batch(
        on_success=t.add.call(1, 2),
        on_complete=t.add.call(3, 4).then(t.add.call(5, 6)).then(t.add.call(7, 8)),
    ) as b:
        done = t.add.schedule(1, 1)
        later = [t.add.schedule(i, i, delay=600) for i in range(2)]
    burst()
    response = admin_client.get(batch_url(b.id))
    assert response.status_code == 200
    body = text(response)
    assert "3 in all: 2 not ended, 1 succeeded, 0 dead, 0 cancelled" in body
    assert "33% ended" in body and "in progress" in body
    callbacks = {c.kind: c for c in response.context["row"].callbacks}
    assert callbacks["complete"].task == "tests.testapp.tasks.add"
    assert callbacks["complete"].arguments == "3, 4" and callbacks["complete"].more_steps == 2
    assert "then 2 more steps (a chain)" in body
    members = response.context["members"]
    # Not ended first (by id); every member links to its job page (a finished one's shows
    # it while it is kept: its id was not a link at all).
    assert [m.id for m in members] == [*sorted(j.id for j in later), done.id]
    assert [m.url for m in members] == [url("detail", Q, m.id) for m in members]
    assert 'href="{}"'.format(url("detail", Q, done.id)) in body
    assert get_job(done.id, finished=True).status == "succeeded"
    assert admin_client.get(url("detail", Q, done.id)).status_code == 200
    assert [str(m.outcome_title) for m in members] == ["not ended", "not ended", "succeeded"]
    assert 'href="{}"'.format(url("detail", Q, later[0].id)) in body
    # The outcome filter.
    only = admin_client.get(batch_url(b.id, outcome="succeeded"))
    assert [m.id for m in only.context["members"]] == [done.id]
    assert "succeeded (1)" in text(only) and "not ended (2)" in text(only)
    pending = admin_client.get(batch_url(b.id, outcome="pending"))
    assert len(pending.context["members"]) == 2
    assert admin_client.get(batch_url(b.id, outcome="nonsense")).context["outcome"] == "all"


def test_a_done_batch_links_its_callbacks_jobs(store, admin_client):
    with batch(on_complete=t.add.call(3, 4)) as b:
        t.add.schedule(1, 1)
    burst()  # the member runs; its forwarding stores on_complete (run by the same burst)
    response = admin_client.get(batch_url(b.id))
    fired = int(store.client.hget(store.batch_keys(b.id)[0], "fire:complete"))
    job_id = derived_id(b.id, "complete", fired)
    (callback,) = response.context["row"].callbacks
    assert callback.state == "scheduled" and callback.job_id == job_id
    assert callback.job_url == url("find", q=job_id)
    assert str(response.context["row"].status) == "done"
    assert "Cancel batch" not in text(response)  # done: nothing to cancel
    # Its job ran and succeeded: the page and the list read it where it is (kept since it
    # finished), where both said "scheduled".
    assert get_job(job_id, finished=True).status == "succeeded"
    assert callback.job_status == "succeeded"
    cell = re.search(r'<td [^>]*class="dq-callback-state".*?</td>', text(response), re.S)
    assert "job succeeded" in cell.group(0) and "scheduled" not in cell.group(0)
    listed = admin_client.get(url("batches"))
    assert "on complete: job succeeded" in text(listed)
    assert "on complete: scheduled" not in text(listed)


def test_a_callback_says_where_its_job_is(store, admin_client):
    """Pending, cancelled (kept a while), then no longer kept: the batch said "scheduled"
    throughout."""
    with batch(on_complete=t.add.call(3, 4)) as b:
        pass  # no member: on_complete is stored at once
    page = admin_client.get(batch_url(b.id))
    (callback,) = page.context["row"].callbacks
    assert (callback.state, callback.job_status, callback.queue) == ("scheduled", "pending", Q)
    assert "job pending" in text(page)
    assert cancel(callback.job_id)
    assert admin_client.get(batch_url(b.id)).context["row"].callbacks[0].job_status == "cancelled"
    assert "on complete: job cancelled" in text(admin_client.get(url("batches")))
    store.client.delete(store.key(Q, "finished"), store.key(Q, "kept"))
    gone = admin_client.get(batch_url(b.id))
    assert gone.context["row"].callbacks[0].job_status == ""
    assert "job ended, no longer kept" in text(gone)


def test_a_batch_page_pages_its_members_and_caps_them(store, admin_client, monkeypatch):
    b, jobs = three_pending()
    monkeypatch.setattr(batch_views, "MEMBERS_PER_PAGE", 2)
    first = admin_client.get(batch_url(b.id))
    assert len(first.context["members"]) == 2
    assert batch_url(b.id, p="2").replace("&", "&amp;") in text(first)
    second = admin_client.get(batch_url(b.id, p="2"))
    assert [m.id for m in second.context["members"]] == [sorted(j.id for j in jobs)[2]]
    monkeypatch.setattr(batch_views, "MEMBERS_READ_LIMIT", 2)
    capped = admin_client.get(batch_url(b.id))
    assert capped.status_code == 200 and "members" not in capped.context
    assert "This batch has 3 members: this page lists the members of batches of up to 2." in (
        text(capped)
    )


def test_an_unsealed_batch_and_a_missing_one(store, admin_client):
    with batch() as b:
        t.add.schedule(1, 1, delay=600)
        response = admin_client.get(batch_url(b.id))
        assert response.status_code == 200
        body = text(response)
        assert "being filled (its block has not ended)" in body
        assert "Its members are recorded when its block ends." in body
        assert admin_client.get(url("batches")).context["rows"][0].percent is None
    missing = admin_client.get(batch_url("01J0000000000000000000000Z"))
    assert missing.status_code == 404
    assert "No batch 01J0000000000000000000000Z" in text(missing)
    assert admin_client.get(url("batch")).status_code == 404


def test_redis_data_is_escaped_on_the_batch_pages(store, admin_client):
    with batch(on_success=t.add.call(XSS, {"k": XSS}), on_death=t.record.call(XSS, XSS)) as b:
        job = t.add.schedule(1, 1, delay=600)
    # Garbage a buggy writer left in the batch's hashes: an id and a queue with markup.
    _, ended, members = store.batch_keys(b.id)
    store.client.hset(members, XSS, XSS)
    store.client.hset(ended, job.id, XSS)
    store.client.hset(store.batch_keys(b.id)[0], "cb:complete", XSS)
    pages = [
        admin_client.get(url("batches")),
        admin_client.get(batch_url(b.id)),
        admin_client.get(url("cancel_batch", id=b.id)),
        admin_client.get(batch_url(XSS)),  # echoed in the 404 page
        admin_client.post(url("cancel_batch"), {"id": XSS}, follow=True),  # in the message
    ]
    for response in pages[:3]:
        assert response.status_code == 200
    for response in pages:
        assert "<script>alert" not in text(response), response.wsgi_request.get_full_path()
    body = text(pages[1])
    assert ESCAPED in body  # the callbacks' arguments, the member id and queue
    assert f'<tr data-job-id="{ESCAPED}">' in body
    assert ESCAPED in text(pages[3])
    assert msgs(pages[4]) == [f"No batch {XSS}."] and ESCAPED in text(pages[4])


# -- the cancel page --------------------------------------------------------------------


def test_cancel_asks_then_cancels_and_says_how_many(real_store, admin_client):
    b, jobs = three_pending(on_complete=t.add.call(1, 2))
    assert cancel(jobs[0].id)  # one ended meanwhile (cancel() forwards it to the batch)
    page = admin_client.get(batch_url(b.id))
    cancel_link = url("cancel_batch", id=b.id)
    assert cancel_link in text(page).replace("&amp;", "&")
    asking = admin_client.get(cancel_link)
    assert asking.status_code == 200
    assert "2 members have not ended." in text(asking)
    assert all(get_job(j.id) is not None for j in jobs[1:])  # GET changes nothing
    assert get_batch(b.id).cancelled_at is None
    done = confirm(admin_client, asking)
    assert done.status_code == 200 and done.redirect_chain[-1][0] == batch_url(b.id)
    assert msgs(done) == [f"Batch {b.id} cancelled: 2 pending members cancelled."]
    assert all(get_job(j.id) is None for j in jobs)
    state = get_batch(b.id)
    assert state.done and state.cancelled == 3 and state.callbacks == {"complete": None}
    assert str(done.context["row"].status) == "cancelled"
    assert "Cancel batch" not in text(done)


def test_cancel_of_a_missing_batch_says_so(real_store, admin_client):
    response = admin_client.post(url("cancel_batch"), {"id": "nope"}, follow=True)
    assert msgs(response) == ["No batch nope."]
    assert response.redirect_chain[-1][0] == url("batches")


PAGES = [("batches", {}), ("batch", {"id": "x"}), ("cancel_batch", {"id": "x"})]


@pytest.mark.parametrize(("name", "query"), PAGES)
def test_anonymous_is_sent_to_the_login_page(fake_store, client, name, query):
    response = client.get(url(name, **query))
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.parametrize(("name", "query"), PAGES)
def test_staff_without_view_permission_gets_403(fake_store, name, query):
    assert client_for(staff()).get(url(name, **query)).status_code == 403


def test_cancel_needs_the_cancel_job_permission(real_store):
    b, jobs = three_pending()
    viewer = client_for(staff("view_job"))
    assert viewer.get(batch_url(b.id)).status_code == 200
    assert "Cancel batch" not in text(viewer.get(batch_url(b.id)))
    assert viewer.get(url("cancel_batch", id=b.id)).status_code == 403
    assert viewer.post(url("cancel_batch"), {"id": b.id}).status_code == 403
    assert all(get_job(j.id) is not None for j in jobs)
    # cancel_job alone may cancel (as for jobs), not see the batch's page.
    canceller = client_for(staff("cancel_job", username="canceller"))
    assert canceller.get(batch_url(b.id)).status_code == 403
    response = canceller.post(url("cancel_batch"), {"id": b.id})
    assert response.status_code == 302
    assert all(get_job(j.id) is None for j in jobs)


def test_cancel_enforces_csrf(real_store, admin_user):
    b, jobs = three_pending()
    client: Client = client_for(admin_user, enforce_csrf_checks=True)
    assert client.post(url("cancel_batch"), {"id": b.id}).status_code == 403
    assert all(get_job(j.id) is not None for j in jobs)
    done = confirm(client, client.get(url("cancel_batch", id=b.id)))  # the page's token
    assert msgs(done) == [f"Batch {b.id} cancelled: 3 pending members cancelled."]
    assert all(get_job(j.id) is None for j in jobs)


# -- a job's page ------------------------------------------------------------------------


def test_a_job_page_names_its_batch_and_its_chain(store, admin_client):
    b, jobs = three_pending()
    member = admin_client.get(url("detail", Q, jobs[0].id))
    assert member.context["link"].batch_id == b.id
    assert f'href="{batch_url(b.id)}"' in text(member)
    assert "(a member of the batch)" in text(member)
    loner = admin_client.get(url("detail", Q, t.add.schedule(1, 2, delay=60).id))
    assert loner.context["link"] is None and "dq-job-batch" not in text(loner)
    # A chain in a batch: its first step is the member, step 1 of the chain.
    with batch() as chained:
        first = t.add.call(1, 1).then(t.add.call(2, 2)).schedule(delay=600)
    page = admin_client.get(url("detail", Q, first.id))
    assert page.context["link"].batch_id == chained.id
    assert f"step 1 of chain {first.id}" in text(page)
    # A callback: it belongs to the batch, as its callback.
    with batch(on_complete=t.add.call(3, 4)) as empty:
        pass
    fired = int(store.client.hget(store.batch_keys(empty.id)[0], "fire:complete"))
    callback = admin_client.get(url("detail", Q, derived_id(empty.id, "complete", fired)))
    assert callback.status_code == 200
    assert "(a callback of the batch)" in text(callback)
    assert callback.context["link"].batch_id == empty.id


def test_a_later_chain_step_says_its_place(store, admin_client):
    first = t.add.call(1, 1).then(t.add.call(2, 2), delay=600).schedule()
    burst()  # the first step runs; the second is stored, due in ten minutes
    (second,) = store.page_ids(Q, "pending", 0, 10)
    page = admin_client.get(url("detail", Q, second))
    assert f"step 2 of chain {first.id}" in text(page)
    assert page.context["link"].batch_id is None and "dq-job-batch" not in text(page)


def test_the_storage_reads_of_the_batch_pages(store):
    b, _ = three_pending()
    assert store.batches.count_members(b.id) == 3
    assert store.batches.count_members("nope") == 0
    assert store.batches.read_many([b.id, "nope"])[1] is None
    assert store.batches.read_many([b.id])[0]["total"] == "3"
    assert store.batches.read_many([]) == []
    assert store.batches.counts() == (1, 1)


# -- translation -------------------------------------------------------------------------


def test_every_text_of_the_batch_pages_is_translated(
    real_store,
    admin_client,
    pseudo,  # noqa: F811  (the fixture imported from test_admin_i18n)
    monkeypatch,
):
    """The Batches pages in the pseudo language of test_admin_i18n (every translation in
    ⟦ ⟧): nothing but data is left outside the brackets."""
    with batch(
        on_success=t.add.call(1, 2),
        on_complete=t.add.call(3, 4).then(t.add.call(5, 6)),
        on_death=t.add.call(7, 8),
    ) as b:
        t.add.schedule(1, 1)
        t.add.schedule(2, 2, delay=600)
    burst()
    with batch(on_complete=t.add.call(3, 4)) as empty:
        pass
    gone, _ = three_pending()
    real_store.client.delete(*real_store.batch_keys(gone.id))  # expired: its line is left
    member = real_store.page_ids(Q, "pending", 0, 10)
    data = [Q, "tests.testapp.tasks.add", "UTC", "1, 2", "3, 4", "7, 8", "nope"]
    monkeypatch.setattr(batch_views, "MEMBERS_PER_PAGE", 1)
    pages = {
        "batches": admin_client.get(url("batches")),
        "no batches page 1": admin_client.get(url("batches", p="2")),
        "batch": admin_client.get(batch_url(b.id)),
        "batch page 2": admin_client.get(batch_url(b.id, p="2", outcome="succeeded")),
        "empty batch": admin_client.get(batch_url(empty.id)),
        "missing batch": admin_client.get(batch_url("nope")),
        "cancel": admin_client.get(url("cancel_batch", id=b.id)),
        "cancel a done batch": admin_client.get(url("cancel_batch", id=empty.id)),
        "cancelled": confirm(admin_client, admin_client.get(url("cancel_batch", id=b.id))),
        "no such batch": admin_client.post(url("cancel_batch"), {"id": "nope"}, follow=True),
        "member's job": admin_client.get(url("detail", Q, member[0])),
    }
    with batch() as filling:
        pages["being filled"] = admin_client.get(batch_url(filling.id))
        pages["cancel while filled"] = admin_client.get(url("cancel_batch", id=filling.id))
    monkeypatch.setattr(batch_views, "MEMBERS_READ_LIMIT", 0)
    pages["too many members"] = admin_client.get(batch_url(empty.id))
    problems = {
        name: left
        for name, response in pages.items()
        if (left := untranslated(response.content.decode(), data))
    }
    assert not problems, problems
