"""Issue 10, items 8, 11 and 13 as the admin dashboard shows them (Django's test client, a
superuser), against a redis-server started by each test.

8. Jobs whose score is absurd (1e300, inf, -inf, written with ZADD) list and open (200).
11. Garbage in every hash field that belongs to a job, and in the stats hash: every page
   answers 200 and get_job() does not raise.
13. A requeue refused because another pending job holds the dead job's unique key says
   so, rather than "was no longer dead".
"""

from __future__ import annotations

import time

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_delayq import get_job, schedule, task
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.reliability.edges import SETS, job_hashes, queue_key, sets_holding
from tests.reliability.harness import installed
from tests.testapp import tasks as t

pytestmark = [pytest.mark.reliability, pytest.mark.django_db]

Q = "default"


@task(name="tests.reliability.edges.fails_then_waits", max_retries=3, retry_backoff=3600)
def fails_then_waits(value: str) -> None:
    """Fails; its retry is due in an hour (so it waits in pending with its state)."""
    raise RuntimeError(f"{value} fails on purpose")


@task(name="tests.reliability.edges.fails_for_good", max_retries=0)
def fails_for_good(value: str) -> None:
    raise RuntimeError(f"{value} fails on purpose")


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def store(servers, prefix):
    store = Store(servers.redis("data").client(), prefix)
    with installed(store):
        yield store


def url(name: str, *args: str, **query: str) -> str:
    base = reverse(f"admin:django_delayq_job_{name}", args=args)
    return base + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def one_of_each(store: Store) -> dict[str, str]:
    """Job ids by state: "fresh" (pending, never claimed), "waiting" (pending, a retry
    after a failed attempt), "running" (claimed, lease an hour long), "dead"."""
    fresh = schedule(t.add, 1, 2, delay=3600)
    running = schedule(t.add, 3, 4)
    # The only way to hold a lease without a worker: the store's claim, with a long lease
    # and a token nobody presents.
    claim = store.claim(Q, 1, lease=3600, token="edges-ghost#nobody", instance="edges-ghost")
    assert [c.id for c in claim.jobs] == [running.id]
    waiting = fails_then_waits.schedule("waiting")
    dead = fails_for_good.schedule("dead")
    assert Worker([Q], burst=True).run() == 0
    ids = {"fresh": fresh.id, "waiting": waiting.id, "running": running.id, "dead": dead.id}
    client = store.client
    expected = {"fresh": "pending", "waiting": "pending", "running": "running", "dead": "dead"}
    for name, job_id in ids.items():
        assert sets_holding(client, store.prefix, job_id) == [expected[name]], name
    return ids


def pages(ids: dict[str, str]) -> list[str]:
    """Every page of the dashboard that shows these jobs."""
    return [
        url("changelist"),
        *(url(status, queue=Q) for status in SETS),
        url("pending", queue=Q, task="tests.testapp.tasks.add"),
        *(url("detail", Q, job_id) for job_id in ids.values()),
    ]


def broken_pages(client: Client, ids: dict[str, str]) -> list[str]:
    """Pages that did not answer 200 (with the status), and get_job() calls that raised."""
    broken = []
    for page in pages(ids):
        try:
            status = client.get(page).status_code
        except Exception as exc:  # the test client re-raises view errors
            broken.append(f"{page}: {type(exc).__name__}: {exc}"[:200])
            continue
        if status != 200:
            broken.append(f"{page}: {status}")
    for name, job_id in ids.items():
        try:
            get_job(job_id)
        except Exception as exc:  # any exception is the failure
            broken.append(f"get_job({name}): {type(exc).__name__}: {exc}"[:200])
    return broken


# -- 8. absurd scores -------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["1e300", "inf", "-inf", "-1e300"])
def test_jobs_with_absurd_scores_list_and_open(store, admin_client, score):
    """A pending due time (or a lease end, or a death time) of 1e300 or inf made the
    lists and the job page answer 500 (datetime cannot hold it)."""
    ids = one_of_each(store)
    assert broken_pages(admin_client, ids) == []  # fine before
    for name, status in (("fresh", "pending"), ("running", "running"), ("dead", "dead")):
        store.client.zadd(queue_key(store.prefix, Q, status), {ids[name]: score}, xx=True)
    broken = broken_pages(admin_client, ids)
    assert broken == [], f"with scores of {score}:\n" + "\n".join(broken)


# -- 11. garbage in job hashes and stats ------------------------------------------------------

