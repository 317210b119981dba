"""The fault-injecting proxy (faults.py) itself, against a real redis-server: replies stay
paired with their requests around injected errors, dropped replies and cuts, and the
matchers find django-delayq's script calls."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_delayq.storage.store import Store
from tests.reliability import faults
from tests.reliability.faults import (
    BUSY,
    NOSCRIPT,
    WRONGTYPE,
    FaultProxy,
    command,
    cut,
    delay,
    drop_reply,
    error,
    hold_then_cut,
    observe,
)

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]


@pytest.fixture
def data(servers):
    return servers.redis("data")


@pytest.fixture
def proxy(data):
    with FaultProxy(data.port) as started:
        yield started
        assert not started.errors, started.errors


def no_retry(proxy: FaultProxy, protocol: int = 3, **kwargs) -> redis.Redis:
    """A client that reports a broken connection instead of re-sending the command."""
    return redis.Redis.from_url(
        proxy.url, protocol=protocol, retry=Retry(NoBackoff(), 0), socket_timeout=10, **kwargs
    )


@pytest.mark.parametrize("protocol", [2, 3])
def test_an_injected_error_in_a_pipeline_keeps_every_other_reply_in_place(protocol, proxy, data):
    direct = data.client()
    rule = proxy.add_rule(command(b"INCRBY"), error(WRONGTYPE))  # redis-py sends INCR as INCRBY
    client = no_retry(proxy, protocol)
    big = b"x" * 300_000  # a reply spanning many packets ahead of the injected one
    pipe = client.pipeline(transaction=False)
    pipe.set("a", big).get("a").incr("n").hset("h", mapping={"f": "1", "g": "2"})
    pipe.hgetall("h").eval("return {1, {2, {'three', false}}, 'x'}", 0).get("missing").ping()
    replies = pipe.execute(raise_on_error=False)
    assert replies[:2] == [True, big]
    assert isinstance(replies[2], redis.ResponseError) and "WRONGTYPE" in str(replies[2])
    assert replies[3] == 2 and replies[4] == {b"f": b"1", b"g": b"2"}
    assert replies[5] == [1, [2, [b"three", None]], b"x"]
    assert replies[6] is None and replies[7] is True
    assert direct.get("n") is None  # the INCRBY never reached Redis
    assert (rule.matched, rule.applied) == (1, 1) and rule.replies == [WRONGTYPE]
    assert client.incr("n") == 1  # times=1: the next one passes
    assert (rule.matched, rule.applied) == (2, 1) and rule.replies[-1] == b":1"


def test_an_injected_error_as_the_last_or_only_command_is_answered(proxy):
    proxy.add_rule(command(b"EVALSHA"), error(BUSY), times=2)
    client = no_retry(proxy)
    with pytest.raises(redis.ResponseError, match=r"^BUSY"):
        client.evalsha("0" * 40, 0)
    pipe = client.pipeline(transaction=False).ping().evalsha("0" * 40, 0)
    assert [type(r) for r in pipe.execute(raise_on_error=False)] == [bool, redis.ResponseError]
    with pytest.raises(redis.exceptions.NoScriptError):  # times=2: Redis answers now
        client.evalsha("0" * 40, 0)


def test_nth_and_times_pick_which_matches_are_hit(proxy):
    rule = proxy.add_rule(command(b"INCRBY"), error(NOSCRIPT), nth=2, times=2)
    client = no_retry(proxy)
    results = []
    for _ in range(5):
        try:
            results.append(client.incr("n"))
        except redis.exceptions.NoScriptError:
            results.append("NOSCRIPT")
    assert results == [1, "NOSCRIPT", "NOSCRIPT", 2, 3]
    assert (rule.matched, rule.applied) == (5, 2)


def test_a_dropped_reply_cuts_the_connection_after_redis_ran_the_command(proxy, data):
    rule = proxy.add_rule(command(b"SET"), drop_reply())
    client = no_retry(proxy)
    client.ping()
    with pytest.raises(redis.ConnectionError):
        client.set("k", "v")
    assert data.client().get("k") == b"v"  # executed
    assert rule.applied == 1 and rule.replies == [b"+OK"]
    assert client.get("k") == b"v"  # reconnected through the proxy
    assert proxy.connections == 2


def test_a_dropped_reply_in_a_pipeline_loses_the_replies_behind_it(proxy, data):
    proxy.add_rule(command(b"INCRBY"), drop_reply())
    client = no_retry(proxy)
    pipe = client.pipeline(transaction=False).set("a", "1").incr("n").set("b", "2")
    with pytest.raises(redis.ConnectionError):
        pipe.execute()
    assert data.client().mget("a", "n", "b") == [b"1", b"1", b"2"]  # all three ran


def test_a_cut_before_forwarding_means_redis_never_ran_it(proxy, data):
    rule = proxy.add_rule(command(b"SET"), cut())
    client = no_retry(proxy)
    with pytest.raises(redis.ConnectionError):
        client.set("k", "v")
    assert data.client().get("k") is None
    assert rule.applied == 1 and rule.replies == []


def test_a_delayed_reply_arrives_late_and_holds_the_ones_behind_it(proxy):
    rule = proxy.add_rule(command(b"GET"), delay(0.6))
    client = no_retry(proxy)
    began = time.monotonic()
    assert client.pipeline(transaction=False).get("k").ping().execute() == [None, True]
    assert time.monotonic() - began >= 0.55  # a lower bound only
    assert rule.applied == 1 and proxy.holding == 0


def test_delay_until_a_condition_and_the_holding_counter(proxy):
    release = threading.Event()
    rule = proxy.add_rule(command(b"GET"), delay(30, until=release.is_set))
    client = no_retry(proxy)
    answer: list = []
    thread = threading.Thread(target=lambda: answer.append(client.get("k")))
    thread.start()
    deadline = time.monotonic() + 10
    while proxy.holding != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.holding == 1 and not answer
    release.set()
    thread.join(10)
    assert answer == [None] and rule.met == 1 and proxy.holding == 0


def test_hold_then_cut_loses_the_reply_late(proxy, data):
    rule = proxy.add_rule(command(b"SET"), hold_then_cut(0.3))
    client = no_retry(proxy)
    began = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.set("k", "v")
    assert time.monotonic() - began >= 0.25
    assert data.client().get("k") == b"v" and rule.applied == 1 and rule.met == 0


def test_before_runs_a_hook_then_forwards(proxy, data):
    direct = data.client()
    sha = direct.script_load("return 7")
    rule = proxy.add_rule(command(b"EVALSHA"), faults.before(direct.script_flush))
    client = no_retry(proxy)
    with pytest.raises(redis.exceptions.NoScriptError):  # a real NOSCRIPT from Redis
        client.evalsha(sha, 0)
    # The error code, not the text: Valkey words it differently ("No matching script.").
    assert len(rule.replies) == 1 and rule.replies[0].startswith(b"-NOSCRIPT ")


def test_script_matchers_find_django_delayq_calls(proxy, data):
    """script(), a_claim(), claims_jobs(), carries_acks() and schedules() recognise the
    store's calls, claim.lua's and claim_plain.lua's (the proxy's one dependency on
    django_delayq's script names and ARGV layout)."""
    rules = {
        name: proxy.add_rule(match, observe(), times=None)
        for name, match in {
            "schedule": faults.schedules,
            "claim": faults.script("claim"),
            "any claim": faults.a_claim,
            "claims": faults.claims_jobs,
            "acks": faults.carries_acks,
            "evalsha": command(b"EVALSHA"),
        }.items()
    }
    store = Store(no_retry(proxy), "faults-test")
    for plain in (False, True):  # claim.lua, then claim_plain.lua: the worker sends both
        job_id = f"01J000000000000000000000{int(plain)}A"
        store.schedule("default", job_id, b"0\nt.x\n")
        options = {"lease": 30, "instance": "w", "plain": plain}
        claim = store.claim("default", 1, token=f"w#1{plain}", **options)
        store.claim("default", 0, token=f"w#2{plain}", **options)
        acks = [(claim.jobs[0].id, f"w#1{plain}", "")]
        store.claim("default", 0, token=f"w#3{plain}", acks=acks, **options)
    counts = {name: rule.matched for name, rule in rules.items()}
    assert counts == {
        "schedule": 2,
        "claim": 3,
        "any claim": 6,
        "claims": 2,
        "acks": 2,
        "evalsha": 8,
    }
    assert store.client.hlen(store.key("default", "jobs")) == 0  # acked through the proxy


def test_many_connections_and_concurrent_pipelines(proxy):
    """Eight threads pipelining through the proxy, every ECHO answered by an injected
    error: each gets exactly its own replies, in order."""
    rule = proxy.add_rule(command(b"ECHO"), error(WRONGTYPE), times=None)
    failures: list[str] = []

    def hammer(n: int) -> None:
        client = no_retry(proxy)
        for round_ in range(20):
            pipe = client.pipeline(transaction=False)
            for i in range(10):
                key = f"k{n}:{round_}:{i}"
                pipe.set(key, f"{n}-{i}").echo("hi").get(key)
            got = pipe.execute(raise_on_error=False)
            values = [got[j] for j in range(2, 30, 3)]
            errors = [got[j] for j in range(1, 30, 3)]
            if values != [f"{n}-{i}".encode() for i in range(10)] or not all(
                isinstance(e, redis.ResponseError) for e in errors
            ):
                failures.append(f"thread {n} round {round_}: {got[:6]}")

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[:3]
    assert rule.applied == 8 * 20 * 10
