"""A hypothesis state machine over one batch: members scheduled (some with a unique key),
replaced by their key inside the block (the same member) or from outside it (no member any
more: cancelled for the batch), claimed, acked (the ack sent twice), failed to dead,
cancelled, requeued from dead; their forward entries taken at once,
late (a crash: left for the sweep) or twice; the block's seal at any point (its callbacks
placed at once, or left decided by a crash for the sweep); cancel_batch. (Members that wait
in the database, savepoints: tests/test_batch_outbox_machine.py.) Checked against a model of
the documented rules (batches/api.py) after every step, on fakeredis and the real
Redis:

- each callback job is stored at most once, whatever is re-sent or left by a crash;
- a callback is stored only once its rule held at a forwarding: 'death' a member dead,
  'success' the block sealed and every member succeeded, 'complete' the block sealed and every
  member ended; none decided after cancel_batch;
- once every entry is forwarded and the sweep ran, every callback whose rule held is stored.
"""

from __future__ import annotations

import itertools
import json

import fakeredis
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from django_delayq.batches import forwarding, links
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.storage.store import Store
from tests.conftest import delete_keys, real_redis, run_machine
from tests.testapp import tasks as t

Q = "default"
KINDS = ("death", "success", "complete")


def callback(kind: str) -> str:
    step = {"t": t.record.name, "a": ["cb", kind], "k": {}, "o": {}}
    return json.dumps({"steps": [step], "death": None})


