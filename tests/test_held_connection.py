"""The sync transport's connection per thread (storage/transport.py's _Held): calls of ops
that may be re-sent reuse one connection of the pool instead of taking one and giving it
back each time; it goes back when the thread ends, on close(), after a round trip that broke
it, after a fork, and when it sat idle; ops sent once still take a connection the pool
checks."""

from __future__ import annotations

import gc
import threading

import pytest
import redis

from django_delayq.storage import transport as transport_module
from django_delayq.storage.ops import Op, Policy
from django_delayq.storage.transport import Transport
from tests.conftest import real_redis


@pytest.fixture
def client():
    client = real_redis()
    yield client
    client.close()


def ping(policy: Policy = Policy.RESEND) -> Op:
    return Op((b"PING",), None, policy)


def in_use(client: redis.Redis) -> int:
    return len(client.connection_pool._in_use_connections)


def test_one_connection_carries_a_thread_s_calls(client):
    transport = Transport(client)
    first = [transport.call(ping(), 1.0) for _ in range(5)]
    assert first == [b"PONG"] * 5
    assert in_use(client) == 1  # held between calls, not given back and taken again
    assert client.connection_pool._created_connections == 1
    transport.close()
    assert in_use(client) == 0


def test_a_thread_s_connection_goes_back_when_it_ends(client):
    transport = Transport(client)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(transport.call(ping(), 1.0)))
    thread.start()
    thread.join()
    gc.collect()
    assert seen == [b"PONG"]
    assert in_use(client) == 0


def test_ops_sent_once_take_a_checked_connection(client):
    transport = Transport(client)
    assert transport.call(ping(Policy.ONCE), 1.0) == b"PONG"
    assert in_use(client) == 0


def test_a_broken_round_trip_gives_it_back_disconnected(client):
    transport = Transport(client)
    transport.call(ping(), 1.0)
    held = transport._local.held
    held.conn._sock.close()  # the socket dies under it: the call re-sends on a new one
    assert transport.call(ping(), 1.0) == b"PONG"
    assert held.conn is None  # disconnected and given back to the pool
    assert transport._local.held is not held
    assert in_use(client) == 1


def test_after_a_fork_or_idle_a_new_one_is_taken(client, monkeypatch):
    transport = Transport(client)
    transport.call(ping(), 1.0)
    held = transport._local.held
    held.pid = -1  # as a forked child sees its parent's
    transport.call(ping(), 1.0)
    assert transport._local.held is not held
    again = transport._local.held
    monkeypatch.setattr(transport_module, "IDLE", -1.0)  # it sat idle too long
    transport.call(ping(), 1.0)
    assert transport._local.held is not again
    assert again.conn is None  # given back to the pool, which checks it as it hands it out


def test_a_forked_child_knows_its_own_process_id():
    """The process id a held connection is checked against is read again in a forked child
    (os.register_at_fork), so the child never uses its parent's connection."""
    import os
    import warnings

    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, b"1" if transport_module._pid == os.getpid() else b"0")
        os._exit(0)
    os.close(write)
    seen = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    assert seen == b"1" and transport_module._pid == os.getpid() != pid


def test_a_request_s_end_gives_its_thread_s_connection_back(real_store):
    """Django's request_finished: the calls of one request share the thread's connection,
    and the request's end gives it back, as Django closes a request's database connections."""
    from django.core.signals import request_finished

    assert real_store.call(ping(), 1.0) == b"PONG"
    assert real_store.call(ping(), 1.0) == b"PONG"
    assert in_use(real_store.client) == 1
    request_finished.send(sender=None)
    assert in_use(real_store.client) == 0
    assert real_store.call(ping(), 1.0) == b"PONG"  # the next request takes one again
    assert in_use(real_store.client) == 1
    real_store.transport.close()
