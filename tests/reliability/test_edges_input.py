"""Issue 10, items 8, 9 and 11: input that passes schedule()'s checks and then breaks
something, against a redis-server started by each test.

8. Absurd delays are refused with a ValueError naming the value before anything is stored;
   far-future datetimes that are valid keep working.
9. Cancelling by unique key a job whose arguments are nested as deep as schedule() accepts,
   or 20 MB big, frees the key and leaves nothing of the job in Redis.
11. Settings, task options and queue names that slip through validation; garbage members
   of the queues set.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_delayq import cancel, get_job, schedule, schedule_many, task
from django_delayq.scheduling.registry import unregister
from django_delayq.storage.store import Store
from tests.reliability.edges import (
    leftovers,
    nested,
    queue_key,
    recursion_limit,
    redis_usec,
    slowest_command,
)
from tests.reliability.harness import installed
from tests.testapp import tasks as t

pytestmark = pytest.mark.reliability


@pytest.fixture
def data(servers):
    return servers.redis("data")


@pytest.fixture
def store(data, prefix):
    """A Store on the test's own redis-server, used by the API."""
    store = Store(data.client(), prefix)
    with installed(store):
        yield store


def stored(store: Store) -> list[str]:
    """Every key under the prefix but the queues set: where a job could have been written."""
    keys = store.client.scan_iter(match=f"{store.prefix}:*", count=1000)
    return sorted(k.decode() for k in keys if k.decode() != f"{store.prefix}:queues")


def names(error: BaseException, value: object) -> bool:
    text = str(error)
    return repr(value) in text or str(value) in text


# -- 8. huge delays ------------------------------------------------------------------------

ABSURD_DELAYS = [
    pytest.param(1e20, id="1e20"),
    pytest.param(1e300, id="1e300"),
    pytest.param(timedelta.max, id="timedelta.max"),
]


@pytest.mark.parametrize("how", ["schedule", "schedule_many"])
@pytest.mark.parametrize("delay", ABSURD_DELAYS)
def test_absurd_delay_is_refused_before_anything_is_stored(store, delay, how):
    """delay=1e20 used to be stored, then schedule() raised OverflowError: the caller never
    got the id of a job that exists. Wanted: a ValueError naming the value, nothing stored
    (schedule_many() validates every call before it stores any)."""
    try:
        if how == "schedule":
            schedule(t.remember, 1, delay=delay)
        else:
            schedule_many(t.remember, [(1,), {"args": [2], "delay": delay}, (3,)])
    except Exception as exc:  # the type is the assertion
        raised: BaseException | None = exc
    else:
        raised = None
    left = stored(store)
    assert isinstance(raised, ValueError) and names(raised, delay) and not left, (
        f"{how}(delay={delay!r}) raised {raised!r} and left {left} in Redis; wanted a "
        "ValueError naming the delay and nothing stored"
    )


