"""The asyncio transport's retry policy (storage/async_transport.py), as tests/test_transport.py
checks the sync one: a real Redis behind the fault proxy of tests/reliability/faults.py, the
asyncio client derived from the proxied sync client as the async API derives it."""

from __future__ import annotations

import asyncio
import re

import pytest
import redis
import redis.asyncio
from asgiref.sync import async_to_sync
from django.conf import settings

from django_delayq import (
    ConfigurationError,
    DelayQError,
    OutcomeUnknown,
    acancel,
    aget_job,
    aschedule,
    get_job,
)
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.storage.async_store import async_client, get_async_store
from django_delayq.storage.store import Store
from tests.conftest import _installed, real_redis, real_redis_proxy
from tests.reliability.faults import (
    BUSY,
    NOSCRIPT,
    WRONGTYPE,
    cut,
    delay,
    drop_reply,
    error,
    schedules,
    script,
)
from tests.testapp import tasks as t


def run(coroutine_function, *args, **kwargs):
    return async_to_sync(coroutine_function)(*args, **kwargs)


def test_a_lost_schedule_reply_is_sent_again_and_stores_the_job_once(proxied):
    proxy, store = proxied
    lost = proxy.add_rule(schedules, drop_reply())
    job = run(aschedule, t.remember, 1, delay=60)
    assert lost.applied == 1 and lost.matched == 2  # Redis ran it, then got it again
    assert job.outcome == "created"
    assert store.size("default", "pending") == 1
    assert get_job(job.id).args == [1]


def test_a_lost_cancel_reply_is_not_sent_again_and_says_so(proxied):
    proxy, _ = proxied
    job = run(aschedule, t.remember, 1, delay=60)
    lost = proxy.add_rule(script("cancel"), drop_reply())
    with pytest.raises(OutcomeUnknown, match="cancel"):
        run(acancel, job.id)
    assert lost.matched == 1  # sent once
    assert get_job(job.id) is None  # Redis had run it


def test_a_re_sent_schedule_that_cannot_reach_redis_again_is_an_unknown_outcome(proxied):
    proxy, store = proxied
    proxy.add_rule(schedules, drop_reply())
    proxy.add_rule(schedules, cut(), nth=2, times=None)
    with pytest.raises(OutcomeUnknown, match=r"may have been stored: aget_job") as info:
        run(aschedule, t.remember, 1, delay=60)
    assert isinstance(info.value, DelayQConnectionError)
    (job_id,) = re.findall(r"aget_job\('(\w+)'\)", str(info.value))
    direct = Store(real_redis(), store.prefix)
    assert direct.fetch("default", job_id) is not None  # it was stored, once
    assert direct.size("default", "pending") == 1


def test_a_schedule_that_could_not_be_sent_is_a_plain_connection_error(proxied):
    proxy, store = proxied
    proxy.close()
    with pytest.raises(DelayQConnectionError) as info:
        run(aschedule, t.remember, 1, delay=60)
    assert not isinstance(info.value, OutcomeUnknown)
    assert Store(real_redis(), store.prefix).size("default", "pending") == 0


@pytest.mark.parametrize("reply", [BUSY, NOSCRIPT])
def test_answers_meaning_not_run_are_sent_again(proxied, reply):
    proxy, _ = proxied
    fault = proxy.add_rule(schedules, error(reply), times=2)
    job = run(aschedule, t.remember, 1, delay=60)
    assert fault.applied == 2 and fault.matched == 3
    assert get_job(job.id) is not None


def test_other_error_answers_are_final_and_not_sent_again(proxied):
    proxy, _ = proxied
    fault = proxy.add_rule(schedules, error(WRONGTYPE), times=None)
    with pytest.raises(DelayQError, match="WRONGTYPE"):
        run(aschedule, t.remember, 1, delay=60)
    assert fault.matched == 1


@pytest.mark.parametrize("flushable_client", ["own"], indirect=True)
def test_scripts_flushed_from_redis_are_loaded_again(flushable_store):
    async def twice():
        first = await aschedule(t.remember, 1, delay=60)
        await get_async_store().transport.client.script_flush()
        return first, await aschedule(t.remember, 2, delay=60)

    first, second = run(twice)
    assert get_job(first.id).args == [1] and get_job(second.id).args == [2]


