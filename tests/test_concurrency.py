"""Global concurrency limits (issue 20): @task(concurrency=N) lets at most N attempts of a
task hold a lease at once across all workers, enforced in claim.lua; a slot frees when its
job is acknowledged, fails, is handed back or is recovered after its worker died."""

from __future__ import annotations

import uuid

import pytest

from django_delayq import task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.scheduling.options import check_concurrency
from django_delayq.worker.dispatch import Worker
from tests.overlap import Overlap
from tests.test_store import DEAD_OPTS, T0, members

Q = "default"
LIMITED = "tests.exclusive"


def put(store, task_name=LIMITED, now=T0):
    record = encode_record(task_name, [1], {}, None, 3, "")
    return store.schedule(Q, new_job_id(), record, now=now).id


def claim(store, now, token, acks=()):
    return store.claim(Q, 10, lease=30, token=token, instance="w", now=now, acks=acks)


def ids(reply):
    return [j.id for j in reply.jobs]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_concurrency_is_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match=f"got {bad!r}"):
        check_concurrency(bad)
    with pytest.raises(ValueError, match="concurrency="):

        @task(name=f"tests.bad_conc_{uuid.uuid4().hex}", concurrency=bad)
        def bad_task():
            pass


def test_at_most_n_hold_a_lease_and_slots_free_as_jobs_leave(store):
    store.control.publish_concurrency([Q], {LIMITED: 2, "tests.free": None})
    jobs = [put(store) for _ in range(5)]
    free = put(store, "tests.free")
    first = claim(store, T0, "w#1")
    assert ids(first) == [*jobs[:2], free]  # two slots; other tasks are not held up
    assert set(jobs[2:]) <= members(store, "pending")
    assert store.fetch(Q, jobs[2]).score == pytest.approx(T0 + 0.25)  # not polled before
    assert store.client.hget(store.key(Q, "state"), jobs[2]) is None  # no attempt counted
    assert ids(claim(store, T0, "w#2")) == []
    assert ids(claim(store, T0 + 0.25, "w#3")) == []  # both slots still held
    # jobs[0] is acknowledged: its slot frees for the next claim.
    claim(store, T0 + 0.3, "w#4", acks=[(jobs[0], "w#1", "")])
    assert ids(claim(store, T0 + 0.6, "w#5")) == [jobs[2]]
    # jobs[1] fails (a retry): its slot frees too; the retry waits like the others.
    error = {"type": "x", "message": "y"}
    store.fail(Q, jobs[1], "w#1", error, delay=0, default_max_retries=3, now=T0 + 0.7, **DEAD_OPTS)
    assert len(claim(store, T0 + 0.7, "w#6").jobs) == 1
    # Both slots held now (jobs[2] and one more); the holder of jobs[2] is SIGKILLed: no ack,
    # its lease (30 s) expires, recovery hands the job back and the slot frees.
    assert ids(claim(store, T0 + 1, "w#7")) == []
    store.recover(
        Q, token="r#1", instance="rescuer", default_max_retries=3, now=T0 + 40, **DEAD_OPTS
    )
    got = [i for i in ids(claim(store, T0 + 40, "w#8")) if i in jobs]  # (free came back too)
    assert len(got) == 2  # both holders' leases expired: two slots
    holders = store.client.hget(store.key(Q, "control"), f"hold:{LIMITED}").decode().split()
    assert sorted(h.split("|")[0] for h in holders) == sorted(got)
    assert all(h.endswith("|w#8") for h in holders)


def test_a_released_job_frees_its_slot(store):
    store.control.publish_concurrency([Q], {LIMITED: 1})
    a, b = put(store), put(store)
    assert ids(claim(store, T0, "w#1")) == [a]
    assert store.release(Q, [(a, "w#1")], now=T0 + 1) == [1]
    assert ids(claim(store, T0 + 1, "w#2")) in ([a], [b])


def test_concurrency_two_across_three_workers(real_store):
    """concurrency=2, 3 workers x concurrency 4: the task records how many of it run at once
    (in Redis, across workers): never more than 2; every job runs once."""
    overlap = Overlap("conc")
    exclusive = task(name=f"tests.exclusive_{overlap.tag}", concurrency=2, retry_backoff=0)(
        overlap.body(0.1)
    )
    workers = [Worker([Q], concurrency=4) for _ in range(3)]
    seen = overlap.run(workers, exclusive.schedule, 16)
    assert max(seen) <= 2, seen
    assert max(seen) == 2  # the limit was reached, not merely never tested
