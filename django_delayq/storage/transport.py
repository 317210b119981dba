"""The one way django-delayq talks to Redis: routing, pipelining, loading scripts, retrying.

Every call of the storage layer is an :class:`~.ops.Op` (a command, most often ``EVALSHA`` of
one of the scripts in ``lua/``, how to parse its reply, and its retry policy).
:meth:`Transport.run` sends a list of ops in one round trip per Redis node (a pipeline) and
re-sends what :mod:`.resends` allows until a deadline; errors are read by :mod:`.errors`.
What a round trip writes and what its replies mean is :mod:`.round_trip`'s, shared with the
asyncio transport; this module does the routing and the I/O.

Ops are sent on connections of the client's own pool, so a django-redis, Sentinel or plain
client works as configured; on a cluster each op goes to the node serving its queue's slot.
Off a cluster each thread holds one connection for its round trips of ops that may be
re-sent (:class:`_Held`: taking
one from the pool and giving it back, with redis-py's checks and hooks on both, cost as much
as the rest of a schedule()'s Python); it goes back to the pool when the thread ends, the
process forks, :meth:`Transport.close` is called or a round trip leaves it unusable (a
broken connection, a failover: Sentinel's pool resolves the master again for the next).
Scripts are loaded (``SCRIPT LOAD``) once per node and process, and again after a
``NOSCRIPT`` (a restart or ``SCRIPT FLUSH``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import redis

from django_delayq.storage.errors import BROKEN
from django_delayq.storage.ops import Op, Policy
from django_delayq.storage.resends import Failure, Resends
from django_delayq.storage.round_trip import LoadedScripts, Round

logger = logging.getLogger("django_delayq.transport")

IDLE = 2.0  # seconds a thread's held connection may sit unused and still be used unchecked

# This process's id, read again in a forked child (os.getpid() is a system call a round trip
# would make).
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forked)


class _Held:
    """A thread's connection, taken from ``pool`` in process ``pid``; given back when the
    thread ends (its ``threading.local`` is cleared) or :meth:`give_back` is called."""

    __slots__ = ("conn", "pid", "pool", "used")

    def __init__(self, pool: Any) -> None:
        self.pool, self.pid = pool, _pid
        self.conn: Any = pool.get_connection()
        self.used = time.monotonic()

    def usable(self, pool: Any) -> bool:
        """Whether it may carry this thread's next round trip to ``pool``: not given back,
        of this process and pool, and used within IDLE seconds (else it goes back, so the
        pool checks it as it hands it out again: closed by the server while idle?)."""
        if self.conn is None or self.pid != _pid or self.pool is not pool:
            return False
        now = time.monotonic()
        if now - self.used > IDLE:
            return False
        self.used = now
        return True

    def give_back(self, broken: bool = False) -> None:
        conn, self.conn = self.conn, None
        if conn is None or self.pid != _pid:  # a fork: the pool resets itself
            return
        if broken:
            conn.disconnect()
        self.pool.release(conn)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown: nowhere to give it
            self.give_back()


class Transport:
    """Sends ops to one Redis, a Sentinel-managed Redis, or a Redis Cluster."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.RedisCluster)
        self.scripts = LoadedScripts()  # per pool: one a node
        self._local = threading.local()  # .held: this thread's _Held (off a cluster)

    def _connection(self, pool: Any, resendable: bool) -> tuple[Any, bool]:
        """A connection of ``pool`` for one round trip, and whether it is this thread's held
        one: off a cluster, for ops that may all be re-sent (a held connection the server
        closed shows only as the round trip fails; ops sent once take one the pool checks)."""
        if self.cluster or not resendable:
            return pool.get_connection(), False
        held = getattr(self._local, "held", None)
        if held is None or not held.usable(pool):
            if held is not None:
                held.give_back()
            held = self._local.held = _Held(pool)
        return held.conn, True

    def close(self) -> None:
        """Give this thread's held connection back to the pool."""
        held = getattr(self._local, "held", None)
        if held is not None:
            held.give_back()
            self._local.held = None

    # -- routing ------------------------------------------------------------------

    def pool(self, route: bytes | None) -> Any:
        """The connection pool of the node that serves ``route`` (the only pool off a cluster)."""
        if not self.cluster:
            return self.client.connection_pool
        if route is None:
            node = self.client.get_default_node()
        else:
            node = self.client.get_node_from_key(route)
        if node.redis_connection is None:
            self.client.nodes_manager.initialize()
            node = self.client.get_node_from_key(route) if route else node
        return node.redis_connection.connection_pool

    def address(self) -> str:
        """Where this client connects, for a log line: ``host:port/db``, ``unix:path/db``,
        Sentinel's service or the cluster's first node; never a password."""
        if self.cluster:
            nodes = getattr(self.client.nodes_manager, "startup_nodes", {}) or {}
            first = next(iter(nodes), None)
            return f"the cluster of {first}" if first else "the cluster"
        pool = self.client.connection_pool
        service = getattr(pool, "service_name", None)
        kwargs = getattr(pool, "connection_kwargs", {})
        db = kwargs.get("db", 0)
        if service:
            return f"Sentinel's {service!r}/{db}"
        if kwargs.get("path"):
            return f"unix:{kwargs['path']}/{db}"
        return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"

    def _refresh_slots(self) -> None:
        if self.cluster:
            try:
                self.client.nodes_manager.initialize()
            except redis.exceptions.RedisError as exc:
                logger.debug("refreshing the cluster's slots failed: %s", exc)

    # -- sending ------------------------------------------------------------------

    def call(self, op: Op, budget: float) -> Any:
        """Run one op: its parsed reply; raises its django-delayq error."""
        (result,) = self.run([op], budget)
        if isinstance(result, Exception):
            raise result
        return result

    def run(self, ops: Sequence[Op], budget: float, resent: bool = False) -> list[Any]:
        """Each op's parsed reply, or its error as a django-delayq exception.

        One round trip per node, then re-sends as each op's policy allows until ``budget``
        seconds have passed (pausing 50 ms, doubling, at most 1 s, between rounds).
        ``resent``: the ops were sent before and their replies lost (they go with their
        resend args from the start).
        """
        results: list[Any] = [None] * len(ops)
        if not ops:
            return results
        started = time.monotonic()
        todo = list(range(len(ops)))
        failures = self._round(ops, todo, set(todo) if resent else set(), results)
        if not failures:  # the common case: no retry state is built
            return results
        resends = Resends(ops, budget, resent, started)
        while True:
            todo = resends.triage(failures, results)
            if resends.slots_moved:
                self._refresh_slots()
            if not todo or resends.give_up(todo, failures, results):
                return results
            resends.wait(todo, failures)
            failures = self._round(ops, todo, resends.resent, results)

    def _round(
        self, ops: Sequence[Op], todo: list[int], resent: set[int], results: list[Any]
    ) -> dict[int, Failure]:
        """Send ``todo`` once, one pipeline per node; store answers in ``results``."""
        if not self.cluster:  # one pool
            return self._pipeline(self.client.connection_pool, ops, todo, resent, results)
        by_pool: dict[Any, list[int]] = {}
        failures: dict[int, Failure] = {}
        for i in todo:
            try:
                pool = self.pool(ops[i].route)
            except redis.exceptions.RedisError as exc:
                failures[i] = Failure(exc, maybe_ran=False)
                continue
            by_pool.setdefault(pool, []).append(i)
        for pool, indexes in by_pool.items():
            failures.update(self._pipeline(pool, ops, indexes, resent, results))
        return failures

    def _pipeline(
        self,
        pool: Any,
        ops: Sequence[Op],
        indexes: list[int],
        resent: set[int],
        results: list[Any],
    ) -> dict[int, Failure]:
        """Send ``indexes`` once, in one write on one connection of ``pool``."""
        sent = Round(ops, indexes, resent, results)
        try:
            resendable = all([ops[i].policy is Policy.RESEND for i in indexes])
            conn, held = self._connection(pool, resendable)
        except redis.exceptions.RedisError as exc:
            return sent.not_sent(exc)
        finished = False  # every reply read (else the connection may hold unread ones)
        try:
            try:
                self._ensure_scripts(pool, conn, [ops[i] for i in indexes])
            except redis.exceptions.RedisError as exc:  # nothing of ours was sent
                return sent.not_sent(exc)
            try:
                conn.send_packed_command([sent.payload()])
            except BROKEN as exc:
                return sent.write_broke(exc)
            sent.read_all(conn.read_response)
            finished = True
            if sent.noscript:
                self.scripts.forget(pool)
        finally:
            broken = not (finished and sent.reusable)
            if held and broken:
                self.close_broken()
            elif not held:
                if broken:
                    conn.disconnect()
                pool.release(conn)
        return sent.failures

    def close_broken(self) -> None:
        """This thread's held connection is unusable: disconnected and given back."""
        held = self._local.held
        held.give_back(broken=True)
        self._local.held = None

    def stream(self, chunks: Iterable[Sequence[Op]], budget: float) -> Iterator[list[Any]]:
        """:meth:`run` for each chunk of re-sendable ops, in order, one round trip each, with
        the next chunk sent before the replies of this one are read (building the next chunk
        overlaps Redis running this one). A chunk whose replies were lost with a broken
        connection is sent again (with its resend args); ops Redis answered without running
        them (NOSCRIPT, BUSY...) are sent again through :meth:`run`. On a cluster, chunk
        after chunk."""
        if self.cluster:
            for ops in chunks:
                yield self.run(ops, budget)
            return
        pool = self.client.connection_pool
        in_flight: deque[Sequence[Op]] = deque()  # sent, replies not read yet, in order
        conn: Any = None
        broken = False

        def read_until(left: int) -> Iterator[list[Any]]:
            while len(in_flight) > left:
                replies = self._chunk_replies(conn, pool, in_flight[0], budget)  # may raise
                in_flight.popleft()  # only once its replies are read
                yield replies

        try:
            for ops in chunks:
                if broken:
                    yield self.run(ops, budget)
                    continue
                queued = False
                try:
                    if conn is None:
                        conn = pool.get_connection()
                    if self.scripts.missing(pool, ops):
                        yield from read_until(0)  # SCRIPT LOAD's replies must not meet theirs
                        self._ensure_scripts(pool, conn, ops)
                    in_flight.append(ops)
                    queued = True
                    conn.send_packed_command([b"".join(op.packed() for op in ops)])
                    yield from read_until(1)
                except (*BROKEN, redis.exceptions.RedisError):
                    broken = True
                    if conn is not None:
                        conn.disconnect()
                    while in_flight:  # may have run: sent again, idempotently, in order
                        yield self.run(in_flight.popleft(), budget, resent=True)
                    if not queued:  # nothing of it was sent
                        yield self.run(ops, budget)
            if not broken:
                try:
                    yield from read_until(0)
                except (*BROKEN, redis.exceptions.RedisError):
                    conn.disconnect()
                    while in_flight:
                        yield self.run(in_flight.popleft(), budget, resent=True)
        finally:
            if conn is not None:
                if in_flight:  # abandoned with replies unread
                    conn.disconnect()
                pool.release(conn)

    def _chunk_replies(self, conn: Any, pool: Any, ops: Sequence[Op], budget: float) -> list[Any]:
        """Read one sent chunk's replies. A broken connection raises (the caller re-sends);
        ops Redis did not run are sent again through run()."""
        results: list[Any] = [None] * len(ops)
        sent = Round(ops, list(range(len(ops))), set(), results)
        read = sent.read_all(conn.read_response)
        if sent.noscript:
            self.scripts.forget(pool)
        if not read:
            raise sent.failures[len(ops) - 1].exc  # the connection broke: the caller re-sends
        again = Resends(ops, budget).triage(sent.failures, results)  # final errors answered
        if again:
            for i, result in zip(again, self.run([ops[i] for i in again], budget), strict=True):
                results[i] = result
        return results

    # -- scripts ----------------------------------------------------------------------

    def _ensure_scripts(self, pool: Any, conn: Any, ops: Sequence[Op]) -> None:
        """SCRIPT LOAD the scripts of ``ops`` not yet known to be on this node."""
        missing = self.scripts.missing(pool, ops)
        if not missing:
            return
        conn.send_packed_command([self.scripts.load_command(missing)])
        for script in missing.values():
            self.scripts.check(script, conn.read_response())
        self.scripts.loaded(pool, missing)
