"""The Store's calls of the async API (aschedule, acancel, aget_job), sent on a
``redis.asyncio`` client.

The ops are the sync Store's own (:func:`~.connection.get_store` builds them: the same
scripts, keys, arguments, reply parsers and policies); only the sending differs
(:class:`~.async_transport.AsyncTransport`). The asyncio client is derived from the sync
client of the same settings (``DELAYQ["REDIS_URL"]`` or the cache alias): same host, port,
database, credentials, TLS, timeouts and pool size (past which a call waits its turn). A
``redis.asyncio`` connection belongs to the event loop that opened it, so there is one
client per event loop and configuration (under WSGI each async view runs on a loop of its
own).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import redis.asyncio

from django_delayq.exceptions import ConfigurationError
from django_delayq.storage.async_transport import AsyncTransport
from django_delayq.storage.calls import API_BUDGET
from django_delayq.storage.connection import get_store
from django_delayq.storage.reads import RawJob
from django_delayq.storage.replies import Scheduled
from django_delayq.storage.reschedule import Rescheduled
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.transport")

_CONNECTIONS = {
    redis.Connection: redis.asyncio.Connection,
    redis.SSLConnection: redis.asyncio.SSLConnection,
    redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
}
# The connection settings copied from the sync client's pool (those the asyncio
# connection class takes). Not copied: objects of the sync client's own (its parser class,
# maintenance-notification handler, retry), nor redis-py's retries (the transport is the
# only retry layer, as in sync).
_COPIED = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "credential_provider",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "client_name",
        "lib_name",
        "lib_version",
        "encoding",
        "encoding_errors",
        "decode_responses",
        "health_check_interval",
        "protocol",
    }
)
_stores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, AsyncStore]] = (
    weakref.WeakKeyDictionary()
)

UNSUPPORTED = (
    "the async API (aschedule, acancel, aget_job) talks to one Redis server; {what} is not "
    "supported: call the sync API from async code with "
    "asgiref.sync.sync_to_async(django_delayq.schedule)(...)"
)


def async_client(client: Any) -> redis.asyncio.Redis:
    """A ``redis.asyncio`` client to the Redis that the sync ``client`` talks to."""
    if isinstance(client, redis.RedisCluster):
        raise ConfigurationError(UNSUPPORTED.format(what="a Redis Cluster (DELAYQ['CLUSTER'])"))
    pool = client.connection_pool
    kind = _CONNECTIONS.get(pool.connection_class)
    if kind is None or type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        what = f"{type(pool).__name__} with {pool.connection_class.__name__} (Sentinel?)"
        raise ConfigurationError(UNSUPPORTED.format(what=what))
    accepted = set()
    for cls in kind.__mro__:
        if "__init__" in vars(cls):
            accepted |= set(inspect.signature(cls.__init__).parameters)
    given = dict(pool.connection_kwargs)
    for name in ("socket_timeout", "socket_connect_timeout"):  # redis-py 8 keeps them as orig_
        if name not in given and f"orig_{name}" in given:
            given[name] = given[f"orig_{name}"]
    kwargs = {
        k: v for k, v in given.items() if k in accepted and (k in _COPIED or k.startswith("ssl_"))
    }
    # Blocking, as a second guard: the transport already lets no more calls than
    # max_connections take a connection at once (the others wait their turn).
    async_pool = redis.asyncio.BlockingConnectionPool(
        connection_class=kind, max_connections=pool.max_connections, timeout=None, **kwargs
    )
    return redis.asyncio.Redis(connection_pool=async_pool)


def get_async_store() -> AsyncStore:
    """The AsyncStore of the current settings and the running event loop.

    Its connections belong to that loop, and are closed when the loop ends: the loop's
    ``shutdown_asyncgens()`` (which ``asyncio.run()`` and asgiref's ``async_to_sync``, how
    Django runs an async view under WSGI, call before closing a loop) closes an async
    generator this store keeps open, and the store's pool with it. Entries of loops that
    were closed without it are dropped at the next call (their sockets close as they are
    collected). Without this, each request of an async view under WSGI left a connection
    open for the life of the process."""
    loop = asyncio.get_running_loop()
    _forget_closed_loops()
    store = get_store()
    per_loop = _stores.setdefault(loop, {})
    found = per_loop.get(id(store))
    if found is None or found.store is not store:
        found = per_loop[id(store)] = AsyncStore(store, async_client(store.client))
        found.bind(loop)
    return found


def _forget_closed_loops() -> None:
    for loop in list(_stores):
        if loop.is_closed():
            _stores.pop(loop, None)


async def _lifetime(store: AsyncStore, loop: asyncio.AbstractEventLoop) -> Any:
    """Kept open by ``store`` until its loop shuts down its async generators: then the
    store's connections are closed and it is forgotten."""
    try:
        yield
    finally:
        per_loop = _stores.get(loop, {})
        if per_loop.get(id(store.store)) is store:
            del per_loop[id(store.store)]
        if not per_loop:
            _stores.pop(loop, None)
        client = store.transport.client
        try:
            await client.aclose()
            await client.connection_pool.disconnect()  # a pool given to a client stays open
        except (OSError, redis.exceptions.RedisError) as exc:  # closing anyway
            logger.debug("closing the asyncio connections of a finished loop: %s", exc)


class AsyncStore:
    """The sync ``store``'s ops, sent on ``client`` (a ``redis.asyncio`` client)."""

    def __init__(self, store: Store, client: Any) -> None:
        self.store = store
        self.transport = AsyncTransport(client)
        self._lifetime: Any = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close this store's connections when ``loop`` shuts down (see get_async_store):
        the loop's async-generator hooks track the generator once it first runs."""
        self._lifetime = _lifetime(self, loop)
        with contextlib.suppress(StopIteration):
            self._lifetime.asend(None).send(None)

    async def schedule(
        self, queue: str, job_id: str, record: bytes, plain: bool = False, **options: Any
    ) -> Scheduled:
        """As :meth:`.store.Store.schedule` on one Redis: the queue remembered (by the script)
        and the job stored, one command with one reply; it may be re-sent."""
        op = self.store.job_op(queue, job_id, record, plain, True, **options)
        return await self.transport.call(op, API_BUDGET)

    async def cancel(
        self, queue: str, job_id: str | None = None, key: str | None = None
    ) -> tuple[str, bytes] | None:
        """As :meth:`.store.Store.cancel` (sent once: a lost reply raises OutcomeUnknown)."""
        return await self.transport.call(self.store.cancel_op(queue, job_id, key), API_BUDGET)

    async def reschedule(
        self, queue: str, job_id: str | None = None, key: str | None = None, **options: Any
    ) -> Rescheduled | None:
        """As :meth:`.reschedule.Reschedule.reschedule` (re-sent after a lost reply)."""
        op = self.store.reschedule_op(queue, job_id, key, **options)
        return await self.transport.call(op, API_BUDGET)

    async def fetch(self, queue: str, job_id: str, finished: bool = False) -> RawJob | None:
        op = self.store.fetch_op(queue, job_id, finished)
        return await self.transport.call(op, API_BUDGET)

    async def find(
        self, job_id: str, queues: Iterable[str], finished: bool = False
    ) -> RawJob | None:
        for queue in queues:
            raw = await self.fetch(queue, job_id, finished)
            if raw is not None:
                return raw
        return None

    async def queues(self) -> list[str]:
        """Every queue Redis remembers (as :meth:`.reads.Reads.queues`)."""
        return await self.transport.call(self.store.queues_op(), API_BUDGET)

    async def relayed(self, queue: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        return await self.transport.call(self.store.relayed_op(queue, ids), API_BUDGET)
