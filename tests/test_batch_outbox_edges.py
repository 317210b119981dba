"""Members of a batch that wait in the database (issue 34): cancelled or replaced there they
end for their batch as in Redis; a savepoint rolled back takes its members out of the seal.
On SQLite and PostgreSQL, over fakeredis and the real Redis, with the worker in process."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_delayq import batch, cancel, get_batch
from tests.conftest import more_settings
from tests.test_batches import T, _runs, burst, runs  # noqa: F401 - _runs: autouse
from tests.test_outbox import alias  # noqa: F401
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])


class Rollback(Exception):
    pass


@pytest.mark.parametrize("how", ["id", "key", "replace far", "replace near"])
def test_a_member_waiting_beyond_the_horizon_ends_when_cancelled_or_replaced(
    store,
    alias,  # noqa: F811
    how,
):
    with more_settings(store, HORIZON=60):
        with batch(on_complete=t.record.call(T("b-complete"), "c")) as b:
            far = t.record.schedule(T("b-member"), "far", delay=600, key="cust:42")
            t.record.schedule(T("b-member"), "now")
        assert far.waits_in == "database"
        burst()
        assert get_batch(b.id).callbacks == {"complete": None}
        if how == "id":
            assert cancel(far.id)
        elif how == "key":
            assert cancel(key="cust:42")
        else:  # from outside the batch: the row stays, its job is no member any more
            delay = 600 if how == "replace far" else 0
            replaced = t.record.schedule(T("b-other"), "x", delay=delay, key="cust:42")
            assert (replaced.id, replaced.outcome) == (far.id, "replaced")
        burst()  # the row's end: the member counts as cancelled, on_complete is decided
        burst()
    assert runs(T("b-complete")) == ["c"]
    assert runs(T("b-member")) == ["now"]
    state = get_batch(b.id)
    assert (state.total, state.succeeded, state.cancelled, state.done) == (2, 1, 1, True)


def test_a_row_replaced_in_its_own_block_stays_one_member(store, alias):  # noqa: F811
    with more_settings(store, HORIZON=60):
        with batch(on_complete=t.record.call(T("b-complete"), "c")) as b:
            t.record.schedule(T("b-member"), "a", delay=600, key="cust:42")
            far = t.record.schedule(T("b-member"), "b", delay=600, key="cust:42")
            t.record.schedule(T("b-member"), "now")
        assert far.outcome == "replaced" and len(b.members) == 2
        burst()
        burst()
        state = get_batch(b.id)
        assert (state.total, state.pending, state.cancelled) == (2, 1, 0)
        assert runs(T("b-complete")) == []


def test_an_on_commit_member_cancelled_in_its_transaction_ends(store, alias):  # noqa: F811
    with transaction.atomic(using=alias):
        with batch(on_complete=t.record.call(T("b-complete"), "c")) as b:
            t.record.schedule(T("b-member"), "0", on_commit=alias)
            gone = t.record.schedule(T("b-member"), "1", on_commit=alias)
        assert cancel(gone.id)
        with pytest.raises(Rollback), transaction.atomic(using=alias):
            assert cancel(gone.id) is False  # gone already: nothing ends twice
            raise Rollback
    for _ in range(3):  # the seal and the member; the cancelled row's end; the callback
        burst()
    assert runs(T("b-member")) == ["0"] and runs(T("b-complete")) == ["c"]
    state = get_batch(b.id)
    assert (state.total, state.succeeded, state.cancelled, state.done) == (2, 1, 1, True)


def test_a_cancel_rolled_back_ends_nothing(store, alias):  # noqa: F811
    with more_settings(store, HORIZON=60):
        with batch(on_complete=t.record.call(T("b-complete"), "c")) as b:
            far = t.record.schedule(T("b-member"), "far", delay=600)
        with pytest.raises(Rollback), transaction.atomic(using=alias):
            assert cancel(far.id)
            raise Rollback
        burst()
        burst()
        state = get_batch(b.id)
    assert (state.total, state.pending, state.cancelled) == (1, 1, 0)
    assert runs(T("b-complete")) == []


def test_a_savepoint_rolled_back_takes_its_members_out_of_the_seal(store, alias):  # noqa: F811
    with more_settings(store, HORIZON=60):
        with (
            transaction.atomic(using=alias),
            batch(on_complete=t.record.call(T("b-complete"), "c")) as b,
        ):
            t.record.schedule(T("b-member"), "0", on_commit=alias)
            with pytest.raises(Rollback), transaction.atomic(using=alias):
                t.record.schedule(T("b-member"), "1", on_commit=alias)
                t.record.schedule(T("b-member"), "far", delay=600)  # a row beyond the horizon
                raise Rollback
            with transaction.atomic(using=alias):  # a savepoint released: its member stands
                t.record.schedule(T("b-member"), "2", on_commit=alias)
            t.record.schedule(T("b-member"), "redis")  # in Redis at once: no rollback takes it
        assert len(b.members) == 5
        for _ in range(3):  # the seal and the members; the callback
            burst()
    assert sorted(runs(T("b-member"))) == ["0", "2", "redis"]
    assert runs(T("b-complete")) == ["c"]
    state = get_batch(b.id)
    assert (state.total, state.succeeded, state.done) == (3, 3, True)


def test_a_replace_rolled_back_leaves_the_row_no_member(store, alias):  # noqa: F811
    with more_settings(store, HORIZON=60):
        held = t.record.schedule(T("b-member"), "held", delay=600, key="cust:42")
        with (
            transaction.atomic(using=alias),
            batch(on_complete=t.record.call(T("b-complete"), "c")) as b,
        ):
            with pytest.raises(Rollback), transaction.atomic(using=alias):
                replaced = t.record.schedule(T("b-member"), "x", delay=600, key="cust:42")
                assert replaced.id == held.id
                raise Rollback
            t.record.schedule(T("b-member"), "0", on_commit=alias)
        for _ in range(3):
            burst()
    assert runs(T("b-complete")) == ["c"]
    state = get_batch(b.id)
    assert (state.total, state.succeeded, state.done) == (1, 1, True)
