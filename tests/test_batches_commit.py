"""A batch inside a transaction (on_commit members): it commits, or rolls back, with its rows,
on SQLite and PostgreSQL, over fakeredis and the real Redis."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_delayq import batch, get_batch
from tests.test_batches import burst, runs
from tests.test_outbox import alias  # noqa: F401
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


@pytest.fixture(autouse=True)
def _runs(store):
    client = t.runs_client()
    for key in client.scan_iter(match="runs:b-*"):
        client.delete(key)
    yield


def test_a_committed_batch_runs_its_members_then_its_callback(store, alias):  # noqa: F811
    with transaction.atomic(using=alias), batch(on_complete=t.record.call("b-complete", "c")) as b:
        for i in range(3):
            t.record.schedule("b-member", str(i), on_commit=alias)
    burst()  # the seal job, the members
    burst()
    burst()
    assert sorted(runs("b-member")) == ["0", "1", "2"]
    assert runs("b-complete") == ["c"]
    state = get_batch(b.id)
    assert (state.total, state.succeeded, state.done) == (3, 3, True)


def test_a_rolled_back_batch_runs_nothing(store, alias):  # noqa: F811
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic(using=alias):
        with batch(on_complete=t.record.call("b-complete", "never")) as b:
            for i in range(3):
                t.record.schedule("b-member", str(i), on_commit=alias)
        raise Rollback
    burst()
    burst()
    assert runs("b-member") == [] and runs("b-complete") == []
    state = get_batch(b.id)
    assert state.total is None and not state.done  # never sealed: nothing can fire