class BatchMachine(RuleBasedStateMachine):
    client_factory = staticmethod(lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))

    def __init__(self) -> None:
        super().__init__()
        self.store = Store(self.client_factory(), prefix=f"dqm-{new_job_id().lower()}")
        self.batch_id = new_job_id()
        self.store.run(
            self.store.batches.open_ops(self.batch_id, {k: callback(k) for k in KINDS}, 0)
        )
        self.members: dict[str, str] = {}  # id -> pending | running | succeeded | dead | cancelled
        self.tokens: dict[str, str] = {}
        self.counter = itertools.count()
        self.sealed = False
        self.cancelled = False
        self.fired: dict[str, bool] = dict.fromkeys(KINDS, False)  # the model's decisions
        self.forwarded: dict[str, str] = {}  # the batch's view: id -> last outcome taken
        self.keys: dict[str, str] = {}  # member id -> its unique key, for keyed members
        self.link = links.dumps({"b": self.batch_id})
        self.outside: set[str] = set()  # jobs replaced from outside: no members any more
        self.ends: dict[str, list[str]] = {}  # member id -> the ends the model gave it

    def teardown(self) -> None:
        delete_keys(self.store.client, self.store.prefix)

    # -- helpers ---------------------------------------------------------------------------

    def _decide(self) -> None:
        """The model's rules, applied where the code decides: a forwarding, a seal."""
        if self.cancelled:
            return
        outcomes = list(self.forwarded.values())
        if "dead" in outcomes:
            self.fired["death"] = True
        if self.sealed:
            total = len(self.members)
            if len(outcomes) >= total:
                self.fired["complete"] = True
            if outcomes.count("succeeded") >= total:
                self.fired["success"] = True

    def _ended(self, job_id: str, outcome: str) -> None:
        """The model ends a member: the only ends its forward entries may carry."""
        self.members[job_id] = outcome
        self.ends.setdefault(job_id, []).append(outcome)

    def _forward(self, ids: list[str], twice: bool) -> None:
        entries = self.store.batches.read_forward(Q, ids)
        for e in entries:
            self.forwarded[e.id] = e.outcome
        forwarding.forward(self.store, entries)
        if twice:
            forwarding.forward(self.store, entries)
        if entries:
            self._decide()

    def _stored_callbacks(self) -> dict[str, int]:
        records = self.store.client.hvals(self.store.key(Q, "jobs"))
        found = dict.fromkeys(KINDS, 0)
        for record in records:
            if b'"cb",' in record:
                kind = record.rsplit(b'"', 2)[-2].decode()
                found[kind] += 1
        return found

    # -- rules -----------------------------------------------------------------------------

    def _keyed_pending(self) -> list[str]:
        return [i for i in self.keys if self.members.get(i) == "pending"]

    def _keyed(self, job_id: str, link: str, key: str | None) -> object:
        flags = "l" if link else ""
        record = encode_record(t.record.name, ["m", job_id], {}, key, 0, flags)
        return self.store.schedule(Q, job_id, record, delay=0, key=key, link=link)

    @precondition(lambda self: not self.sealed and len(self.members) < 6)
    @rule(keyed=st.booleans())
    def add_member(self, keyed: bool) -> None:
        job_id = new_job_id()
        key = f"k{next(self.counter)}" if keyed else None
        self._keyed(job_id, self.link, key)
        self.members[job_id] = "pending"
        if key is not None:
            self.keys[job_id] = key

    @precondition(lambda self: not self.sealed and self._keyed_pending())
    @rule(data=st.data())
    def replace_in_block(self, data: st.DataObject) -> None:
        """The block schedules a pending member's key again: the same member, pending."""
        job_id = data.draw(st.sampled_from(self._keyed_pending()))
        got = self._keyed(new_job_id(), self.link, self.keys[job_id])
        assert (got.outcome, got.id) == ("replaced", job_id)

    @precondition(lambda self: self._keyed_pending())
    @rule(data=st.data())
    def replace_from_outside(self, data: st.DataObject) -> None:
        """Code outside the batch schedules a pending member's key: the job lives on, no
        member any more; the batch counts the member cancelled."""
        job_id = data.draw(st.sampled_from(self._keyed_pending()))
        got = self._keyed(new_job_id(), "", self.keys.pop(job_id))
        assert (got.outcome, got.id) == ("replaced", job_id)
        self._ended(job_id, "cancelled")
        self.outside.add(job_id)
        self._forward([job_id], False)

    @precondition(lambda self: not self.sealed and len(self.members) >= 2)  # empty: test_batches
    @rule(crash=st.booleans())
    def seal(self, crash: bool) -> None:
        self.sealed = True
        decided = self.store.call(
            self.store.batches.seal_op(self.batch_id, list((i, Q) for i in self.members))
        )
        if not crash:
            forwarding.place_decided(self.store, self.batch_id, decided)
        self._decide()

    @precondition(lambda self: "pending" in self.members.values())
    @rule()
    def claim(self) -> None:
        token = f"w#{next(self.counter)}"
        got = self.store.claim(Q, 10, lease=60, token=token, instance="w")
        for job in got.jobs:
            if job.id in self.members and job.id not in self.outside:
                self.members[job.id] = "running"
                self.tokens[job.id] = token
            else:  # a callback: put back, nothing runs callbacks here
                self.store.release(Q, [(job.id, token)], instance="w")

    @precondition(lambda self: "running" in self.members.values())
    @rule(data=st.data(), twice=st.booleans(), late=st.booleans())
    def ack(self, data: st.DataObject, twice: bool, late: bool) -> None:
        job_id = data.draw(st.sampled_from([i for i, s in self.members.items() if s == "running"]))
        entry = (job_id, self.tokens[job_id], "l")
        assert self.store.ack(Q, [entry]) == [1]
        if twice:
            assert self.store.ack(Q, [entry]) == [0]  # a re-sent ack: gone, nothing twice
        self._ended(job_id, "succeeded")
        if not late:
            self._forward([job_id], twice)

    @precondition(lambda self: "running" in self.members.values())
    @rule(data=st.data(), late=st.booleans())
    def fail(self, data: st.DataObject, late: bool) -> None:
        job_id = data.draw(st.sampled_from([i for i, s in self.members.items() if s == "running"]))
        error = {"type": "ValueError", "message": "boom"}
        got = self.store.fail(
            Q, job_id, self.tokens[job_id], error, delay=0, default_max_retries=0,
            dead_max_age=3600, dead_max_count=100, max_errors=3,
        )  # fmt: skip
        assert got[0] == "dead"
        self._ended(job_id, "dead")
        if not late:
            self._forward([job_id], False)

    @precondition(lambda self: "pending" in self.members.values())
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from([i for i, s in self.members.items() if s == "pending"]))
        assert self.store.cancel(Q, job_id=job_id) is not None
        self._ended(job_id, "cancelled")
        self._forward([job_id], False)

    @precondition(lambda self: "dead" in self.members.values())
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from([i for i, s in self.members.items() if s == "dead"]))
        assert self.store.requeue(Q, [job_id]) == [1]
        self.members[job_id] = "pending"

    @rule()
    def sweep(self) -> None:
        """Every entry left (a crash) is forwarded, open batches looked at."""
        left = self.store.client.hkeys(self.store.key(Q, "forward"))
        self._forward([k.decode() for k in left], False)
        forwarding.sweep(self.store, [Q], now=10**10)  # far ahead: every open batch is due
        if self.sealed or self.cancelled:
            self._decide()

    @precondition(lambda self: not self.cancelled)
    @rule()
    def cancel_batch(self) -> None:
        self._forward(
            [k.decode() for k in self.store.client.hkeys(self.store.key(Q, "forward"))], False
        )
        found, pending = self.store.call(self.store.batches.cancel_op(self.batch_id))
        assert found
        self.cancelled = True
        for job_id, queue in pending:
            if job_id in self.outside:
                continue  # no member any more (cancel_batch() would cancel it: not modelled)
            if self.store.cancel(queue, job_id=job_id) is not None:
                self._ended(job_id, "cancelled")
                self.forwarded[job_id] = "cancelled"
        forwarding.forward(self.store, self.store.batches.read_forward(Q, list(self.members)))

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def every_end_written_is_an_end_of_the_model(self) -> None:
        """No script writes an end the member did not have (a replace in the block ends
        nothing: the member stays pending)."""
        for entry in self.store.batches.scan_forward(Q, 0, 1000)[1]:
            assert entry.outcome in self.ends.get(entry.id, []), (entry, self.members)

    @invariant()
    def each_callback_at_most_once_and_only_when_its_rule_held(self) -> None:
        found = self._stored_callbacks()
        for kind in KINDS:
            assert found[kind] <= 1, (kind, found)
            if found[kind]:
                assert self.fired[kind], (kind, self.forwarded, self.sealed)

    @invariant()
    def decided_callbacks_are_stored_once_nothing_is_left(self) -> None:
        if self.store.client.hlen(self.store.key(Q, "forward")):
            return  # entries left for the sweep
        fields = self.store.client.hgetall(self.store.batch_keys(self.batch_id)[0])
        found = self._stored_callbacks()
        for kind in KINDS:
            placed = f"placed:{kind}".encode() in fields
            assert placed == bool(found[kind]), (kind, fields, found)


# Most examples on the real server: the same example costs its Lua about 2.3x the CPU on
# fakeredis (Python runs every command a script calls; 30 store-machine examples: 2.2 s
# against 0.9 s with the server's own), and the real server is what users run; fakeredis
# keeps enough to show the scripts still run on it.
def test_the_batch_machine_on_fakeredis():
    run_machine(BatchMachine, 15)


def test_the_batch_machine_on_redis():
    class Machine(BatchMachine):
        client_factory = staticmethod(real_redis)

    run_machine(Machine, 150)
