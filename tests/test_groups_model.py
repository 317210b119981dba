"""Limits per group against a model: hypothesis drives random sequences of schedule, claim,
ack, fail, release, cancel and worker crashes (recovery after the lease) over the store, on
fakeredis and real Redis, and checks after every step that no group ever has more than its
limit of leases, that a worker asking for jobs gets one whenever a group with due work has a
free slot (no head-of-line blocking), that every job not finished is found pending or
running, and at the end that every job runs (no parked job is forgotten, no slot leaks)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.storage.store import Store
from tests.conftest import delete_keys
from tests.test_store import DEAD_OPTS, T0

Q = "default"
TASK = "tests.grouped_model"
LIMIT = 2
GROUPS = ("a", "b", "c", "d")

step = st.one_of(
    st.tuples(st.just("schedule"), st.sampled_from(GROUPS), st.sampled_from([0, 0, 5, -5])),
    st.tuples(st.just("claim"), st.integers(1, 6)),
    st.tuples(st.just("ack"), st.integers(0, 50)),
    st.tuples(st.just("fail"), st.integers(0, 50)),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("crash")),
)


class Model:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.now = T0
        self.group: dict[str, str] = {}  # every job not finished -> its group
        self.held: dict[str, str] = {}  # job id -> lease token (as the workers know them)
        self.calls = 0

    def token(self) -> str:
        self.calls += 1
        return f"w#{self.calls}"

    def schedule(self, group: str, priority: int) -> None:
        record = encode_record(TASK, [1], {}, None, 3, "g", priority)
        job_id = new_job_id()
        self.store.schedule(Q, job_id, record, now=self.now, group=group)
        self.group[job_id] = group

    def claim_round(self, want: int, acks=()) -> list[str]:
        reply = self.store.claim(
            Q, want, lease=30, token=self.token(), instance="w", now=self.now, acks=acks
        )
        return [j.id for j in reply.jobs]

    def claim(self, want: int) -> None:
        """A worker with `want` free slots, claiming again while it gets jobs and some are
        due (as a woken worker does)."""
        got: list[str] = []
        for _ in range(len(self.group) + 2):
            token_before = self.calls + 1
            new = self.claim_round(want - len(got))
            for job_id in new:
                self.held[job_id] = f"w#{token_before}"
            got += new
            if len(got) >= want or (not new and not self.due_behind_free_slot()):
                break
        if len(got) < want:
            assert not self.due_behind_free_slot(), "a group with a free slot was passed over"

    def running_by_group(self) -> dict[str, int]:
        out = dict.fromkeys(GROUPS, 0)
        for job_id in self.held:
            out[self.group[job_id]] += 1
        return out

    def due_behind_free_slot(self) -> bool:
        running = self.running_by_group()
        waiting = {self.group[i] for i in self.group if i not in self.held}
        return any(running[g] < LIMIT for g in waiting)

    def pick(self, n: int) -> tuple[str, str] | None:
        if not self.held:
            return None
        job_id = sorted(self.held)[n % len(self.held)]
        return job_id, self.held[job_id]

    def ack(self, n: int) -> None:
        picked = self.pick(n)
        if picked:
            assert self.store.ack(Q, [(*picked, "g")], now=self.now) == [1]
            del self.held[picked[0]], self.group[picked[0]]

    def fail(self, n: int) -> None:
        picked = self.pick(n)
        if picked:
            error = {"type": "x", "message": "y"}
            self.store.fail(
                Q, *picked, error, delay=0, default_max_retries=100, now=self.now, **DEAD_OPTS
            )
            del self.held[picked[0]]

    def release(self, n: int) -> None:
        picked = self.pick(n)
        if picked:
            assert self.store.release(Q, [picked], now=self.now) == [1]
            del self.held[picked[0]]

    def cancel(self, n: int) -> None:
        waiting = sorted(i for i in self.group if i not in self.held)
        if waiting:
            job_id = waiting[n % len(waiting)]
            assert self.store.cancel(Q, job_id, now=self.now) is not None
            del self.group[job_id]

    def crash(self) -> None:
        """Every worker dies: their leases expire and recovery hands the jobs back."""
        self.now += 31
        self.store.recover(
            Q,
            token=self.token(),
            instance="rescuer",
            default_max_retries=100,
            now=self.now,
            **DEAD_OPTS,
        )
        self.held.clear()

    def check(self) -> None:
        store = self.store
        assert max(self.running_by_group().values()) <= LIMIT
        running = store.client.zrange(store.key(Q, "running"), 0, -1)
        assert {i.decode() for i in running} == set(self.held)
        for job_id in self.group:
            job = store.fetch(Q, job_id)
            want = "running" if job_id in self.held else "pending"
            assert job is not None and job.status == want, (job_id, job)

    def drain(self) -> None:
        for _ in range(4 * len(self.group) + 4):
            if not self.group:
                break
            self.now += 1
            acks = [(i, t, "g") for i, t in self.held.items()]
            for job_id, _, _ in acks:
                del self.group[job_id]
            self.held.clear()
            token = f"w#{self.calls + 1}"
            for job_id in self.claim_round(8, acks):
                self.held[job_id] = token
            self.check()
        assert not self.group, f"jobs never ran: {sorted(self.group.values())}"
        store = self.store
        for kind in ("parked", "holds", "groups", "pending", "ranked"):
            assert not store.client.exists(store.key(Q, kind)), kind


@pytest.mark.parametrize("redis_client", ["fake", "real"], indirect=True)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, max_size=40))
def test_group_limit_holds_against_the_model(redis_client, steps):
    store = Store(redis_client, prefix=f"dqt-{uuid.uuid4().hex[:12]}")
    try:
        store.control.publish_group_limits([Q], {TASK: (LIMIT, None)})
        model = Model(store)
        for name, *args in steps:
            getattr(model, name)(*args)
            model.check()
        model.drain()
    finally:
        delete_keys(redis_client, store.prefix)
