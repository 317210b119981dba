"""Storage of batches and chains (django_delayq.batches): the batch scripts, a chain's steps,
and the `forward` entries that linked jobs leave when they end.

A batch's keys live in a slot of their own (``{prefix}:{b:<id>}:...``, keys.BATCH_KINDS), so
its members may be in any queue, on any node of a cluster: a member's script (ack, fail,
recover, cancel) writes its outcome to its own queue's `forward` hash, in the same script as
the transition, and the worker then sends it to the batch (batch_ended.lua) and deletes the
entry, in that order (batches/forwarding.py). A chain's steps after the first are one hash,
``{prefix}:chain:<id>``, read when a step succeeded. Everything here may be re-sent.

:class:`BatchStore` holds these operations; a Store has one as ``store.batches``
(``store.batches.ended_op(batch_id, outcomes)``), building its ops with the Store's
``command`` and ``slot_op`` and sending them through its transport.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_delayq.storage.milliseconds import now_arg
from django_delayq.storage.moved import moved_getattr
from django_delayq.storage.ops import Op
from django_delayq.storage.replies import pairs, text

if TYPE_CHECKING:
    from django_delayq.storage.calls import Calls


@dataclass(frozen=True)
class Decision:
    """A callback of a batch that was decided and is not placed yet: ``kind`` ('death',
    'success', 'complete'), when it was decided (epoch ms: its job's id is derived from it)
    and its call (JSON, as :mod:`django_delayq.batches.calls` wrote it)."""

    kind: str
    decided_ms: int
    call: str


@dataclass(frozen=True)
class Decided:
    """A batch script's answer: whether the batch needs no more attention, and the callbacks
    to place."""

    finished: bool
    callbacks: tuple[Decision, ...]


def _decided(reply: list) -> Decided:
    found = tuple(
        Decision(text(reply[i]), int(reply[i + 1]), text(reply[i + 2]))
        for i in range(1, len(reply), 3)
    )
    return Decided(int(reply[0]) == 1, found)


@dataclass(frozen=True)
class Ended:
    """A linked job that ended: its id, queue, outcome, when (epoch ms) and link (JSON);
    ``field``, the entry's field: the id, or "<id>#<ms>" for a link a unique-key replace took
    away (lua/include/links.lua, forward_end)."""

    id: str
    queue: str
    outcome: str
    at_ms: int
    link: str
    field: str


def _entry(field: str, queue: str, raw: Any) -> Ended | None:
    if raw is None:
        return None
    head, _, link = text(raw).partition("\n")
    outcome, _, at = head.partition(" ")
    job_id = field.partition("#")[0]
    return Ended(job_id, queue, outcome, int(at) if at.isdigit() else 0, link, field)


class BatchStore:
    """A Store's batches and chains (``store.batches``): the ops and reads of one batch's keys,
    of a queue's forward entries and of a chain's steps, built and sent through the Store."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def open_ops(self, batch_id: str, callbacks: dict[str, str], now_ms: int) -> list:
        """Ops that create a batch: its hash (created, the callbacks' calls), its entry in the
        list of batches, and in the open batches (looked at by a worker from ``now_ms`` + a
        minute: a batch whose block never ended stays open, harmlessly)."""
        batch_key = self._store.batch_keys(batch_id)[0]
        fields: list[Any] = ["created", now_ms]
        for kind, call in callbacks.items():
            fields += [f"cb:{kind}", call]
        return [
            self._store.command(b"HSET", batch_key, *fields, route=batch_key),
            self._store.command(
                b"ZADD", self._store.batches_key, now_ms, batch_id, route=self._store.batches_key
            ),
            self._store.command(
                b"ZADD",
                self._store.open_batches_key,
                now_ms + 60_000,
                batch_id,
                route=self._store.open_batches_key,
            ),
        ]

    def seal_op(
        self, batch_id: str, members: Iterable[tuple[str, str]], now: float | None = None
    ) -> Op:
        """batch_seal.lua: (member id, queue) pairs, each member once."""
        return self._decide_op("batch_seal", batch_id, members, now)

    def ended_op(
        self, batch_id: str, outcomes: Iterable[tuple[str, str]], now: float | None = None
    ) -> Op:
        """batch_ended.lua: (member id, outcome) pairs; none to only decide (the sweep)."""
        return self._decide_op("batch_ended", batch_id, outcomes, now)

    def _decide_op(
        self, name: str, batch_id: str, pairs_: Iterable[tuple[str, str]], now: float | None
    ) -> Op:
        argv: list[Any] = [now_arg(now)]
        for first, second in pairs_:
            argv += (first, second)
        return self._store.slot_op(name, self._store.batch_keys(batch_id), argv, _decided)

    def placed_op(self, batch_id: str, kinds: Sequence[str], now_ms: int):
        """Mark callbacks placed (their jobs are stored): no batch script returns them again."""
        key = self._store.batch_keys(batch_id)[0]
        fields: list[Any] = []
        for kind in kinds:
            fields += [f"placed:{kind}", now_ms]
        return self._store.command(b"HSET", key, *fields, route=key)

    def cancel_op(self, batch_id: str, now: float | None = None):
        def parse(reply: list) -> tuple[bool, list[tuple[str, str]]]:
            rest = [text(r) for r in reply[1:]]
            return int(reply[0]) == 1, list(zip(rest[::2], rest[1::2], strict=True))

        return self._store.slot_op(
            "batch_cancel", self._store.batch_keys(batch_id), [now_arg(now)], parse
        )

    def close_op(self, batch_ids: Sequence[str]):
        """The batches need no more attention: out of the open batches."""
        return self._store.command(
            b"ZREM", self._store.open_batches_key, *batch_ids, route=self._store.open_batches_key
        )

    def due_open(self, now_ms: int, limit: int, again_ms: int) -> list[str]:
        """Up to ``limit`` open batches due to be looked at; each is put off by ``again_ms``
        (so every open batch is looked at in turn, a few per pass)."""
        key = self._store.open_batches_key
        ids = self._store.call(
            self._store.command(
                b"ZRANGEBYSCORE", key, b"-inf", now_ms, b"LIMIT", 0, limit, route=key
            )
        )
        ids = [text(i) for i in ids]
        if ids:
            later: list[Any] = []
            for batch_id in ids:
                later += [now_ms + again_ms, batch_id]
            self._store.call(self._store.command(b"ZADD", key, b"XX", *later, route=key))
        return ids

    def read(self, batch_id: str) -> dict[str, str] | None:
        """The batch's hash (see lua/include/batch.lua), None when it is unknown."""
        key = self._store.batch_keys(batch_id)[0]
        found = self._store.call(self._store.command(b"HGETALL", key, route=key))
        fields = {text(k): text(v) for k, v in pairs(found)}
        return fields or None

    def cancelled(self, batch_id: str) -> bool:
        """Whether cancel_batch() ran on the batch."""
        key = self._store.batch_keys(batch_id)[0]
        return bool(self._store.call(self._store.command(b"HEXISTS", key, b"cancelled", route=key)))

    def outcomes(self, batch_id: str) -> tuple[dict[str, str], dict[str, str]]:
        """(member id -> queue, member id -> outcome) of a batch: its members and those that
        ended (two HGETALLs: as big as the batch, for the admin's page of one batch)."""
        _, ended, members = self._store.batch_keys(batch_id)
        got = self.run_all([self._hgetall(members), self._hgetall(ended)])
        queues = {text(k): text(v) for k, v in pairs(got[0])}
        outcomes = {text(k): text(v) for k, v in pairs(got[1])}
        return queues, outcomes

    def read_many(self, batch_ids: Sequence[str]) -> list[dict[str, str] | None]:
        """The hashes of ``batch_ids`` (read for each, one round trip: a page of the
        admin's list of batches); None for a batch that expired."""
        keys = [self._store.batch_keys(batch_id)[0] for batch_id in batch_ids]
        got = self.run_all([self._hgetall(key) for key in keys])
        return [{text(k): text(v) for k, v in pairs(reply)} or None for reply in got]

    def count_members(self, batch_id: str) -> int:
        """How many members the batch's seal recorded (HLEN: 0 before the seal); the admin reads
        them whole (outcomes) only up to a limit."""
        members = self._store.batch_keys(batch_id)[2]
        return int(self._store.call(self._store.command(b"HLEN", members, route=members)))

    def counts(self) -> tuple[int, int]:
        """(batches listed, batches open): two ZCARDs, for the metrics. Listed: the list of
        batches (created in the last 30 days, forwarding.KEEP_LISTED_MS); open: those a worker
        still looks after (a member not ended, or a decided callback not stored yet)."""
        listed, opened = self._store.batches_key, self._store.open_batches_key
        got = self.run_all(
            [
                self._store.command(b"ZCARD", listed, route=listed),
                self._store.command(b"ZCARD", opened, route=opened),
            ],
        )
        return int(got[0]), int(got[1])

    def run_all(self, ops: Sequence[Op], budget: float = 2.0) -> list[Any]:
        """The replies of ``ops`` (one round trip per node); raises the first error."""
        got = self._store.run(ops, budget)
        for reply in got:
            if isinstance(reply, Exception):
                raise reply
        return got

    def _hgetall(self, key: str) -> Op:
        return self._store.command(b"HGETALL", key, route=key)

    def page(self, offset: int, limit: int) -> list[tuple[str, int]]:
        """(batch id, created ms), newest first."""
        key = self._store.batches_key
        reply = self._store.call(
            self._store.command(
                b"ZREVRANGE", key, offset, offset + limit - 1, b"WITHSCORES", route=key
            )
        )
        return [(text(m), int(float(s))) for m, s in pairs(reply)]

    def count(self) -> int:
        key = self._store.batches_key
        return int(self._store.call(self._store.command(b"ZCARD", key, route=key)))

    def trim_op(self, before_ms: int):
        """Forget batches created before ``before_ms`` in the list of batches (their keys expire
        on their own once finished)."""
        key = self._store.batches_key
        return self._store.command(b"ZREMRANGEBYSCORE", key, b"-inf", f"({before_ms}", route=key)

    # -- forward entries (a queue's `forward` hash) ----------------------------------------

    def read_forward(self, queue: str, ids: Sequence[str]) -> list[Ended]:
        """The forward entries of ``ids`` that are there."""
        if not ids:
            return []
        key = self._store.key(queue, "forward")
        reply = self._store.call(self._store.command(b"HMGET", key, *ids, route=key))
        found = [_entry(job_id, queue, raw) for job_id, raw in zip(ids, reply, strict=True)]
        return [e for e in found if e is not None]

    def scan_forward(self, queue: str, cursor: int, count: int) -> tuple[int, list[Ended]]:
        """One HSCAN step over the queue's forward entries (the sweep of what a crash left)."""
        key = self._store.key(queue, "forward")
        reply = self._store.call(
            self._store.command(b"HSCAN", key, cursor, b"COUNT", count, route=key)
        )
        entries = [_entry(text(k), queue, v) for k, v in pairs(reply[1])]
        return int(reply[0]), [e for e in entries if e is not None]

    def read_link(self, queue: str, job_id: str) -> str | None:
        """The link stored beside a job (None for none)."""
        key = self._store.key(queue, "links")
        found = self._store.call(self._store.command(b"HGET", key, job_id, route=key))
        return None if found is None else text(found)

    def write_forward_op(self, queue: str, field: str, outcome: str, at_ms: int, link: str) -> Op:
        """Write a forward entry as the scripts do (lua/include/links.lua, forward_end): the end of
        a job that never was in Redis (a row of the outbox: batches/outbox_ends.py)."""
        key = self._store.key(queue, "forward")
        return self._store.command(
            b"HSET", key, field, f"{outcome} {int(at_ms)}\n{link}", route=key
        )

    def drop_forward_op(self, queue: str, ids: Sequence[str]):
        key = self._store.key(queue, "forward")
        return self._store.command(b"HDEL", key, *ids, route=key)

    # -- chains -----------------------------------------------------------------------------

    def write_chain_op(self, chain_id: str, steps: dict[str, str]):
        """A chain's steps after the first (field index -> call JSON, "death" -> on_death)."""
        key = self._store.chain_key(chain_id)
        fields: list[Any] = []
        for name, call in steps.items():
            fields += [name, call]
        return self._store.command(b"HSET", key, *fields, route=key)

    def read_chain_op(self, chain_id: str, fields: Sequence[str]):
        key = self._store.chain_key(chain_id)
        return self._store.command(b"HMGET", key, *fields, route=key)

    def dead_chain_ops(self, chain_id: str, at_ms: int, keep_ms: int) -> list[Op]:
        """A step before the last died: the chain's hash stays for a requeue of that step to
        continue it, ``keep_ms`` (as long as dead jobs are kept), without its on_death (stored
        once) and marked "dead" -> ``at_ms``."""
        key = self._store.chain_key(chain_id)
        return [
            self._store.command(b"HDEL", key, b"death", route=key),
            self._store.command(b"HSET", key, b"dead", int(at_ms), route=key),
            self._store.command(b"PEXPIRE", key, int(keep_ms), route=key),
        ]

    def revived_chain_ops(self, chain_id: str) -> list[Op]:
        """The dead step of a chain was requeued and succeeded: the chain is kept again until it
        ends."""
        key = self._store.chain_key(chain_id)
        return [
            self._store.command(b"HDEL", key, b"dead", route=key),
            self._store.command(b"PERSIST", key, route=key),
        ]

    def drop_chain_op(self, chain_id: str):
        key = self._store.chain_key(chain_id)
        return self._store.command(b"DEL", key, route=key)


# The 0.7 free functions (batches.read_batch(store, id) is store.batches.read(id)), with a
# DeprecationWarning: storage is internal, but they were importable.
_RENAMED = {
    "read_batch": "read",
    "read_outcomes": "outcomes",
    "read_batches": "read_many",
    "batch_counts": "counts",
    "list_batches": "page",
    "count_batches": "count",
    "trim_batches_op": "trim_op",
}
_KEPT = (
    "open_ops seal_op ended_op placed_op cancel_op close_op due_open cancelled count_members"
    " run_all read_forward scan_forward read_link write_forward_op drop_forward_op"
    " write_chain_op read_chain_op dead_chain_ops revived_chain_ops drop_chain_op"
)
_MOVED = {**_RENAMED, **{name: name for name in _KEPT.split()}}
__getattr__ = moved_getattr(__name__, "batches", _MOVED)
