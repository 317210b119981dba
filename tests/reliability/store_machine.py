"""A hypothesis state machine over the store: random schedule / cancel / claim / ack / fail
/ extend / recover / release / requeue / run_now / delete / tick sequences, checked after
every step against a model of the documented semantics (lua/*.lua headers) and against
invariants that hold whatever the model says:

- each job id is in at most one of pending, running, dead;
- the job records are exactly the ids of those sets (no orphan record, no id without
  one), and per-job state (meta) exists only for them;
- the unique-key index points only at pending or running jobs whose record carries
  that key, and no two pending jobs carry the same key.

Time is passed to every script (``now=``) in steps of 0.5 s, so scores are exact.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from django_delayq.job import decode_record, encode_record, new_job_id, parse_meta
from django_delayq.store import Store

Q = "default"
T0 = 1_800_000_000.0
TASK = "tests.testapp.tasks.add"
KEYS = ("k1", "k2")
DEFAULT_MAX = 1
DEAD = {"dead_max_age": 6.0, "dead_max_count": 3, "max_errors": 3}
ERROR = {"type": "builtins.ValueError", "message": "boom", "traceback": "tb", "attempt": 1}


@dataclass
class Model:
    id: str
    status: str  # pending | running | dead
    score: float
    record: bytes
    key: str | None
    retries: int | None  # the record's max_retries ("r")
    attempts: int = 0
    token: str | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value


class StoreMachine(RuleBasedStateMachine):
    """Subclass with ``make_client`` returning a fresh client (fakeredis or a real server)."""

    make_client: Callable[[], redis.Redis]

    def __init__(self) -> None:
        super().__init__()
        self.store = Store(type(self).make_client(), prefix=f"sm-{uuid.uuid4().hex[:10]}")
        self.now = T0
        self.jobs: dict[str, Model] = {}
        self.index: dict[str, str] = {}
        self.tokens = itertools.count()
        self.serial = itertools.count()

    def teardown(self) -> None:
        keys = list(self.store.client.scan_iter(match=f"{self.store.prefix}:*", count=1000))
        if keys:
            self.store.client.delete(*keys)

    # -- helpers ------------------------------------------------------------------

    def _pick(self, data: st.DataObject) -> Model:
        return data.draw(st.sampled_from(sorted(self.jobs.values(), key=lambda j: j.id)))

    def _token(self, job: Model, stale: bool) -> str:
        return "stale-token" if stale or job.token is None else job.token

    def _owned(self, job: Model, token: str) -> bool:
        return job.status == "running" and job.token == token

    def _release_key(self, key: str | None, job_id: str) -> None:
        if key and self.index.get(key) == job_id:
            del self.index[key]

    def _of(self, status: str) -> list[Model]:
        return sorted(
            (j for j in self.jobs.values() if j.status == status), key=lambda j: (j.score, j.id)
        )

    def _trim_dead(self) -> None:
        old = [j for j in self._of("dead") if j.score < self.now - DEAD["dead_max_age"]]
        for job in old[:100]:
            del self.jobs[job.id]
        dead = self._of("dead")
        for job in dead[: max(len(dead) - DEAD["dead_max_count"], 0)][:100]:
            del self.jobs[job.id]

    def _take_key(self, job: Model) -> bool:
        """A job going back to pending takes its key, unless another pending job holds it."""
        holder = self.jobs.get(self.index.get(job.key or "", ""))
        if holder is not None and holder.id != job.id and holder.status == "pending":
            return False
        if job.key:
            self.index[job.key] = job.id
        return True

    def _bury(self, job: Model) -> None:
        self._release_key(job.key, job.id)
        job.status, job.score, job.token = "dead", self.now, None

    # -- rules ----------------------------------------------------------------------

    @rule(
        delay=st.sampled_from([0.0, 1.0, 3.0]),
        key=st.sampled_from([None, *KEYS]),
        keep=st.booleans(),
        retries=st.sampled_from([None, 0, 2]),
    )
    def schedule(self, delay: float, key: str | None, keep: bool, retries: int | None) -> None:
        job_id = new_job_id()
        record = encode_record(TASK, [next(self.serial)], {}, key, retries)
        conflict = "keep" if keep else "replace"
        got = self.store.schedule(
            Q, job_id, record, delay=delay, key=key, on_conflict=conflict, now=self.now
        )
        due = self.now + delay
        holder = self.jobs.get(self.index.get(key or "", ""))
        if holder is not None and holder.status == "pending":
            if keep:
                assert (got.outcome, got.id, got.due_at) == ("kept", holder.id, holder.score)
                assert got.record == holder.record
                return
            holder.record, holder.retries, holder.score = record, retries, due
            holder.attempts = 0  # a replaced job starts over
            assert (got.outcome, got.id, got.due_at) == ("replaced", holder.id, due)
            return
        self.jobs[job_id] = Model(job_id, "pending", due, record, key, retries)
        if key:
            self.index[key] = job_id
        assert (got.outcome, got.id, got.due_at) == ("created", job_id, due)

    @rule(limit=st.integers(0, 3), lease=st.sampled_from([1.0, 5.0]))
    def claim(self, limit: int, lease: float) -> None:
        token = f"t{next(self.tokens)}"
        got = self.store.claim(Q, limit, lease=lease, token=token, worker="w", now=self.now)
        due = [j for j in self._of("pending") if j.score <= self.now][:limit]
        assert [c.id for c in got.jobs] == [j.id for j in due]
        for job, claimed in zip(due, got.jobs, strict=True):
            job.attempts += 1
            job.status, job.token, job.score = "running", token, self.now + lease
            assert claimed.attempts == job.attempts and claimed.record == job.record
        pending = self._of("pending")
        assert got.next_due == (pending[0].score if pending else None)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), stale=st.booleans())
    def ack(self, data: st.DataObject, stale: bool) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        owned = self._owned(job, token)
        assert self.store.ack(Q, [(job.id, token, job.key)], now=self.now) == [owned]
        if owned:
            del self.jobs[job.id]
            self._release_key(job.key, job.id)

    @rule()
    def ack_unknown_id(self) -> None:
        assert self.store.ack(Q, [(new_job_id(), "t0", "k1")], now=self.now) == [False]

    @precondition(lambda self: self.jobs)
    @rule(
        data=st.data(),
        stale=st.booleans(),
        delay=st.sampled_from([-1.0, 0.0, 2.0]),
        max_retries=st.sampled_from([0, 1, 3]),
    )
    def fail(self, data: st.DataObject, stale: bool, delay: float, max_retries: int) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        owned = self._owned(job, token)
        got = self.store.fail(
            Q, job.id, token, ERROR, delay=delay, max_retries=max_retries, key=job.key,
            now=self.now, **DEAD,
        )  # fmt: skip
        if not owned:
            assert got == ("lost", None)
            return
        if delay >= 0 and job.attempts <= max_retries and self._take_key(job):
            job.status, job.score, job.token = "pending", self.now + delay, None
            assert got == ("retry", self.now + delay)
        else:
            self._bury(job)
            self._trim_dead()
            assert got == ("dead", self.now)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), stale=st.booleans(), lease=st.sampled_from([1.0, 5.0]))
    def extend(self, data: st.DataObject, stale: bool, lease: float) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        owned = self._owned(job, token)
        assert self.store.extend(Q, [(job.id, token)], lease, now=self.now) == [owned]
        if owned:
            job.score = self.now + lease

    @rule()
    def recover(self) -> None:
        got = self.store.recover(Q, default_max_retries=DEFAULT_MAX, now=self.now, **DEAD)
        expected = []
        for job in [j for j in self._of("running") if j.score < self.now][:100]:
            retries = DEFAULT_MAX if job.retries is None else job.retries
            if job.attempts <= retries and self._take_key(job):
                job.status, job.score, job.token = "pending", self.now, None
                expected.append((job.id, "retry"))
            else:
                self._bury(job)
                expected.append((job.id, "dead"))
        self._trim_dead()  # on every call: a quiet queue's dead set is trimmed too
        assert got == expected

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), stale=st.booleans())
    def release(self, data: st.DataObject, stale: bool) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        owned = self._owned(job, token)
        assert self.store.release(Q, [(job.id, token)], now=self.now) == [owned]
        if owned and self._take_key(job):
            job.status, job.score, job.token = "pending", self.now, None
            job.attempts = max(job.attempts - 1, 0)
        elif owned:
            self._bury(job)  # superseded: another pending job holds its key

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), by_key=st.booleans())
    def cancel(self, data: st.DataObject, by_key: bool) -> None:
        if by_key:
            key = data.draw(st.sampled_from(KEYS))
            target = self.index.get(key)
            got = self.store.cancel(Q, key=key)
        else:
            target = self._pick(data).id
            got = self.store.cancel(Q, job_id=target)
        job = self.jobs.get(target or "")
        if job is None or job.status != "pending":
            assert got is None
            return
        assert got == (job.id, job.record)
        del self.jobs[job.id]
        self._release_key(job.key, job.id)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        job = self._pick(data)
        requeued = job.status == "dead" and self._take_key(job)
        assert self.store.requeue(Q, [job.id], now=self.now) == [requeued]
        if requeued:
            job.status, job.score, job.attempts = "pending", self.now, 0

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def run_now(self, data: st.DataObject) -> None:
        job = self._pick(data)
        pending = job.status == "pending"
        assert self.store.run_now(Q, [job.id], now=self.now) == [pending]
        if pending:
            job.score = min(job.score, self.now)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def delete_dead(self, data: st.DataObject) -> None:
        job = self._pick(data)
        dead = job.status == "dead"
        assert self.store.delete_dead(Q, [job.id]) == [dead]
        if dead:
            del self.jobs[job.id]

    @rule(seconds=st.sampled_from([0.5, 1.0, 4.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def store_matches_model_and_invariants(self) -> None:
        client, key = self.store.client, self.store.key
        sets = {
            status: {_text(m): s for m, s in client.zrange(key(Q, status), 0, -1, withscores=True)}
            for status in ("pending", "running", "dead")
        }
        records = {_text(k): v for k, v in client.hgetall(key(Q, "jobs")).items()}
        metas = {_text(k): parse_meta(v) for k, v in client.hgetall(key(Q, "meta")).items()}
        index = {_text(k): _text(v) for k, v in client.hgetall(key(Q, "keys")).items()}

        # Invariants, whatever the model says.
        pending, running, dead = (set(sets[s]) for s in ("pending", "running", "dead"))
        assert not (pending & running or pending & dead or running & dead), "id in two sets"
        assert set(records) == pending | running | dead, "records and sets disagree"
        assert set(metas) <= set(records), "state kept for a job that is gone"
        for unique_key, job_id in index.items():
            assert job_id in pending | running, f"key {unique_key} points at a dead/gone job"
            assert decode_record(records[job_id])["key"] == unique_key
        pending_keys = [decode_record(records[i])["key"] for i in pending]
        pending_keys = [k for k in pending_keys if k]
        assert len(pending_keys) == len(set(pending_keys)), "two pending jobs share a key"

        # The model.
        for status in ("pending", "running", "dead"):
            assert sets[status] == {j.id: j.score for j in self._of(status)}, status
        assert records == {j.id: j.record for j in self.jobs.values()}
        assert index == self.index
        for job in self.jobs.values():
            meta = metas.get(job.id, {})
            assert int(meta.get("n") or 0) == job.attempts, job
            assert meta.get("t") == job.token, job
