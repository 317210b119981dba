"""aschedule(), acancel(), aget_job() (async_api.py) on fakeredis' and the real Redis's
asyncio clients: the same jobs, outcomes and errors as the sync API."""

from __future__ import annotations

import json
from datetime import timedelta

import fakeredis
import pytest
from asgiref.sync import async_to_sync
from django.http import JsonResponse
from django.test import AsyncClient, override_settings
from django.urls import path

from django_delayq import (
    acancel,
    aget_job,
    aschedule,
    get_job,
    schedule,
    signals,
)
from django_delayq.storage import async_store
from tests.conftest import more_settings
from tests.testapp import tasks as t


def run(coroutine_function, *args, **kwargs):
    """Run a coroutine function as Django runs an async view under WSGI: its sync_to_async
    calls come back to this thread (and its database connection)."""
    return async_to_sync(coroutine_function)(*args, **kwargs)


@pytest.fixture
def astore(store, monkeypatch):
    """The store fixture (fakeredis, then the real Redis), its asyncio twin on the same
    server: fakeredis' async client on the fake server, else the one the code derives."""
    derive = async_store.async_client

    def client_for(sync_client):
        server = sync_client.connection_pool.connection_kwargs.get("server")
        if server is not None:
            return fakeredis.FakeAsyncRedis(server=server)
        return derive(sync_client)

    monkeypatch.setattr(async_store, "async_client", client_for)
    return store


def _same_job(a, b):
    """Jobs equal apart from their ids and times."""
    skip = {"id", "due_at", "scheduled_at", "created_at"}
    left = {k: v for k, v in vars(a).items() if k not in skip}
    right = {k: v for k, v in vars(b).items() if k not in skip}
    assert left == right


def test_aschedule_stores_the_job_as_schedule_does(astore):
    sync_job = schedule(t.remember, 1, "two", key=None, delay=60, max_retries=4)
    async_job = run(aschedule, t.remember, 1, "two", delay=60, max_retries=4)
    assert async_job.outcome == "created" and async_job.status == "pending"
    _same_job(sync_job, async_job)
    _same_job(get_job(sync_job.id), get_job(async_job.id))
    stored = astore.fetch("default", async_job.id)
    assert stored.record == astore.fetch("default", sync_job.id).record
    assert stored.status == "pending" and abs(stored.score - async_job.due_at.timestamp()) < 1
    assert astore.size("default", "pending") == 2


def test_aschedule_to_another_queue_remembers_it_and_aget_job_finds_it_there(astore):
    job = run(aschedule, t.remember, 1, queue="emails")
    assert "emails" in astore.queues()
    assert run(aget_job, job.id).queue == "emails"  # found through the queues Redis remembers
    assert run(aget_job, job.id, "default") is None


def test_aschedule_adds_its_queue_again_after_the_registry_was_lost(astore):
    run(aschedule, t.remember, 1, queue="emails")
    astore.client.delete(astore.queues_key)
    job = run(aschedule, t.remember, 2, queue="emails")  # the script adds it: one reply
    assert "emails" in astore.queues()
    assert run(aget_job, job.id).queue == "emails"


def test_task_aschedule(astore):
    job = run(t.remember.aschedule, 5, delay=timedelta(minutes=1))
    assert get_job(job.id).args == [5]


@pytest.mark.parametrize("on_conflict", ["replace", "keep"])
def test_keyed_aschedule_replaces_or_keeps_as_schedule_does(astore, on_conflict):
    first = run(aschedule, t.remember, 1, key="k", delay=60)
    second = run(aschedule, t.remember, 2, key="k", delay=60, on_conflict=on_conflict)
    sync_first = schedule(t.remember, 1, key="s", delay=60)
    sync_second = schedule(t.remember, 2, key="s", delay=60, on_conflict=on_conflict)
    assert (
        second.outcome
        == sync_second.outcome
        == ("replaced" if on_conflict == "replace" else "kept")
    )
    assert (second.id == first.id) == (sync_second.id == sync_first.id)
    assert get_job(second.id).args == get_job(sync_second.id).args
    assert astore.size("default", "pending") == 2


def test_acancel_by_id_and_key(astore):
    by_id = run(aschedule, t.remember, 1, delay=60)
    by_key = run(aschedule, t.remember, 2, key="k", delay=60, queue="emails")
    cancelled = []

    def receiver(sender, job, **kwargs):
        cancelled.append(job.id)

    signals.job_cancelled.connect(receiver)
    try:
        assert run(acancel, by_id.id) is True
        assert run(acancel, key="k") is True
        assert run(acancel, by_id.id) is False
    finally:
        signals.job_cancelled.disconnect(receiver)
    assert cancelled == [by_id.id, by_key.id]
    assert run(aget_job, by_id.id) is None and run(aget_job, by_key.id) is None
    assert astore.size("default", "pending") == astore.size("emails", "pending") == 0


def test_aschedule_sends_job_scheduled(astore):
    seen = []

    def receiver(sender, job, **kwargs):
        seen.append((sender, job.id, job.outcome))

    signals.job_scheduled.connect(receiver)
    try:
        job = run(aschedule, t.remember, 1)
    finally:
        signals.job_scheduled.disconnect(receiver)
    assert seen == [(t.remember, job.id, "created")]


