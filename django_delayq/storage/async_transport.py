"""The asyncio twin of :class:`~.transport.Transport`, for aschedule() / acancel() /
aget_job(): it sends the same :class:`~.ops.Op` objects the Store builds (their bytes, reply
parsers and policies) on a ``redis.asyncio`` client, under the same retry policy
(:mod:`.resends`: what may be re-sent, the budget, the pauses, ``NOSCRIPT`` answered by
loading the script, errors read by :mod:`.errors`). What a round trip writes and what each
reply means is :mod:`.round_trip`'s, as for the sync transport: only the awaited I/O is
this module's.

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

from django_delayq.storage.errors import BROKEN
from django_delayq.storage.ops import Op
from django_delayq.storage.resends import READ_ERRORS, Failure, Resends
from django_delayq.storage.round_trip import LoadedScripts, Round


class AsyncTransport:
    """Sends ops to one Redis on a ``redis.asyncio`` client (bound to one event loop)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pool = client.connection_pool
        self.scripts = LoadedScripts()
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
        sent = Round(ops, indexes, resent, results)
        try:
            conn = await self.pool.get_connection()
        except (*BROKEN, redis.exceptions.RedisError) as exc:
            return sent.not_sent(exc)
        read = False  # until the replies are read (the caller's task may be cancelled first)
        try:
            try:
                await self._ensure_scripts(conn, [ops[i] for i in indexes])
            except (*BROKEN, redis.exceptions.RedisError) as exc:  # nothing of ours was sent
                return sent.not_sent(exc)
            try:
                await conn.send_packed_command(sent.payload())
            except BROKEN as exc:
                return sent.write_broke(exc)
            for pos in range(len(indexes)):
                try:
                    reply = await conn.read_response()
                except READ_ERRORS as exc:
                    if sent.read_failed(pos, exc):
                        continue
                    break
                sent.answered(pos, reply)
            read = True
            if sent.noscript:
                self.scripts.forget(self.pool)
        finally:
            if not (read and sent.reusable):
                await conn.disconnect()
            await self.pool.release(conn)
        return sent.failures

    async def _ensure_scripts(self, conn: Any, ops: Sequence[Op]) -> None:
        """SCRIPT LOAD the scripts of ``ops`` not known to be loaded on this Redis."""
        missing = self.scripts.missing(self.pool, ops)
        if not missing:
            return
        await conn.send_packed_command(self.scripts.load_command(missing))
        for script in missing.values():
            self.scripts.check(script, await conn.read_response())
        self.scripts.loaded(self.pool, missing)