GARBAGE = {
    "not JSON": b"{not json",
    "not UTF-8": b"\xff\xfe\x00\x80garbage",
    "empty": b"",
    "JSON list": b"[1, 2, 3]",
    "JSON string": b'"a string"',
    "JSON null": b"null",
    "wrong field types": b'{"n": "many", "t": 7, "w": ["x"], "s": "soon", "e": "not a list"}',
    "attempts 1e999": b'{"n": 1e999, "s": 1e300}',
    "error at 1e300": b'{"n": 1, "e": [{"at": 1e300, "type": 5, "message": null}]}',
    "error at -inf": b'{"n": 1, "e": [{"at": -1e999, "attempt": 1e999}]}',
    "huge int": b'{"n": ' + b"9" * 5000 + b"}",
    "negative attempts, odd errors": b'{"n": -1, "e": [null, 3, "x", {"at": "yesterday"}]}',
    "record with a number for a task": b'[{"t": 42, "k": []}, 1]',
    "record with odd fields": b'[{"t": "tests.testapp.tasks.add", "k": "x", "r": "y", "u": 5}]',
    "record from the future": b'[{"t": "tests.testapp.tasks.add", "v": 1e999}]',
}


def stats_garbage() -> dict[str, tuple[bytes, bytes]]:
    """Entries of the stats hash ("d:<minute % 60>" -> "<minute>:<count>" when sane)."""
    minute = int(time.time() // 60)
    slot = f"d:{minute % 60}".encode()
    return {
        "not JSON": (slot, b"{not json"),
        "not UTF-8 value": (slot, b"\xff\xfe"),
        "not UTF-8 field": (b"\xff:\xfe", b"1:1"),
        "empty": (slot, b""),
        "not numbers": (slot, b"abc:def"),
        "three parts": (slot, b"1:2:3"),
        "float notation": (slot, b"1e400:1e400"),
        "5,000-digit count": (slot, f"{minute}:".encode() + b"9" * 5000),
        "30-digit count": (slot, f"{minute}:".encode() + b"9" * 30),
        "negative count": (slot, f"{minute}:-5".encode()),
        "field without a kind": (b"garbage", b"1:1"),
    }


def test_garbage_in_job_hashes_and_stats_keeps_the_admin_up(store, admin_client, report):
    """Each job's fields are found by scanning the queue's hashes for a field named by its
    id (record, state, whatever the store keeps), so the test survives renames. The stats
    hash comes first, one bad entry at a time, on top of the real counts."""
    ids = one_of_each(store)
    client = store.client
    hashes = {name: job_hashes(client, store.prefix, job_id) for name, job_id in ids.items()}
    assert all(hashes.values()), hashes
    assert broken_pages(admin_client, ids) == []  # fine before
    failures = []
    stats = queue_key(store.prefix, Q, "stats")
    sane = client.hgetall(stats)
    assert sane, "the worker counted no done or failed job"
    for label, (field, value) in stats_garbage().items():
        client.delete(stats)
        client.hset(stats, mapping={**sane, field: value})
        failures += [f"stats, {label}: {problem}" for problem in broken_pages(admin_client, ids)]
    client.delete(stats)
    client.hset(stats, mapping=sane)
    for label, value in GARBAGE.items():
        for name, job_id in ids.items():
            for key in hashes[name]:
                client.hset(key, job_id, value)
        failures += [f"jobs, {label}: {problem}" for problem in broken_pages(admin_client, ids)]
    report(
        scenario="20. garbage in job hashes and stats: admin and get_job",
        jobs=len(ids),
        variants=len(GARBAGE) + len(stats_garbage()),
        hashes=sorted({k.decode().rsplit(":", 1)[-1] for keys in hashes.values() for k in keys}),
        broken=len(failures),
    )
    assert failures == [], f"{len(failures)} broken:\n" + "\n".join(failures)


# -- 13. a refused requeue ----------------------------------------------------------------------


def messages_of(response) -> list[str]:
    if response.context is not None and "messages" in response.context:
        return [str(m) for m in response.context["messages"]]
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_requeue_refused_for_a_held_unique_key_says_so(store, admin_client):
    """A dead job with key K cannot go back to pending while another pending job holds K
    (a key names at most one pending job); the message must say that, not that the job
    "was no longer dead", and the dead job stays dead."""
    dead = fails_for_good.schedule("dead", key="invoice:42")
    assert Worker([Q], burst=True).run() == 0
    assert get_job(dead.id).status == "dead"
    holder = schedule(t.add, 1, 2, key="invoice:42", delay=3600)
    assert holder.outcome == "created" and holder.id != dead.id
    response = admin_client.post(
        url("action"), {"queue": Q, "one": f"requeue:{dead.id}"}, follow=True
    )
    shown = messages_of(response)
    assert response.status_code == 200
    assert get_job(dead.id).status == "dead" and get_job(holder.id).status == "pending"
    says_why = any("invoice:42" in m for m in shown)
    assert says_why and not any("no longer dead" in m for m in shown), f"messages: {shown}"