BAD_CALLS = [
    ((t.remember, 1), {"delay": "soon"}),
    ((t.remember, 1), {"delay": 1, "at": 2}),
    ((t.remember, 1), {"key": ""}),
    ((t.remember, 1), {"on_conflict": "merge"}),
    ((t.remember, 1), {"max_retries": -1}),
    ((t.remember, 1), {"queue": "bad queue!"}),
    ((t.remember, object()), {}),  # not JSON
    ((t.add, 1), {}),  # not the task's signature
    (("no.such.task",), {}),
    ((print,), {}),
]


@pytest.mark.parametrize(("args", "kwargs"), BAD_CALLS)
def test_validation_errors_are_those_of_schedule(astore, args, kwargs):
    with pytest.raises(Exception) as sync_error:
        schedule(*args, **kwargs)
    with pytest.raises(Exception) as async_error:
        run(aschedule, *args, **kwargs)
    assert type(async_error.value) is type(sync_error.value)
    assert str(async_error.value) == str(sync_error.value)
    assert astore.size("default", "pending") == 0


def test_bad_ids_and_arguments_of_aget_job_and_acancel(astore):
    with pytest.raises(TypeError, match="job id must be a string"):
        run(aget_job, 1)
    with pytest.raises(TypeError, match="exactly one"):
        run(acancel)
    with pytest.raises(ValueError):
        run(aget_job, "x", "bad queue!")


@pytest.mark.parametrize("on_commit", [True, "default"])
def test_on_commit_is_refused_with_what_to_do(astore, on_commit):
    with pytest.raises(TypeError, match=r"no transaction can be open in async code.*sync_to_async"):
        run(aschedule, t.remember, 1, on_commit=on_commit)
    assert astore.size("default", "pending") == 0
    assert run(aschedule, t.remember, 1, on_commit=False).outcome == "created"


@pytest.mark.django_db(transaction=True)
def test_a_job_beyond_the_horizon_waits_in_the_outbox(astore):
    with more_settings(astore, HORIZON=60):
        job = run(aschedule, t.remember, 1, delay=3600)
        assert job.waits_in == get_job(job.id).waits_in != "redis"
        assert astore.size("default", "pending") == 0
        found = run(aget_job, job.id)
        assert found is not None and found.args == [1] and found.waits_in == job.waits_in
        assert run(acancel, job.id) is True
        assert run(aget_job, job.id) is None and get_job(job.id) is None


@pytest.mark.django_db(transaction=True)
def test_a_keyed_aschedule_replaces_the_row_holding_its_key(astore):
    with more_settings(astore, HORIZON=60):
        far = schedule(t.remember, 1, key="k", delay=3600)  # a row holds the key
        near = run(aschedule, t.remember, 2, key="k", delay=3600)
        assert near.outcome == "replaced"
        assert get_job(near.id).args == [2] and (near.id == far.id or get_job(far.id) is None)
        assert run(acancel, key="k") is True
        assert get_job(near.id) is None


# -- in an async view -----------------------------------------------------------------


async def schedule_view(request):
    job = await aschedule(t.remember, int(request.GET["n"]), delay=60)
    found = await aget_job(job.id)
    return JsonResponse({"id": job.id, "args": found.args, "cancelled": await acancel(job.id)})


urlpatterns = [path("schedule/", schedule_view)]


@override_settings(ROOT_URLCONF=__name__)
def test_in_an_async_view(astore):
    async def request():
        return await AsyncClient().get("/schedule/", {"n": 7})

    response = run(request)
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["args"] == [7] and body["cancelled"] is True
    assert get_job(body["id"]) is None


def test_a_loop_that_ends_closes_its_connections(real_store, monkeypatch):
    """Under WSGI Django runs each async view on an event loop of its own (async_to_sync,
    as run() does): the connections aschedule() opens on that loop are closed when the loop
    ends, and nothing of it is kept (each request used to leave a connection open for the
    life of the process)."""
    made = []
    derive = async_store.async_client

    def recording(sync_client):
        client = derive(sync_client)
        made.append(client)
        return client

    monkeypatch.setattr(async_store, "async_client", recording)

    async def view():
        job = await aschedule(t.remember, 1, delay=60)
        assert (await aget_job(job.id)) is not None
        return await acancel(job.id)

    assert all(run(view) for _ in range(5))
    assert len(made) == 5  # a client per loop: asyncio connections belong to their loop
    for client in made:
        pool = client.connection_pool
        connections = [*pool._available_connections, *pool._in_use_connections]
        assert connections, "the view's calls went through this pool"
        assert not any(c.is_connected for c in connections)
    assert len(async_store._stores) == 0


def test_one_loop_keeps_its_store_and_connections_across_calls(real_store):
    """A long-lived loop (ASGI) keeps one store, and its connections, between calls."""

    async def calls():
        first = async_store.get_async_store()
        await aschedule(t.remember, 1, delay=60)
        await aschedule(t.remember, 2, delay=60)
        second = async_store.get_async_store()
        pool = second.transport.client.connection_pool
        return first is second, any(c.is_connected for c in pool._available_connections)

    same, connected = run(calls)
    assert same and connected


def test_aget_job_finds_a_finished_job_only_when_asked(astore):
    job = schedule(t.remember, 1)
    assert run(acancel, job.id)
    assert run(aget_job, job.id) is None
    kept = run(aget_job, job.id, finished=True)
    assert kept.status == "cancelled" and kept.args == [1]
    assert kept == get_job(job.id, finished=True)
