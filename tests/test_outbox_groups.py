"""group= through the outbox (issue 36): ``schedule(..., group=...)`` with ``on_commit=True``
and beyond ``DELAYQ["HORIZON"]``. The row keeps the group (migration 0007's column), its
relay stores it beside the job (schedule.lua's ARGV[12], record flag 'g'), so the task's
limits per group and a fair queue's turns count a relayed job as one scheduled in Redis. On
SQLite and PostgreSQL, over fakeredis and the real Redis."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from django_delayq import get_job, schedule, schedule_many, task
from django_delayq.jobs.job import decode_fields
from django_delayq.outbox import relay as relaying
from django_delayq.outbox.database_time import epoch
from django_delayq.scheduling.registry import unregister
from tests.conftest import more_settings
from tests.test_outbox import alias, horizon, pending_ids, redis_now, rows  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])

Q = "default"


@pytest.fixture
def grouped():
    """A task with a limit per group (one job of a group runs at a time)."""
    made = task(name=f"tests.og_{uuid.uuid4().hex}", group_concurrency=1)(lambda n: None)
    yield made
    unregister(made.name)


def group_in_redis(store, job_id: str, queue: str = Q) -> str | None:
    value = store.client.hget(store.key(queue, "groups"), job_id)
    return None if value is None else value.decode().split("\n")[1]


def claimed(store, queue: str = Q, limit: int = 10) -> list[str]:
    reply = store.claim(queue, limit, lease=30, token="w#1", instance="w", now=redis_now(store))
    return [j.id for j in reply.jobs]


def test_on_commit_relays_the_group_beside_the_job(store, alias, grouped):  # noqa: F811
    with transaction.atomic(using=alias):
        job = schedule(grouped, 1, group="<s:1>", on_commit=alias)
        (row,) = rows(alias)
        assert row.group == "<s:1>" and "g" in decode_fields(bytes(row.record)).flags
    assert rows(alias) == [] and pending_ids(store) == [job.id]
    assert group_in_redis(store, job.id) == "<s:1>" and get_job(job.id).group == "<s:1>"


def test_the_limit_per_group_holds_for_relayed_jobs(store, alias, grouped):  # noqa: F811
    store.control.publish_group_limits([Q], {grouped.name: (1, None)})
    with transaction.atomic(using=alias):
        a1 = schedule(grouped, 1, group="a", on_commit=alias)
        a2 = schedule(grouped, 2, group="a", on_commit=alias)
        b1 = schedule(grouped, 3, group="b", on_commit=alias)
    assert sorted(pending_ids(store)) == sorted([a1.id, a2.id, b1.id])
    assert sorted(claimed(store)) == sorted([a1.id, b1.id])  # a's second waits for a's first
    assert a2.id not in claimed(store)


def test_a_row_beyond_the_horizon_keeps_its_group(store, alias, horizon, grouped):  # noqa: F811
    job = schedule(grouped, 1, group="s:2", delay=600)
    (row,) = rows(alias)
    assert row.id == job.id and row.group == "s:2" and pending_ids(store) == []
    assert relaying.relay_pass(store, alias, now=epoch(row.relay_at) + 1) == 1
    assert pending_ids(store) == [job.id] and group_in_redis(store, job.id) == "s:2"


def test_schedule_many_beyond_the_horizon_keeps_each_group(store, alias, horizon, grouped):  # noqa: F811
    jobs = schedule_many(grouped, [(1,), (2,)], group="s:3", delay=600)
    assert sorted(r.group for r in rows(alias)) == ["s:3", "s:3"]
    (row, _) = rows(alias)
    assert relaying.relay_pass(store, alias, now=epoch(row.relay_at) + 1) == 2
    assert [group_in_redis(store, j.id) for j in jobs] == ["s:3", "s:3"]


def test_a_keyed_row_replaced_takes_the_new_group(store, alias, horizon, grouped):  # noqa: F811
    first = schedule(grouped, 1, key="k", group="old", delay=600)
    again = schedule(grouped, 2, key="k", group="new", delay=700)
    assert again.id == first.id
    (row,) = rows(alias)
    assert row.group == "new"
    gone = schedule(grouped, 3, key="k", delay=800)  # no group: the row has none
    assert gone.id == first.id and rows(alias)[0].group is None
    schedule(grouped, 4, key="k", group="near", delay=5)  # within the horizon: relayed now
    assert rows(alias) == [] and group_in_redis(store, first.id) == "near"


def test_a_fair_queue_takes_relayed_jobs_in_turns(store, alias):  # noqa: F811
    with more_settings(store, QUEUES={"fq": {"fair": True}}):
        from tests.testapp import tasks as t

        store.control.publish_fair({"fq": True})
        with transaction.atomic(using=alias):
            backlog = [
                schedule(t.remember, n, queue="fq", group="a", on_commit=alias) for n in range(5)
            ]
            single = schedule(t.remember, "b", queue="fq", group="b", on_commit=alias)
        assert group_in_redis(store, single.id, "fq") == "b"
        got = claimed(store, "fq", limit=2)
    assert got == [backlog[0].id, single.id]  # a's turn, then b's: not after a's backlog
