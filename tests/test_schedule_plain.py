"""schedule_plain.lua (storage/plain.py) against schedule.lua: the same plain jobs leave
every key of their queue the same (the wake list too), and a call sent again answers as
schedule.lua's does. On fakeredis and the real server (the ``store`` fixture)."""

from __future__ import annotations

import pytest

from django_delayq.exceptions import DelayQError
from django_delayq.jobs.record import encode_record
from tests.test_engine_prototypes import dump

T0 = 1_700_000_000_000  # epoch ms
IDS = [f"{i:026d}" for i in range(12)]

# (record, when, now offset ms) of plain jobs: due now, later, earlier, at= in the past and
# ahead, with keyword arguments, flag 'i' (due soon), flag 'u' (undecided max_retries).
JOBS = [
    (encode_record("tests.tasks.noop", [0], {}, max_retries=3, flags="i"), {"delay": 0.0}, 0),
    (encode_record("tests.tasks.noop", [1], {}, max_retries=3), {"delay": 3600.0}, 1),
    (encode_record("tests.tasks.noop", [2], {"a": 1}, max_retries=0, flags="iu"), {"delay": 5}, 2),
    (encode_record("tests.tasks.noop", [3], {}, max_retries=3), {"delay": -5.0}, 3),
    (encode_record("tests.tasks.noop", [4], {}, max_retries=3), {"at": T0 / 1000 - 60}, 4),
    (encode_record("tests.tasks.noop", [5], {}, max_retries=3), {"at": T0 / 1000 + 7200}, 5),
    (encode_record("tests.tasks.noop", [6], {}, max_retries=9), {"delay": 0.5}, 6),
]
for n in range(7, 12):  # more than 8 wakes: the wake list is trimmed alike
    JOBS.append((encode_record("tests.tasks.noop", [n], {}, max_retries=1), {"delay": -n}, n))


def schedule_both(store, i: int, **extra):
    record, when, offset = JOBS[i]
    now = (T0 + offset) / 1000
    today = store.schedule("today", IDS[i], record, now=now, **when, **extra)
    plain = store.schedule("lean", IDS[i], record, plain=True, now=now, **when, **extra)
    return today, plain


def test_plain_jobs_leave_every_key_as_schedule_lua_leaves_it(store):
    for i in range(len(JOBS)):
        today, plain = schedule_both(store, i)
        assert plain == today
        assert plain.outcome == "created"
    assert dump(store, "lean") == dump(store, "today")
    assert store.client.smembers(store.queues_key) == {b"today", b"lean"}
    # Sent again (the same id and record), plainly and as a re-send: the same answers,
    # nothing stored twice.
    for i in range(len(JOBS)):
        assert schedule_both(store, i)[1] == schedule_both(store, i)[0]
    assert dump(store, "lean") == dump(store, "today")


def test_a_resend_after_the_job_finished_answers_done_as_schedule_lua(store):
    """A job due soon (flag 'i') that ran and finished before its re-sent schedule
    arrived is not stored again: its tombstone answers 'done'."""
    record, when, _ = JOBS[0]
    resent = {}
    for queue, plain in (("today", False), ("lean", True)):
        store.schedule(queue, IDS[0], record, plain=plain, now=T0 / 1000, **when)
        (_claimed,) = store.claim(queue, 1, lease=30, token="w#1", instance="w", now=T0 / 1000).jobs
        assert store.ack(queue, [(IDS[0], "w#1", "i")], now=T0 / 1000) == [1]
        op = store.job_op(queue, IDS[0], record, plain, True, now=T0 / 1000, **when)
        resent[queue] = store.transport.run([op], 1.0, resent=True)[0]
    assert resent["lean"] == resent["today"]
    assert resent["lean"].outcome == "done"
    assert dump(store, "lean") == dump(store, "today")


def test_errors_are_schedule_lua_s(store):
    record, when, _ = JOBS[0]
    other = encode_record("tests.tasks.noop", [99], {}, max_retries=3)
    errors = {}
    for queue, plain in (("today", False), ("lean", True)):
        store.schedule(queue, IDS[0], record, plain=plain, now=T0 / 1000, **when)
        with pytest.raises(DelayQError, match="DUPLICATE_ID") as duplicate:
            store.schedule(queue, IDS[0], other, plain=plain, now=T0 / 1000, delay=0)
        with pytest.raises(DelayQError, match="BAD_DUE") as bad_due:
            store.schedule(queue, IDS[1], other, plain=plain, at=float("inf"))
        errors[queue] = (type(duplicate.value), str(duplicate.value), str(bad_due.value))
    assert errors["lean"] == errors["today"]
    assert dump(store, "lean") == dump(store, "today")


def test_a_job_with_features_is_refused_on_the_plain_path(store):
    record = encode_record("tests.tasks.noop", [0], {}, max_retries=3)
    for options in ({"key": "k"}, {"group": "g"}, {"link": "{}"}, {"trace": "{}"}):
        with pytest.raises(ValueError, match="not plain"):
            store.job_op("lean", IDS[0], record, True, True, **options)


def test_scheduled_made_without_init_is_the_dataclass():
    """replies.scheduled() skips the frozen dataclass's __init__: the same value, equal,
    hashed and shown alike, frozen all the same."""
    import dataclasses

    from django_delayq.storage.replies import Scheduled, scheduled

    for args in (("created", "x" * 26, 1.5, None, None), ("kept", "y", None, b"r", "z")):
        made, real = scheduled(*args), Scheduled(*args)
        assert made == real and hash(made) == hash(real) and repr(made) == repr(real)
        assert dataclasses.astuple(made) == args
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.outcome = "done"  # type: ignore[misc]


def test_the_plain_reply_is_read_in_both_shapes():
    """schedule_plain.lua answers the due time (0: done); its older reply {outcome, id,
    due_at} (an older ref's Lua under engine_cost.py --baseline) reads the same."""
    from django_delayq.storage.replies import parse_schedule_plain

    job_id = IDS[0]
    for new, old in ((T0, [b"created", job_id.encode(), T0]), (0, [b"done", job_id.encode(), b""])):
        assert parse_schedule_plain(job_id, new) == parse_schedule_plain(job_id, old)
    assert parse_schedule_plain(job_id, T0).due_at == T0 / 1000
    assert parse_schedule_plain(job_id, 0).outcome == "done"
