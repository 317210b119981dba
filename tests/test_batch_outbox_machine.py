"""A hypothesis state machine over one batch whose members wait in the database, through the
public API and the worker in process (SQLite, fakeredis and the real Redis), with HORIZON:
inside a transaction and the batch's block, members scheduled with on_commit, members due
beyond the horizon (keyed), a replace by key inside the block, a schedule in a savepoint
rolled back, a member cancelled in the transaction; then the commit; then members still in
the database cancelled by id or key, or replaced by their key from outside the batch, and
worker passes. Checked after every step against a model of the rules (batches/api.py):

- the seal counts exactly the members whose rows stand (none a savepoint rolled back);
- on_complete runs only once every member ended, and at most once;
- once every member ended and the worker drained, on_complete ran once, and the batch's
  counts are the model's.
"""

from __future__ import annotations

import contextlib
import itertools

import fakeredis
import pytest
from django.db import transaction
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from django_delayq import batch, cancel, get_batch
from django_delayq.jobs.ids import new_job_id
from django_delayq.models import OutboxJob
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings, run_machine
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def runs(tag: str) -> list[str]:
    return [v.decode() for v in t.runs_client().lrange(f"runs:{tag}", 0, -1)]


def burst() -> None:
    assert Worker(["default"], burst=True).run() == 0


class OutboxBatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tag = f"obm-{new_job_id().lower()}"
        self.counter = itertools.count()
        # member id -> 'far' (a row beyond the horizon), 'commit' (an on_commit row: runs),
        # 'cancelled'; and the unique key of each far member
        self.members: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        self.block = batch(on_complete=t.record.call(f"{self.tag}:cb", "complete"))
        self.opened = self.block.__enter__()
        self.committed = False

    def teardown(self) -> None:
        if not self.committed:
            self.block.__exit__(None, None, None)
            self.atomic.__exit__(Rollback, Rollback(), None)
        for job_id, state in self.members.items():
            if state == "far":
                cancel(job_id)
        OutboxJob.objects.all().delete()
        client = t.runs_client()
        client.delete(f"runs:{self.tag}", f"runs:{self.tag}:cb", f"runs:{self.tag}:other")

    def _far(self) -> list[str]:
        return [i for i, s in self.members.items() if s == "far"]

    def _schedule(self, on_commit: bool) -> str:
        n = next(self.counter)
        if on_commit:
            return t.record.schedule(self.tag, f"c{n}", on_commit=True).id
        key = f"{self.tag}:k{n}"
        job = t.record.schedule(self.tag, f"f{n}", delay=600, key=key)
        assert job.waits_in == "database"
        self.keys[job.id] = key
        return job.id

    # -- in the block, in the transaction ----------------------------------------------

    @precondition(lambda self: not self.committed and len(self.members) < 6)
    @rule(on_commit=st.booleans())
    def add_member(self, on_commit: bool) -> None:
        job_id = self._schedule(on_commit)
        self.members[job_id] = "commit" if on_commit else "far"

    @precondition(lambda self: not self.committed)
    @rule(on_commit=st.booleans())
    def rolled_back_savepoint(self, on_commit: bool) -> None:
        with contextlib.suppress(Rollback), transaction.atomic():
            self._schedule(on_commit)  # no member: its row goes with the savepoint
            raise Rollback

    @precondition(lambda self: not self.committed and self._far())
    @rule(data=st.data())
    def replace_in_block(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self._far()))
        job = t.record.schedule(self.tag, "again", delay=600, key=self.keys[job_id])
        assert (job.id, job.outcome) == (job_id, "replaced")  # the same member, still waiting

    @precondition(lambda self: not self.committed and self.members)
    @rule(data=st.data())
    def cancel_in_transaction(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.members)))
        assert cancel(job_id) == (self.members[job_id] != "cancelled")
        self.members[job_id] = "cancelled"

    @precondition(lambda self: not self.committed)
    @rule()
    def commit(self) -> None:
        self.block.__exit__(None, None, None)
        self.committed = True
        self.atomic.__exit__(None, None, None)

    # -- after the commit -------------------------------------------------------------

    @precondition(lambda self: self.committed and self._far())
    @rule(data=st.data(), how=st.sampled_from(["id", "key", "replace far", "replace near"]))
    def end_far_member(self, data: st.DataObject, how: str) -> None:
        job_id = data.draw(st.sampled_from(self._far()))
        key = self.keys[job_id]
        if how == "id":
            assert cancel(job_id)
        elif how == "key":
            assert cancel(key=key)
        else:
            delay = 600 if how == "replace far" else 0
            job = t.record.schedule(f"{self.tag}:other", "x", delay=delay, key=key)
            assert job.id == job_id
            if delay:  # out of the batch now, but still waiting: cancel it at the end
                self.keys.pop(job_id)
        self.members[job_id] = "cancelled"

    @precondition(lambda self: self.committed)
    @rule()
    def work(self) -> None:
        burst()

    @precondition(lambda self: self.committed and not self._far())
    @rule()
    def drain(self) -> None:
        for _ in range(4):  # the seal and members; the rows' ends; the callback
            burst()
        assert runs(f"{self.tag}:cb") == ["complete"]
        state = get_batch(self.opened.id)
        cancelled = sum(1 for s in self.members.values() if s == "cancelled")
        assert (state.total, state.cancelled, state.done) == (len(self.members), cancelled, True)
        assert state.succeeded == len(self.members) - cancelled

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def sealed_with_the_members_that_stand(self) -> None:
        if self.committed:
            state = get_batch(self.opened.id)
            if state is not None and state.total is not None:
                assert state.total == len(self.members), (state, self.members)

    @invariant()
    def on_complete_only_after_every_member_ended_and_once(self) -> None:
        ran = runs(f"{self.tag}:cb")
        assert len(ran) <= 1
        if ran:
            assert not self._far(), self.members
            assert len(runs(self.tag)) >= list(self.members.values()).count("commit")


@pytest.mark.slow  # a state machine of 20 s a client: started first
def test_the_outbox_batch_machine(store):
    with more_settings(store, HORIZON=60):
        # Most examples on the real server (what users run; fakeredis costs each script
        # call's Lua more CPU): fakeredis keeps enough to show the scripts run on it.
        examples = 8 if isinstance(store.client, fakeredis.FakeRedis) else 25
        run_machine(OutboxBatchMachine, examples, steps=25)
