"""The asyncio twin of :class:`~.transport.Transport`, for aschedule() / acancel() /
aget_job(): it sends the same :class:`~.ops.Op` objects the Store builds (their bytes, reply
parsers and policies) on a ``redis.asyncio`` client, under the same retry policy
(:mod:`.resends`: what may be re-sent, the budget, the pauses, ``NOSCRIPT`` answered by
loading the script, errors read by :mod:`.errors`).

One Redis only (a URL or a cache alias on one server): no cluster routing and no Sentinel
(:mod:`.async_store` refuses those with a ConfigurationError). A connection whose replies
were not all read (a broken connection, an error, or the caller's task cancelled while it
waited) is closed, never handed back to the pool with a reply pending.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import redis

from django_delayq.exceptions import DelayQError
from django_delayq.storage.errors import BROKEN
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


class AsyncTransport:
    """Sends ops to one Redis on a ``redis.asyncio`` client (bound to one event loop)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pool = client.connection_pool
        self._loaded: set[str] = set()  # SHAs known to be loaded on this Redis
        # A call holds one connection at a time: past the pool's size, calls wait their turn
        # here, and their budget starts once they have it (not at the pool, where a burst
        # of concurrent calls would run out of connections or of budget while queued).
        self._turns = asyncio.Semaphore(min(self.pool.max_connections, 2**20))

    async def call(self, op: Op, budget: float) -> Any:
        """Run one op: its parsed reply; raises its django-delayq error."""
        (result,) = await self.run([op], budget)
        if isinstance(result, Exception):
            raise result
        return result

    async def run(self, ops: Sequence[Op], budget: float) -> list[Any]:
        """Each op's parsed reply, or its error as a django-delayq exception: one round trip,
        then re-sends as each op's policy allows until ``budget`` seconds have passed (as
        :meth:`.transport.Transport.run`)."""
        results: list[Any] = [None] * len(ops)
        if not ops:
            return results
        async with self._turns:
            resends = Resends(ops, budget)
            todo = list(range(len(ops)))
            while True:
                failures = await self._pipeline(ops, todo, resends.resent, results)
                todo = resends.triage(failures, results)
                if not todo or resends.give_up(todo, failures, results):
                    return results
                pause = resends.next_pause(todo, failures)
                if pause:
                    await asyncio.sleep(pause)

    async def _pipeline(
        self, ops: Sequence[Op], indexes: list[int], resent: set[int], results: list[Any]
    ) -> dict[int, Failure]:
        """Send ``indexes`` once, in one write; store answers in ``results``."""
        try:
            conn = await self.pool.get_connection()
        except (*BROKEN, redis.exceptions.RedisError) as exc:
            return {i: Failure(exc, maybe_ran=False) for i in indexes}
        clean = False  # every reply read: the connection may go back to the pool
        failures: dict[int, Failure] = {}
        try:
            try:
                await self._ensure_scripts(conn, [ops[i] for i in indexes])
            except (*BROKEN, redis.exceptions.RedisError) as exc:  # nothing of ours was sent
                return {i: Failure(exc, maybe_ran=False) for i in indexes}
            payload = b"".join(ops[i].packed(resent=i in resent) for i in indexes)
            try:
                await conn.send_packed_command(payload)
            except BROKEN as exc:
                return {i: Failure(exc, maybe_ran=True) for i in indexes}
            clean = await self._read(conn, ops, indexes, failures, results)
        finally:
            if not clean:
                await conn.disconnect()
            await self.pool.release(conn)
        return failures

    async def _read(
        self,
        conn: Any,
        ops: Sequence[Op],
        indexes: list[int],
        failures: dict[int, Failure],
        results: list[Any],
    ) -> bool:
        """Read the replies of ``indexes``, in order; False when the connection must close."""
        clean = True
        for pos, i in enumerate(indexes):
            try:
                reply = await conn.read_response()
            except READ_ERRORS as exc:
                failure, then = reply_failure(exc)
                if then == LOST:
                    failures.update(dict.fromkeys(indexes[pos:], failure))
                    return False
                failures[i] = failure
                if then == NOSCRIPT:
                    self._loaded.clear()
                clean = clean and then != RECONNECT  # a failover: find the new master
                continue
            results[i] = ops[i].read(reply)
        return clean

    async def _ensure_scripts(self, conn: Any, ops: Sequence[Op]) -> None:
        """SCRIPT LOAD the scripts of ``ops`` not known to be loaded (once per client, or
        again after a NOSCRIPT: a restart or SCRIPT FLUSH)."""
        missing = {op.script.sha: op.script for op in ops if op.script is not None}
        missing = {sha: s for sha, s in missing.items() if sha not in self._loaded}
        if not missing:
            return
        await conn.send_packed_command(
            b"".join(pack((b"SCRIPT", b"LOAD", s.source)) for s in missing.values())
        )
        for script in missing.values():
            sha = await conn.read_response()
            sha = sha.decode() if isinstance(sha, bytes) else sha
            if sha != script.sha:
                raise DelayQError(f"Redis loaded {script.name}.lua as {sha}, not {script.sha}")
        self._loaded.update(missing)
