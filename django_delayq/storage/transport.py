"""The one way django-delayq talks to Redis: routing, pipelining, loading scripts, retrying.

Every call of the storage layer is an :class:`~.ops.Op` (a command, most often ``EVALSHA`` of
one of the scripts in ``lua/``, how to parse its reply, and its retry policy).
:meth:`Transport.run` sends a list of ops in one round trip per Redis node (a pipeline) and
re-sends what :mod:`.resends` allows until a deadline; errors are read by :mod:`.errors`.

Ops are sent on connections of the client's own pool, so a django-redis, Sentinel or plain
client works as configured; on a cluster each op goes to the node serving its queue's slot.
Scripts are loaded (``SCRIPT LOAD``) once per node and process, and again after a
``NOSCRIPT`` (a restart or ``SCRIPT FLUSH``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import redis

from django_delayq.exceptions import DelayQError
from django_delayq.storage.errors import BROKEN, NOT_RUN, code, translate
from django_delayq.storage.ops import Op, pack
from django_delayq.storage.resends import (
    LOST,
    NOSCRIPT,
    READ_ERRORS,
    RECONNECT,
    Failure,
    Resends,
    reply_failure,
)

logger = logging.getLogger("django_delayq.transport")


class Transport:
    """Sends ops to one Redis, a Sentinel-managed Redis, or a Redis Cluster."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.RedisCluster)
        self._loaded: dict[Any, set[str]] = {}  # pool -> SHAs known to be loaded there
        self._lock = threading.Lock()

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
        failures: dict[int, Failure] = {}
        try:
            conn = pool.get_connection()
        except redis.exceptions.RedisError as exc:
            return {i: Failure(exc, maybe_ran=False) for i in indexes}
        broken = False
        try:
            try:
                self._ensure_scripts(pool, conn, [ops[i] for i in indexes])
            except redis.exceptions.RedisError as exc:  # nothing of ours was sent
                broken = True  # replies of the other SCRIPT LOADs may be left unread
                return {i: Failure(exc, maybe_ran=False) for i in indexes}
            payload = [ops[i].packed(resent=i in resent) for i in indexes]
            try:
                conn.send_packed_command([b"".join(payload)])
            except BROKEN as exc:
                broken = True
                return {i: Failure(exc, maybe_ran=True) for i in indexes}
            for pos, i in enumerate(indexes):
                try:
                    reply = conn.read_response()
                except READ_ERRORS as exc:
                    failure, then = reply_failure(exc)
                    if then == LOST:
                        broken = True
                        failures.update(dict.fromkeys(indexes[pos:], failure))
                        break
                    failures[i] = failure
                    if then == NOSCRIPT:
                        self._forget_scripts(pool)
                    broken = broken or then == RECONNECT  # a failover: find the new master
                    continue
                results[i] = ops[i].read(reply)
        finally:
            if broken:
                conn.disconnect()
            pool.release(conn)
        return failures

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
                    if self._missing_scripts(pool, ops):
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
        again: list[int] = []
        for i, op in enumerate(ops):
            try:
                reply = conn.read_response()
            except redis.exceptions.BusyLoadingError:
                again.append(i)
                continue
            except redis.exceptions.ResponseError as exc:
                if code(exc) in NOT_RUN:
                    again.append(i)
                    if code(exc) == "NOSCRIPT":
                        self._forget_scripts(pool)
                else:
                    results[i] = translate(exc)
                continue
            results[i] = op.read(reply)
        if again:
            for i, result in zip(again, self.run([ops[i] for i in again], budget), strict=True):
                results[i] = result
        return results

    def _missing_scripts(self, pool: Any, ops: Sequence[Op]) -> bool:
        with self._lock:
            known = self._loaded.get(pool, set())
            return any(op.script is not None and op.script.sha not in known for op in ops)

    # -- scripts ----------------------------------------------------------------------

    def _ensure_scripts(self, pool: Any, conn: Any, ops: Sequence[Op]) -> None:
        """SCRIPT LOAD the scripts of ``ops`` not yet known to be on this node (once per
        node and process, or again after a NOSCRIPT: a restart or SCRIPT FLUSH)."""
        known = self._loaded.get(pool)
        if known is not None and all(op.script is None or op.script.sha in known for op in ops):
            return  # the common case, read without the lock (membership tests are atomic)
        with self._lock:
            known = self._loaded.setdefault(pool, set())
            missing = {op.script.sha: op.script for op in ops if op.script} if ops else {}
            missing = {sha: s for sha, s in missing.items() if sha not in known}
        if not missing:
            return
        conn.send_packed_command(
            [b"".join(pack((b"SCRIPT", b"LOAD", s.source)) for s in missing.values())]
        )
        for script in missing.values():
            sha = conn.read_response()
            sha = sha.decode() if isinstance(sha, bytes) else sha
            if sha != script.sha:
                raise DelayQError(f"Redis loaded {script.name}.lua as {sha}, not {script.sha}")
        with self._lock:
            self._loaded.setdefault(pool, set()).update(missing)

    def _forget_scripts(self, pool: Any) -> None:
        with self._lock:
            self._loaded.pop(pool, None)
