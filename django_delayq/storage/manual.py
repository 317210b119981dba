"""Operations people start by hand (the admin, the API's requeue): requeue and delete dead
jobs, run pending jobs now. A base of the Store."""

from __future__ import annotations

from collections.abc import Sequence

from django_delayq.storage.calls import Calls
from django_delayq.storage.milliseconds import ms, now_arg
from django_delayq.storage.ops import Policy
from django_delayq.storage.replies import parse_flags, parse_ints, text

PURGE_CHUNK = 500


class ManualOps(Calls):
    def requeue(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[int]:
        """Dead -> pending (due now, attempts reset): 1 requeued, 0 not dead, 2 its unique key
        is held by another pending job, 3 its record is missing."""
        if not ids:
            return []
        op = self.op("requeue", queue, (now_arg(now), *ids), parse_ints, Policy.ONCE)
        return self.call(op)

    def run_now(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[bool]:
        """Pending -> due now; a flag per id."""
        if not ids:
            return []
        return self.call(self.op("run_now", queue, (now_arg(now), *ids), parse_flags))

    def delete_dead(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[bool]:
        if not ids:
            return []
        op = self.op("delete", queue, (now_arg(now), *ids), parse_flags, Policy.ONCE)
        return self.call(op)

    def purge_dead(self, queue: str, died_before: float | None = None) -> int:
        """Delete the dead jobs of a queue (those that died at or before ``died_before``,
        if given: what a confirmation page showed), a bounded chunk per script call."""
        dead = self.key(queue, "dead")
        deleted = 0
        while True:
            if died_before is None:
                read = self.command(b"ZRANGE", dead, 0, PURGE_CHUNK - 1, route=dead)
            else:
                high = ms(died_before)
                read = self.command(
                    b"ZRANGEBYSCORE", dead, b"-inf", high, b"LIMIT", 0, PURGE_CHUNK, route=dead
                )
            ids = [text(i) for i in self.call(read)]
            if not ids:
                return deleted
            deleted += sum(self.delete_dead(queue, ids))
