"""Storage of recurring schedules' occurrences (django_delayq.recurring): one script,
``lua/occur.lua``, that stores occurrence jobs under their deterministic ids at most once,
and the reads the reconcile pass and the status report need. An occurrence is an ordinary
job once stored: claim, ack, retry, cancel and the admin treat it like any other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django_delayq.storage.milliseconds import now_arg as _now_arg
from django_delayq.storage.moved import moved_getattr
from django_delayq.storage.ops import Op, Policy
from django_delayq.storage.replies import text
from django_delayq.storage.scripts import lib_constant

# Milliseconds after its decision an occur.lua call is refused (lua/occur.lua): below the
# tombstone's life, so an occurrence that finished after the decision is still seen.
STALE = lib_constant("STALE", "occur") / 1000
BAND = int(lib_constant("BAND"))
assert lib_constant("DONE_TTL") / 1000 > STALE  # the tombstone outlives a fresh call

if TYPE_CHECKING:
    from django_delayq.storage.calls import Calls


class RecurringStore:
    """A Store's recurring schedules (``store.recurring``): occurrences stored at most once
    (``lua/occur.lua``), the pending due times and records the reconcile pass reads, the
    versions of the settings' schedules and the mark of a full pass."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def occur_op(
        self,
        queue: str,
        items: Sequence[tuple[str, bytes, int]],
        decided_ms: int,
        now: float | None = None,
    ) -> Op:
        """One occur.lua call: ``items`` are (job id, record, due at in epoch ms). Parses to a
        list of outcomes ('created', 'exists', 'done', 'stale'), one an item. Re-sent on a lost
        reply: a second send answers 'exists' for what the first created."""
        from django_delayq.conf import delayq_settings

        argv: list[Any] = [
            _now_arg(now),
            decided_ms,
            round(float(delayq_settings.MAX_SLEEP) * 1000),
        ]
        for job_id, record, due_ms in items:
            argv += (job_id, record, int(due_ms))
        return self._store.op(
            "occur", queue, argv, lambda reply: [text(r) for r in reply], Policy.RESEND
        )

    def occur(
        self,
        queue: str,
        items: Sequence[tuple[str, bytes, int]],
        decided_ms: int,
        now: float | None = None,
    ) -> list[str]:
        """Store occurrences (see :meth:`occur_op`); registers the queue too."""
        if not items:
            return []
        registered, result = self._store.run(
            [self._store.remember_queue_op(queue), self.occur_op(queue, items, decided_ms, now)],
            2.0,
        )
        if isinstance(result, Exception):
            raise result
        if isinstance(registered, Exception):
            raise registered
        return result

    def server_time_ms(self) -> int:
        """Redis's clock in epoch milliseconds: every fire time is compared with it, never
        with this machine's clock (the due times of jobs are Redis's too)."""
        return round(self._store.server_time() * 1000)

    def pending_due(self, queue: str, ids: Sequence[str]) -> list[float | None]:
        """The due time (epoch seconds) of each of ``ids`` that is pending (in ``pending``, or
        in ``ranked`` for a job with a priority), None for the rest. One round trip a chunk."""
        if not ids:
            return []
        plain, ranked = self._store.key(queue, "pending"), self._store.key(queue, "ranked")
        out: list[float | None] = []
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            replies = self._store.run(
                [
                    self._store.command(b"ZMSCORE", plain, *chunk, route=plain),
                    self._store.command(b"ZMSCORE", ranked, *chunk, route=ranked),
                ],
                2.0,
            )
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            for score, rank in zip(*replies, strict=True):
                if score is not None:
                    out.append(float(score) / 1000)
                else:
                    out.append(None if rank is None else (int(float(rank)) % BAND) / 1000)
        return out

    def exists(self, queue: str, ids: Sequence[str]) -> list[bool]:
        """Whether each of ``ids`` has a record (pending, claimed, running or dead)."""
        if not ids:
            return []
        key = self._store.key(queue, "jobs")
        ops = [self._store.command(b"HEXISTS", key, i, route=key) for i in ids]
        return [bool(r) and not isinstance(r, Exception) for r in self._store.run(ops, 2.0)]

    def schedule_sets(self, digest: str, now_ms: int) -> dict[str, tuple[int, int]]:
        """Record that a worker runs the settings' schedules of ``digest`` at ``now_ms`` (first
        seen kept, last seen raised) and return every version's (first seen, last seen), in
        epoch milliseconds. One round trip; re-sent safely (HSETNX, and a last seen re-written)."""
        first, seen = self._store.schedule_sets_key("first"), self._store.schedule_sets_key("seen")
        replies = self._store.run(
            [
                self._store.command(b"HSETNX", first, digest, now_ms, route=first),
                self._store.command(b"HSET", seen, digest, now_ms, route=seen),
                self._store.command(b"HGETALL", first, route=first),
                self._store.command(b"HGETALL", seen, route=seen),
            ],
            2.0,
        )
        return _set_times(replies[2:], replies)

    def schedule_set_times(self) -> dict[str, tuple[int, int]]:
        """Every version's (first seen, last seen), as :meth:`schedule_sets` returns them,
        recording nothing (the admin reads them; only a worker's pass records its version)."""
        first, seen = self._store.schedule_sets_key("first"), self._store.schedule_sets_key("seen")
        replies = self._store.run(
            [
                self._store.command(b"HGETALL", first, route=first),
                self._store.command(b"HGETALL", seen, route=seen),
            ],
            2.0,
        )
        return _set_times(replies, replies)

    def forget_schedule_sets(self, digests: Sequence[str]) -> None:
        """Drop versions of the settings' schedules no worker ran for a long time."""
        if digests:
            first, seen = (
                self._store.schedule_sets_key("first"),
                self._store.schedule_sets_key("seen"),
            )
            self._store.run(
                [
                    self._store.command(b"HDEL", first, *digests, route=first),
                    self._store.command(b"HDEL", seen, *digests, route=seen),
                ],
                2.0,
            )

    def mark_reconciled(self) -> None:
        """Leave the mark of a full reconcile pass: while it exists, Redis lost nothing since
        (a FLUSHALL, or a restart without persistence, removes it)."""
        key = self._store.schedule_sets_key("reconciled")
        error = self._store.run([self._store.command(b"SET", key, b"1", route=key)], 2.0)[0]
        if isinstance(error, Exception):
            raise error

    def reconciled(self) -> bool:
        """Whether the mark of a full reconcile pass is still there (see mark_reconciled)."""
        key = self._store.schedule_sets_key("reconciled")
        reply = self._store.run([self._store.command(b"EXISTS", key, route=key)], 2.0)[0]
        if isinstance(reply, Exception):
            raise reply
        return bool(reply)


def _set_times(pair: Sequence[Any], replies: Sequence[Any]) -> dict[str, tuple[int, int]]:
    """(first seen, last seen) by version from the two hashes' HGETALL replies; raises the
    first error among ``replies``."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    firsts, seens = pair
    out: dict[str, tuple[int, int]] = {}
    for name, value in firsts.items():
        last = seens.get(name)
        if last is not None:
            out[text(name)] = (int(value), int(last))
    return out


# The 0.7 free functions, which took a store first: store.recurring.<name>(...) since 0.8.
_MOVED = {
    name: name
    for name in (
        "occur_op",
        "occur",
        "server_time_ms",
        "pending_due",
        "exists",
        "schedule_sets",
        "schedule_set_times",
        "forget_schedule_sets",
        "mark_reconciled",
        "reconciled",
    )
}
__getattr__ = moved_getattr(__name__, "recurring", _MOVED)