def test_a_call_cancelled_while_it_waits_leaves_no_reply_for_the_next(proxied):
    """The caller's task cancelled with a reply unread: that connection is closed (by
    redis-py's read_response, and by the transport, which closes a connection it did not
    read to the end), so the next call on the pool never reads the old reply as its own."""
    proxy, _ = proxied
    proxy.add_rule(schedules, delay(0.5))

    async def cancelled_then_again():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(aschedule(t.remember, 1, delay=60), 0.1)
        job = await aschedule(t.remember, 2, delay=60)
        return job, await aget_job(job.id)

    job, found = run(cancelled_then_again)
    assert found.id == job.id and found.args == [2]


def test_the_asyncio_client_has_the_sync_clients_settings():
    sync = redis.Redis(
        host="127.0.0.1", port=6380, db=3, password="pw", socket_timeout=2.5, max_connections=7
    )
    derived = async_client(sync)
    pool = derived.connection_pool
    assert pool.connection_class is redis.asyncio.Connection
    assert isinstance(pool, redis.asyncio.BlockingConnectionPool)
    assert pool.max_connections == 7
    kwargs = pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"], kwargs["password"]) == (
        "127.0.0.1",
        6380,
        3,
        "pw",
    )
    assert kwargs["socket_timeout"] == 2.5
    unix = async_client(redis.Redis(unix_socket_path="/tmp/delayq-test.sock"))
    assert unix.connection_pool.connection_class is redis.asyncio.UnixDomainSocketConnection
    assert unix.connection_pool.connection_kwargs["path"] == "/tmp/delayq-test.sock"


def test_sentinel_and_cluster_are_refused_with_what_to_do():
    class SentinelLikePool(redis.ConnectionPool):
        pass

    with pytest.raises(ConfigurationError, match="sync_to_async"):
        async_client(redis.Redis(connection_pool=SentinelLikePool()))


def test_a_burst_beyond_the_pool_size_waits_for_connections():
    """More concurrent calls than the pool's max_connections: each waits for a free
    connection instead of failing."""
    installed = _installed(redis.Redis.from_url(settings.REDIS_URL, max_connections=3))
    store = next(installed)
    try:

        async def burst():
            return await asyncio.gather(*(aschedule(t.remember, i, delay=60) for i in range(40)))

        jobs = run(burst)
        assert len({job.id for job in jobs}) == 40
        assert store.size("default", "pending") == 40
    finally:
        installed.close()


def test_a_derived_client_talks_to_redis_whatever_parser_the_sync_one_names():
    """django-redis gives its pool a parser_class (a sync parser): not carried over."""
    from redis._parsers import _RESP2Parser

    pool = redis.ConnectionPool.from_url(settings.REDIS_URL, parser_class=_RESP2Parser)
    sync = redis.Redis(connection_pool=pool)

    async def ping():
        client = async_client(sync)
        try:
            return await client.ping()
        finally:
            await client.aclose()

    assert asyncio.run(ping()) is True


def test_calls_queued_behind_a_full_pool_keep_their_whole_budget():
    """One connection, each schedule answered 30 ms late, 100 calls at once: the last
    waits about 3 s for its turn, beyond the 2 s budget, then its reply is lost; it is
    still sent again and stores its job once (the budget counts from its turn)."""
    with real_redis_proxy() as proxy:
        installed = _installed(redis.Redis.from_url(proxy.url, max_connections=1))
        store = next(installed)
        try:
            lost = proxy.add_rule(schedules, drop_reply(), nth=100)
            slow = proxy.add_rule(schedules, delay(0.03), times=None)

            async def burst():
                calls = (aschedule(t.remember, i, delay=60) for i in range(100))
                return await asyncio.gather(*calls)

            jobs = run(burst)
            # 99 and the lost one's re-send; on a loaded machine another reply may also
            # come past its budget and be sent again: what is promised is each job once
            assert lost.applied == 1 and slow.applied >= 100
            assert len({job.id for job in jobs}) == 100
            assert Store(real_redis(), store.prefix).size("default", "pending") == 100
        finally:
            store.client = real_redis()
            installed.close()
