"""A hypothesis state machine over the finished jobs of one queue: jobs scheduled, claimed
and acknowledged (alone, in a claim's acks through claim.lua or claim_plain.lua, the ack
sent twice), failed and retried, cancelled, the queue turning general and plain again, with
the clock moving on, under small bounds of age and count. Checked after
every step against a model of the documented rules (storage/finished.py, lua/include/keeping.lua's
keep_finished), on fakeredis and the real Redis:

- a job is kept exactly when it succeeded or was cancelled, with that outcome, once;
- what is kept is the newest FINISHED_MAX_COUNT of those that ended within FINISHED_MAX_AGE
  of the last write (the trim happens as jobs finish; the keys expire after the age; of
  jobs that ended in the same millisecond, the smaller id goes first);
- a kept job's errors are the ones it had (a retried job's failures come with it);
- a job is never both live and kept, and `finished` and `kept` hold the same ids.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import fakeredis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from django_delayq.jobs.finished import parse_kept
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.storage.store import Claim, Store
from tests.conftest import delete_keys, real_redis, run_machine

Q = "default"
T0 = 1_800_000_000_000  # epoch ms: the model counts in integer milliseconds, as Redis does
AGE, COUNT = 10_000, 4  # ms, jobs
KEEP = (AGE, COUNT)
DEAD = {"dead_max_age": 3600.0, "dead_max_count": 100, "max_errors": 10}
TASK = "tests.testapp.tasks.add"
OTHER = "tests.testapp.tasks.remember"  # a task whose rate leaves the jobs here plain
NEVER_HELD = (1_000_000, 1000)  # a rate of their own task: general, no job held back


class FinishedMachine(RuleBasedStateMachine):
    client_factory = staticmethod(lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))

    def __init__(self) -> None:
        super().__init__()
        self.store = Store(self.client_factory(), prefix=f"dqf-{new_job_id().lower()}")
        self.ms = T0
        self.tokens = (f"w#{n}" for n in itertools.count())
        self.pending: set[str] = set()
        self.running: dict[str, str] = {}  # id -> token
        self.failures: dict[str, int] = {}  # id -> failed attempts so far
        self.ended: list[tuple[str, str, int, int]] = []  # (id, outcome, at ms, failures)
        self.acked: list[tuple[str, str]] = []  # (id, token) of acks to send again
        # "none" (no control hash), "other" (OTHER's rate: plain, claim.lua says so once it
        # read a job), "own" (the jobs' task's rate: claim_plain says 'features' when it reads
        # one)
        self.limits = "none"

    def teardown(self) -> None:
        delete_keys(self.store.client, self.store.prefix)

    @property
    def now(self) -> float:
        return self.ms / 1000

    def _write(self, job_id: str, outcome: str) -> None:
        self.ended.append((job_id, outcome, self.ms, self.failures.get(job_id, 0)))
        cutoff = self.ms - AGE
        fresh = sorted((e for e in self.ended if e[2] >= cutoff), key=lambda e: (e[2], e[0]))
        self.ended = fresh[-COUNT:]  # ties in the same ms: the smaller id goes first

    @rule(n=st.integers(1, 3))
    def schedule(self, n: int) -> None:
        for _ in range(n):
            job_id = new_job_id()
            rec = encode_record(TASK, [1, 2], {}, None, 5)
            self.store.schedule(Q, job_id, rec, delay=0, now=self.now)
            self.pending.add(job_id)

    def _claim(self, limit: int, token: str, plain: bool, **options: Any) -> Claim:
        """A claim through claim_plain.lua (``plain``) or claim.lua, as the worker sends it:
        claim.lua at once when claim_plain.lua answers 'features'."""
        reads = limit > 0 and bool(self.pending)  # every pending job here is due
        reply = self.store.claim(
            Q, limit, lease=60, token=token, instance="w", now=self.now, plain=plain, **options
        )
        if reply.features:
            assert plain and self.limits == "own" and reads and not reply.jobs
            again = self.store.claim(Q, limit, lease=60, token=token, instance="w", now=self.now)
            assert not again.plain
            return replace(again, acked=reply.acked)
        if plain:
            assert reply.plain and not (self.limits == "own" and reads)
        else:
            assert reply.plain == {"none": True, "other": reads, "own": False}[self.limits]
        return reply

    @rule(limits=st.sampled_from(["none", "other", "own"]))
    def publish_limits(self, limits: str) -> None:
        rates = {"none": {}, "other": {OTHER: (5, 1000)}, "own": {TASK: NEVER_HELD}}[limits]
        self.store.control.publish_rates([Q], {OTHER: None, TASK: None, **rates})
        if limits == "none":  # and the state a removed rate leaves ("tat:<task>")
            self.store.client.delete(self.store.key(Q, "control"))
        self.limits = limits

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), with_claim=st.booleans(), plain=st.booleans())
    def claim_and_ack(self, data: st.DataObject, with_claim: bool, plain: bool) -> None:
        token = next(self.tokens)
        claim = self._claim(1, token, plain)
        if not claim.jobs:
            return
        job_id = claim.jobs[0].id
        self.pending.discard(job_id)
        self.store.call(self.store.mark_op(Q, job_id, self.now + 60))
        if data.draw(st.booleans(), label="fails"):
            error = {"type": "ValueError", "message": f"boom {job_id}", "attempt": 1}
            outcome = self.store.fail(
                Q, job_id, token, error, delay=0, default_max_retries=5, now=self.now, **DEAD
            )
            self.failures[job_id] = self.failures.get(job_id, 0) + 1
            # max_retries=5: the sixth failed attempt is dead-lettered, not kept, not pending
            assert outcome[0] == ("dead" if self.failures[job_id] > 5 else "retry"), outcome
            if outcome[0] == "retry":
                self.pending.add(job_id)
            return
        entry = (job_id, token, "", f"1 {self.ms} 1.000 - w")
        if with_claim:  # in a claim's acks, as the worker sends it
            token2 = next(self.tokens)
            reply = self._claim(0, token2, plain, acks=[entry], keep=KEEP)
            assert reply.acked == [1]
        else:
            assert self.store.ack(Q, [entry], now=self.now, keep=KEEP) == [1]
        self._write(job_id, "succeeded")
        self.acked.append((job_id, token))

    @precondition(lambda self: self.acked)
    @rule(data=st.data())
    def ack_again(self, data: st.DataObject) -> None:
        job_id, token = data.draw(st.sampled_from(self.acked))
        assert self.store.ack(Q, [(job_id, token, "", "")], now=self.now, keep=KEEP) == [0]

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.pending)))
        argv = (job_id, "", self.ms, *KEEP)
        assert self.store.call(self.store.op("cancel", Q, argv, lambda r: r))
        self.pending.discard(job_id)
        self._write(job_id, "cancelled")

    @rule(ms=st.sampled_from([1, 1000, 4000, 9999, 10_001]))
    def time_passes(self, ms: int) -> None:
        self.ms += ms

    @invariant()
    def kept_as_the_model_says(self) -> None:
        client = self.store.client
        finished = client.zrange(self.store.key(Q, "finished"), 0, -1, withscores=True)
        kept = client.hgetall(self.store.key(Q, "kept"))
        assert {k.decode() for k in kept} == {m.decode() for m, _ in finished}
        expected = {job_id: (outcome, at, fails) for job_id, outcome, at, fails in self.ended}
        assert {m.decode(): int(s) for m, s in finished} == {
            job_id: at for job_id, (_, at, _) in expected.items()
        }
        for raw_id, raw in kept.items():
            job_id = raw_id.decode()
            entry = parse_kept(raw)
            outcome, _, fails = expected[job_id]
            assert entry.outcome == outcome and len(entry.errors) == fails
            assert all(e["message"] == f"boom {job_id}" for e in entry.errors)
            assert entry.record.startswith(b"5")
            assert (entry.last_attempt is not None) == (outcome == "succeeded")
            assert self.store.fetch(Q, job_id) is None  # never live and kept


# Most examples on the real server: the same example costs its Lua about 2.3x the CPU on
# fakeredis (Python runs every command a script calls; 30 store-machine examples: 2.2 s
# against 0.9 s with the server's own), and the real server is what users run; fakeredis
# keeps enough to show the scripts still run on it.
def test_the_finished_machine_on_fakeredis():
    run_machine(FinishedMachine, 30)


def test_the_finished_machine_on_redis():
    class Machine(FinishedMachine):
        client_factory = staticmethod(real_redis)

    run_machine(Machine, 120)
