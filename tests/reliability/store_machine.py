"""A hypothesis state machine over the store: random schedule / re-sent schedule / claim /
re-sent claim / start mark / ack / fail / extend / recover / release / cancel / requeue /
run_now / delete / reschedule / re-sent reschedule / expire / tick sequences, checked after
every step against a model of the documented semantics (lua/*.lua headers) and against
invariants that hold whatever the model says:

- each job id is in at most one of pending, running, dead;
- the job records are exactly the ids of those sets (no orphan record, no id without one),
  and per-job state and errors exist only for them;
- the unique-key index points only at pending or running jobs whose record carries that key,
  and no two pending jobs carry the same key;
- a finished job with flag 'i' is never stored again by a re-sent schedule while its
  tombstone lasts;
- a reschedule moves only a pending job (by id or by key), and a re-sent one answers its
  first send's due time without moving anything again while its mark lasts (the marks share
  ``done`` with the tombstones, and their trim);
- an expire ends only a job still held under the claim's lease token.

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

from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import RESERVED
from django_delayq.jobs.record import decode_record, encode_record
from django_delayq.jobs.state import parse_state
from django_delayq.storage.expiry import EXPIRED, GONE, NOT_HELD, expire_op
from django_delayq.storage.ops import Op
from django_delayq.storage.store import DONE_TTL, Store

Q = "default"
T0 = 1_800_000_000.0
TASK = "tests.testapp.tasks.add"
OTHER = "tests.testapp.tasks.remember"  # a task whose limit leaves TASK's jobs plain
NEVER_HELD = (1_000_000, 1000)  # TASK's rate making the queue general: holds no job back
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
    retries: int
    flags: str
    attempts: int = 0
    token: str | None = None  # the lease of the current or last attempt
    started: bool = False  # running: marked started by its runner


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
        self.tombstones: dict[str, float] = {}
        self.sent: list[tuple[str, bytes, float]] = []  # keyless schedules, to re-send
        self.last_claim: tuple[str, int, list[str]] | None = None  # token, limit, ids
        self.gone: list[str] = []  # ids of jobs finished (acked, cancelled, expired, deleted)
        # Reschedule calls sent (to re-send): (op, call id, job id or None, key or None,
        # mode, value in seconds: a delay, or an epoch for mode "at").
        self.moves: list[tuple[Op, str, str | None, str | None, str, float]] = []
        self.marks: dict[str, float] = {}  # call id -> when it moved a job ('r:<id>' in done)
        # The limits published: "none" (no control hash), "other" (OTHER's rate: TASK's
        # jobs are plain, claim.lua says so once it read one), "own" (TASK's rate: a claim
        # reading TASK's jobs is general, claim_plain.lua answers 'features').
        self.limits = "none"
        self.tokens = itertools.count()
        self.serial = itertools.count()

    def teardown(self) -> None:
        keys = list(self.store.client.scan_iter(match=f"{self.store.prefix}:*", count=1000))
        if keys:
            self.store.client.delete(*keys)
        # Each example's Store holds a connection of the shared client's pool for its
        # re-sendable ops (reschedule's, expire's): given back now, not when the collector
        # finds the Store (150 examples outran redis-py's pool of 100: MaxConnectionsError).
        self.store.transport.close()

    # -- helpers ------------------------------------------------------------------

    def _pick(self, data: st.DataObject) -> Model:
        return data.draw(st.sampled_from(sorted(self.jobs.values(), key=lambda j: j.id)))

    def _token(self, job: Model, stale: bool) -> str:
        return "stale#0" if stale or job.token is None else job.token

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
        job.status, job.score = "dead", self.now

    def _finished(self, jobs: list[Model]) -> None:
        """Jobs gone for good: tombstones for those with flag 'i' (dropping expired ones)."""
        flagged = [j for j in jobs if "i" in j.flags]
        for job in jobs:
            del self.jobs[job.id]
            self.gone.append(job.id)
        if flagged:
            for job in flagged:
                self.tombstones[job.id] = self.now
            self._trim_done()

    def _trim_done(self) -> None:
        """`done` trimmed (by a tombstone's write, or a reschedule's mark): tombstones and
        reschedule marks older than DONE_TTL go, both."""
        self.tombstones = {i: t for i, t in self.tombstones.items() if t >= self.now - DONE_TTL}
        self.marks = {c: t for c, t in self.marks.items() if t >= self.now - DONE_TTL}

    def _info(self, job: Model) -> str:
        return job.flags if job.key is None else f"{job.flags}={job.key}"

    # -- rules ----------------------------------------------------------------------

    @rule(
        delay=st.sampled_from([0.0, 1.0, 3.0]),
        key=st.sampled_from([None, *KEYS]),
        keep=st.booleans(),
        retries=st.sampled_from([0, 2]),
        flags=st.sampled_from(["", "i"]),
    )
    def schedule(self, delay: float, key: str | None, keep: bool, retries: int, flags: str) -> None:
        job_id = new_job_id()
        record = encode_record(TASK, [next(self.serial)], {}, key, retries, flags)
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
            holder.record, holder.retries, holder.flags, holder.score = record, retries, flags, due
            holder.attempts = 0  # a replaced job starts over
            assert (got.outcome, got.id, got.due_at) == ("replaced", holder.id, due)
            return
        self.jobs[job_id] = Model(job_id, "pending", due, record, key, retries, flags)
        if key:
            self.index[key] = job_id
        else:
            self.sent.append((job_id, record, delay))
        assert (got.outcome, got.id, got.due_at) == ("created", job_id, due)

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def schedule_sent_again(self, data: st.DataObject) -> None:
        """A schedule whose reply was lost, sent again (possibly long after)."""
        job_id, record, delay = data.draw(st.sampled_from(self.sent))
        op = self.store.schedule_op(Q, job_id, record, delay=delay, now=self.now)
        got = self.store.call(Op(op.resend_args, op.parse, op.policy, op.route, op.script))
        job = self.jobs.get(job_id)
        if job is not None and job.record == record:
            due = job.score if job.status == "pending" else self.now + delay
            assert (got.outcome, got.id, got.due_at) == ("created", job_id, due)
        elif job is None and job_id in self.tombstones:
            assert (got.outcome, got.id) == ("done", job_id)
        elif job is None:  # not protected (no flag 'i', or the tombstone was trimmed)
            assert got.outcome == "created"
            fields = decode_record(record)
            self.jobs[job_id] = Model(
                job_id, "pending", self.now + delay, record, None, fields.max_retries, fields.flags
            )

    @rule(limit=st.integers(0, 3), lease=st.sampled_from([1.0, 5.0]))
    def claim(self, limit: int, lease: float) -> None:
        token = f"w#{next(self.tokens)}"
        reads = limit > 0 and self._due()
        got = self.store.claim(Q, limit, lease=lease, token=token, instance="w", now=self.now)
        assert got.plain == {"none": True, "other": reads, "own": False}[self.limits]
        self._claimed(got, token, limit, lease)

    def _due(self) -> bool:
        return any(j.score <= self.now for j in self._of("pending"))

    @rule(limit=st.integers(0, 3), lease=st.sampled_from([1.0, 5.0]), data=st.data())
    def claim_plain(self, limit: int, lease: float, data: st.DataObject) -> None:
        """claim_plain.lua, carrying the acks of some running jobs without a unique key (as
        the worker sends it): when a limit applies to the due jobs it reads, it acknowledges
        them and leases nothing."""
        plain = [j for j in self._of("running") if j.key is None]
        acks = (
            data.draw(st.lists(st.sampled_from(plain), max_size=2, unique_by=lambda j: j.id))
            if plain
            else []
        )
        token = f"w#{next(self.tokens)}"
        entries = [(j.id, j.token or "", self._info(j)) for j in acks]
        general = self.limits == "own" and limit > 0 and self._due()
        got = self.store.claim(
            Q,
            limit,
            lease=lease,
            token=token,
            instance="w",
            acks=entries,
            now=self.now,
            plain=True,
        )
        assert got.acked == [1] * len(acks)
        self._finished(acks)
        if general:
            assert got.features and not got.jobs and not got.plain
            return
        assert got.plain and not got.features
        self._claimed(got, token, limit, lease)

    @rule(limits=st.sampled_from(["none", "other", "own"]))
    def publish_limits(self, limits: str) -> None:
        """A limit of another task or of TASK published, or none: the scripts' hints and
        answers change, the jobs each claim leases do not (TASK's rate holds none back)."""
        rates = {"none": {}, "other": {OTHER: (5, 1000)}, "own": {TASK: NEVER_HELD}}[limits]
        self.store.control.publish_rates([Q], {OTHER: None, TASK: None, **rates})
        if limits == "none":  # and the state a removed rate leaves ("tat:<task>")
            self.store.client.delete(self.store.key(Q, "control"))
        self.limits = limits

    def _claimed(self, got: Any, token: str, limit: int, lease: float) -> None:
        due = [j for j in self._of("pending") if j.score <= self.now][:limit]
        assert [c.id for c in got.jobs] == [j.id for j in due]
        for job, claimed in zip(due, got.jobs, strict=True):
            assert claimed.attempt == job.attempts + 1 and claimed.record == job.record
            job.status, job.token, job.started = "running", token, False
            job.score = self.now + lease - RESERVED
        if got.jobs:
            self.last_claim = (token, limit, [j.id for j in due])
        pending = self._of("pending")
        assert got.next_due == (pending[0].score if pending else None)

    @precondition(lambda self: self.last_claim)
    @rule(plain=st.booleans())
    def claim_sent_again(self, plain: bool) -> None:
        """Through either script: both answer a re-sent claim from `claims`."""
        token, limit, ids = self.last_claim
        got = self.store.claim(
            Q, limit, lease=5.0, token=token, instance="w", now=self.now, plain=plain
        )
        held = [i for i in ids if i in self.jobs and self._owned(self.jobs[i], token)]
        assert [c.id for c in got.jobs] == held

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), lease=st.sampled_from([1.0, 5.0]))
    def mark_started(self, data: st.DataObject, lease: float) -> None:
        job = self._pick(data)
        self.store.call(self.store.mark_op(Q, job.id, self.now + lease))
        if job.status == "running" and self.now + lease > job.score:
            job.score, job.started = self.now + lease, True

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), stale=st.booleans())
    def ack(self, data: st.DataObject, stale: bool) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        owned = self._owned(job, token)
        got = self.store.ack(Q, [(job.id, token, self._info(job))], now=self.now)
        assert got == [1 if owned else -1]
        if owned:
            self._release_key(job.key, job.id)
            self._finished([job])

    @rule()
    def ack_unknown_id(self) -> None:
        assert self.store.ack(Q, [(new_job_id(), "w#0", "=k1")], now=self.now) == [0]

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), stale=st.booleans(), delay=st.sampled_from([-1.0, 0.0, 2.0]))
    def fail(self, data: st.DataObject, stale: bool, delay: float) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        got = self.store.fail(
            Q, job.id, token, ERROR, delay=delay, default_max_retries=DEFAULT_MAX,
            now=self.now, **DEAD,
        )  # fmt: skip
        if not self._owned(job, token):
            if job.token == token and job.status in ("pending", "dead"):
                expected = "retry" if job.status == "pending" else "dead"
                assert got == (expected, job.score)  # sent again: the same answer
            else:
                assert got == ("lost", None)
            return
        job.attempts += 1
        if delay >= 0 and job.attempts <= job.retries and self._take_key(job):
            job.status, job.score = "pending", self.now + delay
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
            job.score = self.now + lease - (0 if job.started else RESERVED)

    @rule()
    def recover(self) -> None:
        got = self.store.recover(
            Q,
            token=f"r#{next(self.tokens)}",
            instance="rescuer",
            default_max_retries=DEFAULT_MAX,
            now=self.now,
            **DEAD,
        )
        running = self._of("running")
        unstarted = [j for j in running if not j.started and j.score < self.now - RESERVED]
        started = [j for j in running if j.started and j.score < self.now]
        expected = []
        for job in unstarted:
            job.token = None
            if self._take_key(job):
                job.status, job.score = "pending", self.now
                expected.append((job.id, "refund", job.attempts))
            else:
                self._bury(job)
                expected.append((job.id, "dead", job.attempts))
        for job in started:
            job.token, job.attempts = None, job.attempts + 1
            if job.attempts <= job.retries and self._take_key(job):
                job.status, job.score = "pending", self.now
                expected.append((job.id, "retry", job.attempts))
            else:
                self._bury(job)
                expected.append((job.id, "dead", job.attempts))
        self._trim_dead()  # on every call: a quiet queue's dead set is trimmed too
        if expected:
            self.last_claim = None  # the lost worker's claims are forgotten with it
        assert [(r.id, r.outcome, r.attempts) for r in got] == expected

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), stale=st.booleans())
    def release(self, data: st.DataObject, stale: bool) -> None:
        job = self._pick(data)
        token = self._token(job, stale)
        got = self.store.release(Q, [(job.id, token)], now=self.now)
        if self._owned(job, token):
            if self._take_key(job):
                job.status, job.score = "pending", self.now
                assert got == [1]
            else:
                self._bury(job)  # superseded: another pending job holds its key
                assert got == [2]
        elif job.token == token and job.status in ("pending", "dead"):
            assert got == [1 if job.status == "pending" else 2]
        else:
            assert got == [0]

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), by_key=st.booleans())
    def cancel(self, data: st.DataObject, by_key: bool) -> None:
        if by_key:
            key = data.draw(st.sampled_from(KEYS))
            target = self.index.get(key)
            got = self.store.cancel(Q, key=key, now=self.now)
        else:
            target = self._pick(data).id
            got = self.store.cancel(Q, job_id=target, now=self.now)
        job = self.jobs.get(target or "")
        if job is None or job.status != "pending":
            assert got is None
            return
        assert got == (job.id, job.record)
        self._release_key(job.key, job.id)
        self._finished([job])

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        job = self._pick(data)
        got = self.store.requeue(Q, [job.id], now=self.now)
        if job.status != "dead":
            assert got == [0]
        elif self._take_key(job):
            assert got == [1]
            job.status, job.score, job.attempts, job.token = "pending", self.now, 0, None
        else:
            assert got == [2]

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
        assert self.store.delete_dead(Q, [job.id], now=self.now) == [dead]
        if dead:
            self._finished([job])

    @precondition(lambda self: self.jobs or self.gone)
    @rule(
        data=st.data(),
        by_key=st.booleans(),
        mode=st.sampled_from(["delay", "at"]),
        value=st.sampled_from([-1.0, 0.0, 2.0, 5.0]),
    )
    def reschedule(self, data: st.DataObject, by_key: bool, mode: str, value: float) -> None:
        """By key, or by the id of any job (pending, claimed, running, dead), of a finished
        one or of one never stored; ``value`` a delay, or for "at" seconds from now (-1: a
        time past, which means now)."""
        key = job_id = None
        if by_key:
            key = data.draw(st.sampled_from(KEYS))
        else:
            known = sorted(self.jobs) + sorted(set(self.gone[-4:]))
            job_id = data.draw(st.sampled_from([*known, "never-stored"]))
        if mode == "at":
            value = self.now + value
        call_id = new_job_id()
        op = self.store.reschedule_op(
            Q, job_id, key, now=self.now, call_id=call_id, **{mode: value}
        )
        self.moves.append((op, call_id, job_id, key, mode, value))
        self._moved(self.store.call(op), call_id, job_id, key, mode, value)

    def _moved(
        self, got: Any, call_id: str, job_id: str | None, key: str | None, mode: str, value: float
    ) -> None:
        """A first send's answer (or a re-send's that found no mark: it runs as one)."""
        job = self.jobs.get(self.index.get(key, "") if key else job_id or "")
        if job is None or job.status != "pending":
            assert got is None, (got, job)
            return
        due = self.now + max(value, 0.0) if mode == "delay" else max(value, self.now)
        assert (got.id, got.due_at, got.record) == (job.id, due, job.record)
        job.score = due
        self.marks[call_id] = self.now
        self._trim_done()

    @precondition(lambda self: self.moves)
    @rule(data=st.data())
    def reschedule_sent_again(self, data: st.DataObject) -> None:
        """A reschedule whose reply was lost, sent again (possibly long after, past its
        mark's DONE_TTL: then it runs as a first send)."""
        _, call_id, job_id, key, mode, value = data.draw(st.sampled_from(self.moves))
        # Built again at this step's now (a real re-send's now is Redis's TIME then), with
        # the first send's call id.
        op = self.store.reschedule_op(
            Q, job_id, key, now=self.now, call_id=call_id, **{mode: value}
        )
        got = self.store.call(Op(op.resend_args, op.parse, op.policy, op.route, op.script))
        first = self.marks.get(call_id)
        if key is not None and key not in self.index:
            assert got is None, got  # the key names no job now: nothing to answer for
            return
        if first is None:
            self._moved(got, call_id, job_id, key, mode, value)
            return
        # The first send moved a job: the same answer, nothing moved again (by key, the
        # key's holder now, which the first send moved unless it finished since).
        target = self.index[key] if key is not None else job_id
        due = first + max(value, 0.0) if mode == "delay" else max(value, first)
        job = self.jobs.get(target)
        assert (got.id, got.due_at, got.record) == (target, due, job.record if job else b"")

    @precondition(lambda self: self.jobs or self.gone)
    @rule(data=st.data(), stale=st.booleans())
    def expire(self, data: st.DataObject, stale: bool) -> None:
        """expire.lua as the worker sends it for a claimed job it has not started (whose
        expiry passed by the claim's clock: the worker decides; the script only fences by
        the lease token): a job held under that token ends, any other is left as it is."""
        unstarted = [j for j in self.jobs.values() if not (j.status == "running" and j.started)]
        choices = sorted(j.id for j in unstarted) + sorted(set(self.gone[-4:]))
        if not choices:
            return
        target = data.draw(st.sampled_from(choices))
        job = self.jobs.get(target)
        token = "stale#0" if job is None else self._token(job, stale)
        due = None if job is None else job.score
        (got,) = self.store.call(expire_op(self.store, Q, [(target, token, due)], now=self.now))
        if job is None:
            assert got == GONE
        elif self._owned(job, token):
            assert got == EXPIRED
            self._release_key(job.key, job.id)
            self._finished([job])
        else:
            assert got == NOT_HELD

    @rule(seconds=st.sampled_from([0.5, 1.0, 4.0, DONE_TTL]))
    def tick(self, seconds: float) -> None:
        self.now += seconds

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def store_matches_model_and_invariants(self) -> None:
        key = self.store.key
        # One round trip for the seven reads (checked after every step, they were most of
        # the commands a run sends).
        pipe = self.store.client.pipeline(transaction=False)
        for status in ("pending", "running", "dead"):
            pipe.zrange(key(Q, status), 0, -1, withscores=True)
        pipe.hgetall(key(Q, "jobs"))
        pipe.hgetall(key(Q, "state"))
        pipe.hkeys(key(Q, "errors"))
        pipe.hgetall(key(Q, "keys"))
        *zsets, jobs, state, error_ids, keys = pipe.execute()
        sets = {
            status: {_text(m): s / 1000 for m, s in members}  # scores are milliseconds
            for status, members in zip(("pending", "running", "dead"), zsets, strict=True)
        }
        records = {_text(k): v for k, v in jobs.items()}
        states = {_text(k): parse_state(v) for k, v in state.items()}
        errors = {_text(k) for k in error_ids}
        index = {_text(k): _text(v) for k, v in keys.items()}

        # Invariants, whatever the model says.
        pending, running, dead = (set(sets[s]) for s in ("pending", "running", "dead"))
        assert not (pending & running or pending & dead or running & dead), "id in two sets"
        assert set(records) == pending | running | dead, "records and sets disagree"
        assert set(states) <= set(records), "state kept for a job that is gone"
        assert errors <= set(records), "errors kept for a job that is gone"
        for unique_key, job_id in index.items():
            assert job_id in pending | running, f"key {unique_key} points at a dead/gone job"
            assert decode_record(records[job_id]).key == unique_key
        pending_keys = [decode_record(records[i]).key for i in pending]
        pending_keys = [k for k in pending_keys if k]
        assert len(pending_keys) == len(set(pending_keys)), "two pending jobs share a key"

        # The model.
        for status in ("pending", "running", "dead"):
            assert sets[status] == {j.id: j.score for j in self._of(status)}, status
        assert records == {j.id: j.record for j in self.jobs.values()}
        assert index == self.index
        for job in self.jobs.values():
            attempts, token = states.get(job.id, (0, None))
            assert attempts == job.attempts, job
            assert token == job.token, job