@pytest.mark.parametrize(
    "at",
    [
        datetime(3000, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
    ],
    ids=["year-3000", "9999-12-31T23:59:59", "datetime.max"],
)
def test_far_future_at_is_stored_and_readable_or_refused_before_storing(store, at):
    """A valid aware datetime, however far, either schedules a job that reads back with
    that due time, or (at the very edge of datetime's range, where a float score cannot
    hold it) is refused with a ValueError before anything is stored, never both."""
    try:
        job = schedule(t.remember, 1, at=at)
    except Exception as exc:  # the type is the assertion
        left = stored(store)
        assert isinstance(exc, ValueError) and not left, (
            f"schedule(at={at!r}) raised {exc!r} and left {left} in Redis"
        )
        return
    back = get_job(job.id)
    assert back is not None and back.status == "pending"
    for due_at in (job.due_at, back.due_at):
        assert abs((due_at - at).total_seconds()) < 1, (due_at, at)


# -- 9. deep and big records ---------------------------------------------------------------


def deepest_accepted(limit: int = 20_000) -> int:
    """The deepest list nesting schedule() accepts here (it refuses deeper with TypeError),
    found on a scratch queue; accepted depths are a prefix of 1..limit."""
    low, high = 1, limit
    while low < high:
        middle = (low + high + 1) // 2
        try:
            schedule(t.remember, nested(middle), queue="scratch")
        except TypeError:
            high = middle - 1
        else:
            low = middle
    return low


def test_cancel_by_key_of_deepest_accepted_arguments_frees_the_key(store, report):
    """cancel.lua decoded the whole record to find the unique key; Redis's cjson gives up
    beyond 1,000 levels, so the key stayed behind pointing at the deleted job.

    Python 3.12+ accepts ~10,000 levels (its C recursion limit); 3.11 accepts ~990 under
    the default recursion limit, which an application may raise: the test raises it to
    3,000 so 3.11 reaches the same depths."""
    client, prefix = store.client, store.prefix
    with recursion_limit(3000):
        depth = deepest_accepted()
        job = schedule(t.remember, nested(depth), key="deep")
        assert get_job(job.id).key == "deep"
        cancelled = cancel(key="deep")
        kept = get_job(job.id, finished=True)
    left = leftovers(client, prefix, job.id)
    again = schedule(t.remember, 1, key="deep")
    report(scenario="18a. cancel by key of the deepest accepted args", jobs=1, depth=depth)
    assert cancelled is True
    assert left == [], f"cancel(key=...) of a job nested {depth} deep left {left}"
    assert again.outcome == "created", again
    assert kept.status == "cancelled" and kept.key == "deep" and kept.args_not_kept is None


def test_cancel_by_key_of_a_20_mb_job_frees_the_key(data, store, report):
    """The same for a 20 MB argument; the Redis time of the cancel is reported (the whole
    record used to be decoded in Lua, blocking Redis for hundreds of ms), not asserted."""
    client, prefix = store.client, store.prefix
    big = "x" * (20 * 1024 * 1024)
    job = schedule(t.remember, big, key="big")
    client.config_set("slowlog-log-slower-than", 10_000)
    client.slowlog_reset()
    before = redis_usec(client)
    cancelled = cancel(key="big")
    spent = redis_usec(client) - before
    slowest, command = slowest_command(client)
    left = leftovers(client, prefix, job.id)
    kept = get_job(job.id, finished=True)
    again = schedule(t.remember, 1, key="big")
    report(
        scenario="18b. cancel by key of a 20 MB job",
        jobs=1,
        cancel_redis_ms=round(spent / 1000, 1),
        slowest_ms=round(slowest / 1000, 1),
        slowest_command=command,
    )
    assert cancelled is True
    assert left == [], f"cancel(key=...) of a 20 MB job left {left}"
    assert again.outcome == "created", again
    # Kept as cancelled without its 20 MB (only its task and header: bounded memory).
    assert kept.status == "cancelled" and kept.task == t.remember.name and kept.args == []
    assert kept.key == "big" and kept.args_not_kept > 20 * 1024 * 1024
    assert client.memory_usage(store.key("default", "kept")) < 64 * 1024


# -- 11. validation gaps --------------------------------------------------------------------

FLOAT_SETTINGS = (
    "VISIBILITY_TIMEOUT",
    "RETRY_BACKOFF",
    "RETRY_BACKOFF_MAX",
    "DEAD_MAX_AGE",
    "MAX_SLEEP",
    "SHUTDOWN_TIMEOUT",
)
NOT_FINITE = (math.inf, -math.inf, math.nan)


def test_checks_report_infinite_and_nan_float_settings_as_e004():
    """VISIBILITY_TIMEOUT=inf passed the checks (inf > 0), then killed the maintenance
    thread; every float setting must be finite."""
    missed = []
    for name in FLOAT_SETTINGS:
        for value in NOT_FINITE:
            with override_settings(DELAYQ={"PREFIX": "checks", name: value}):
                found = [m for m in run_checks() if m.id == "delayq.E004" and name in m.msg]
            if not found:
                missed.append(f"{name}={value!r}")
    assert not missed, f"no delayq.E004 for {', '.join(missed)}"


def test_manage_py_check_fails_on_an_infinite_visibility_timeout():
    delayq = {"PREFIX": "checks", "VISIBILITY_TIMEOUT": math.inf}
    with override_settings(DELAYQ=delayq), pytest.raises(CommandError, match=r"delayq\.E004"):
        call_command("check")


@pytest.mark.parametrize("backoff", [math.nan, math.inf], ids=["nan", "inf"])
def test_task_refuses_a_retry_backoff_that_is_not_finite(backoff):
    def victim() -> None:
        pass

    name = f"tests.reliability.edges.backoff_{'nan' if math.isnan(backoff) else 'inf'}"
    try:
        with pytest.raises(ValueError, match="retry_backoff"):
            task(name=name, retry_backoff=backoff)(victim)
    finally:
        unregister(name)


def test_queue_name_with_a_trailing_newline_is_refused(store):
    """The queue-name regex ended with ``$``, which also matches before a final newline."""
    with pytest.raises(ValueError, match="queue"):
        schedule(t.remember, 1, queue="abc\n")
    assert stored(store) == []
    name = "tests.reliability.edges.newline_queue"
    try:
        with pytest.raises(ValueError, match="queue"):
            task(name=name, queue="abc\n")(lambda: None)
    finally:
        unregister(name)
    with override_settings(DELAYQ={"PREFIX": "checks", "QUEUES": ["abc\n"]}):
        assert [m for m in run_checks() if m.id == "delayq.E005"], "no delayq.E005 for 'abc\\n'"


@pytest.mark.django_db  # a cancel() that Redis misses looks in the database outbox
def test_garbage_members_of_the_queues_set_do_not_break_get_job_and_cancel(data, prefix):
    """A non-UTF-8 member and an invalid queue name in ``{prefix}:queues`` made get_job()
    and cancel() raise as soon as they looked beyond the configured queues. A fresh Store
    (as in a new process) knows only what Redis says."""
    writer = Store(data.client(), prefix)
    with installed(writer):
        home = schedule(t.remember, 1, delay=3600)
        side = schedule(t.remember, 2, delay=3600, queue="side")  # not in DELAYQ settings
        other = schedule(t.remember, 3, delay=3600, queue="side")
    writer.client.sadd(f"{prefix}:queues", b"\xff\xfe", "bad name!")
    with installed(Store(data.client(), prefix)):
        assert get_job(home.id).status == "pending"
        assert get_job("01JAAAAAAAAAAAAAAAAAAAAAAA") is None
        found = get_job(side.id)
        assert found is not None and found.queue == "side" and found.args == [2]
        assert cancel("01JAAAAAAAAAAAAAAAAAAAAAAA") is False
        assert cancel(other.id) is True
    assert writer.client.zscore(queue_key(prefix, "side", "pending"), other.id) is None
