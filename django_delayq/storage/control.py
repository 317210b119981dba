"""Queue control in Redis: a queue's pause state, and reads of its prioritised pending jobs.

Two keys of a queue serve it (both in the queue's hash-tag slot, named by ``Store.key``):

- ``control`` (hash): ``paused`` -> epoch milliseconds it was paused. The key is absent
  while a queue has no control state, so ``claim.lua`` pays one ``EXISTS`` for it (and
  ``ranked``) and otherwise claims as it always did. ``claim.lua`` checks it on every claim:
  every worker obeys within one claim round trip, and the state survives worker restarts.
- ``ranked`` (sorted set): pending jobs of a priority other than 0, scored
  ``(100 - priority) * BAND + due_at`` (``lua/include/priority.lua``), so the set is in claim order:
  highest priority first, then earliest due. Jobs of priority 0 stay in ``pending``.

The control hash also holds the limits workers publish (``rate:<task>``, ``conc:<task>``
from ``@task``; ``qconc`` from DELAYQ['QUEUES']) and the state claim.lua keeps for them
(``tat:<task>``, ``hold:<task>``, ``qhold``): see ``lua/claim.lua``.

:class:`ControlStore` holds these operations; a Store has one as ``store.control``
(``store.control.pause(queue)``), building its commands with the Store's ``command`` and
sending them through its transport, like every other read and write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_delayq.storage.moved import moved_getattr
from django_delayq.storage.replies import pairs as _pairs
from django_delayq.storage.scripts import lib_constant

if TYPE_CHECKING:
    from django_delayq.storage.reads import Reads

BAND = int(lib_constant("BAND"))
# A score below this is a job of priority > 0 ((100 - priority) * BAND + due_at).
ABOVE_ZERO = 100 * BAND
PRIORITY_MIN, PRIORITY_MAX = -100, 100


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Band:
    """The pending jobs of one priority in the ranked set."""

    priority: int
    count: int
    due: int  # of them, due at ``now``
    first_due_at: float | None  # epoch seconds, the earliest due time


def split_score(score: float) -> tuple[int, float]:
    """A ranked score -> (priority, due_at in epoch seconds)."""
    score = int(score)
    return 100 - score // BAND, (score % BAND) / 1000


# Parked members read for the queue's lag: exact while at most this many jobs are parked;
# beyond, the earliest due of the first ones in group order (the lag may then read low).
PARKED_LAG_READ = 1000


def _due(score: Any) -> Any:
    """A ranked score's due time (ms): what is left of the priority band; a score that is
    not a finite number (garbage in the set) is passed on as it is, for the reader to show."""
    value = float(score)
    return int(value) % BAND if math.isfinite(value) else score


@dataclass(frozen=True)
class Limit:
    """A task's limits in a queue, as workers published them (for the dashboard)."""

    task: str
    rate: tuple[int, int] | None  # (count, period ms)
    concurrency: int | None
    holding: int  # slots listed as held (checked against the jobs at the next claim)


class ControlStore:
    """A Store's queue control (``store.control``): pause state, the ranked set's reads and the
    limits workers publish, built and sent through the Store."""

    def __init__(self, store: Reads) -> None:  # a Store: its sending, keys and server_time
        self._store = store

    # -- pause ------------------------------------------------------------------------------

    def pause(self, queue: str, now: float | None = None) -> bool:
        """Mark ``queue`` paused (HSETNX, so the first pause time is kept); True if it was
        running. Idempotent: may be re-sent."""
        key = self._store.key(queue, "control")
        at = b"%d" % _ms(now if now is not None else self._store.server_time())
        return bool(self._store.call(self._store.command(b"HSETNX", key, b"paused", at, route=key)))

    def resume(self, queue: str, wakes: int = 8) -> bool:
        """Clear the pause of ``queue`` and push wake tokens, so sleeping workers claim at
        once (each woken worker that leaves due jobs behind wakes a peer, as claims do); True if
        it was paused. The control key disappears with its last field. Idempotent."""
        key, wake = self._store.key(queue, "control"), self._store.key(queue, "wake")
        cleared, _, _ = self._store.run(
            [
                self._store.command(b"HDEL", key, b"paused", route=key),
                self._store.command(b"RPUSH", wake, *([b"1"] * wakes), route=wake),
                self._store.command(b"LTRIM", wake, -8, -1, route=wake),
            ],
            budget=2.0,
        )
        if isinstance(cleared, Exception):
            raise cleared
        return bool(cleared)

    def paused_since(self, queue: str) -> float | None:
        """Epoch seconds ``queue`` was paused at, or None when it is not paused."""
        key = self._store.key(queue, "control")
        value = self._store.call(self._store.command(b"HGET", key, b"paused", route=key))
        if value is None:
            return None
        try:
            return int(value) / 1000
        except (TypeError, ValueError):
            return 0.0  # garbage: paused all the same (claim.lua checks only that it exists)

    def paused_queues(self, queues: list[str]) -> dict[str, float | None]:
        """``paused_since`` of several queues in one round trip."""
        ops = []
        for queue in queues:
            key = self._store.key(queue, "control")
            ops.append(self._store.command(b"HGET", key, b"paused", route=key))
        out: dict[str, float | None] = {}
        for queue, value in zip(queues, self._store.run(ops, budget=2.0), strict=True):
            if isinstance(value, Exception):
                raise value
            try:
                out[queue] = None if value is None else int(value) / 1000
            except (TypeError, ValueError):
                out[queue] = 0.0
        return out

    # -- prioritised pending jobs (the ranked set), parked jobs ---------------------------

    def bands(self, queue: str, now: float) -> list[Band]:
        """The priorities present in ``queue``'s ranked set, highest first, with their counts.
        One round trip per priority present (a ZRANGEBYSCORE finds the next band), plus one
        pipelined round trip of counts: bounded by the 200 possible priorities."""
        key = self._store.key(queue, "ranked")
        found: list[tuple[int, int, int]] = []  # (priority, band base, first score)
        cursor = 0
        while True:
            first = self._store.call(
                self._store.command(
                    b"ZRANGEBYSCORE", key, cursor, b"+inf", b"LIMIT", 0, 1, b"WITHSCORES", route=key
                )
            )
            if not first:
                break
            score = int(float(first[1]) if not isinstance(first[0], list) else float(first[0][1]))
            band = score // BAND
            found.append((100 - band, band * BAND, score))
            cursor = (band + 1) * BAND
        if not found:
            return []
        ops = []
        for _, base, _ in found:
            ops.append(self._store.command(b"ZCOUNT", key, base, b"(%d" % (base + BAND), route=key))
            ops.append(self._store.command(b"ZCOUNT", key, base, base + _ms(now), route=key))
        replies = self._store.run(ops, budget=2.0)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return [
            Band(priority, int(replies[2 * i]), int(replies[2 * i + 1]), (score - base) / 1000)
            for i, (priority, base, score) in enumerate(found)
        ]

    def ranked_counts(self, queue: str, now: float) -> dict[str, Any]:
        """What :meth:`Reads.counts` adds for the ranked set: pending, due, the earliest due
        time (epoch seconds) and the bands."""
        found = self.bands(queue, now)
        firsts = [b.first_due_at for b in found if b.first_due_at is not None]
        return {
            "pending": sum(b.count for b in found),
            "due": sum(b.due for b in found),
            "oldest_due_at": min(firsts) if firsts else None,
            "bands": found,
        }

    def above_zero(self, queue: str) -> int:
        """How many pending jobs have a priority above 0 (they list before ``pending``'s)."""
        key = self._store.key(queue, "ranked")
        return int(
            self._store.call(self._store.command(b"ZCOUNT", key, 0, b"(%d" % ABOVE_ZERO, route=key))
        )

    def pending_slices(self, queue: str, offset: int, limit: int) -> list[tuple[str, int, int]]:
        """The pending jobs at ranks [offset, offset + limit) of a queue in claim order (the
        prioritised ones above 0, then ``pending``'s, then those below 0), then the jobs parked
        by their group's limit (by group, lua/claim.lua), as (key kind, start, stop) rank ranges
        of the three sets. One round trip."""
        ranked, pending = self._store.key(queue, "ranked"), self._store.key(queue, "pending")
        replies = self._store.run(
            [
                self._store.command(b"ZCOUNT", ranked, 0, b"(%d" % ABOVE_ZERO, route=ranked),
                self._store.command(b"ZCARD", pending, route=pending),
                self._store.command(b"ZCARD", ranked, route=ranked),
            ],
            budget=2.0,
        )
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        above, plain, total = (int(r) for r in replies)
        segments = [
            ("ranked", 0, above),
            ("pending", 0, plain),
            ("ranked", above, total),
            ("parked", 0, None),
        ]
        out, pos, end = [], 0, offset + limit
        for kind, first, last in segments:
            size = None if last is None else last - first
            seg_end = None if size is None else pos + size
            lo = max(offset, pos)
            hi = end if seg_end is None else min(end, seg_end)
            if hi > lo:
                out.append((kind, first + lo - pos, first + hi - pos))
            if seg_end is not None:
                pos = seg_end
        return out

    def pending_page(self, queue: str, offset: int, limit: int) -> list[tuple[Any, int]]:
        """(id, due_at in epoch milliseconds) of the pending jobs at ranks [offset, offset +
        limit) in claim order (see pending_slices)."""
        out: list[tuple[Any, int]] = []
        for kind, start, stop in self.pending_slices(queue, offset, limit):
            key = self._store.key(queue, kind)
            read = self._store.command(b"ZRANGE", key, start, stop - 1, b"WITHSCORES", route=key)
            for member, score in _pairs(self._store.call(read)):
                if kind == "parked":  # "<task>\n<group>\n<rank>\n<id>"
                    _, _, rank, job_id = _text(member).split("\n")
                    out.append((job_id, _due(rank)))
                else:
                    out.append((member, _due(score) if kind == "ranked" else score))
        return out

    def oldest_parked_due(self, queue: str) -> int | None:
        """The earliest due time (epoch ms) of the queue's parked jobs (due jobs waiting for a
        slot of their group: lua/claim.lua), read from their members' ranks; None for none."""
        key = self._store.key(queue, "parked")
        members = self._store.call(
            self._store.command(b"ZRANGE", key, 0, PARKED_LAG_READ - 1, route=key)
        )
        dues = []
        for member in members:
            parts = _text(member).split("\n")
            if len(parts) == 4 and parts[2].isdigit():
                dues.append(int(parts[2]) % BAND)
        return min(dues) if dues else None

    # -- limits (rate, concurrency, groups, queues) ---------------------------------------

    def publish_rates(self, queues: list[str], rates: dict[str, tuple[int, int] | None]) -> None:
        """HSET ``rate:<task>`` = ``<count>/<period ms>`` in each queue's control hash for the
        tasks with a rate, HDEL it for the others (one round trip). claim.lua paces them."""
        values = {name: b"%d/%d" % rate if rate else None for name, rate in rates.items()}
        self._publish(queues, "rate", values)

    def publish_concurrency(self, queues: list[str], limits: dict[str, int | None]) -> None:
        """HSET ``conc:<task>`` = N in each queue's control hash for the tasks with a
        concurrency limit, HDEL it for the others (one round trip). claim.lua enforces them."""
        self._publish(
            queues, "conc", {name: b"%d" % n if n else None for name, n in limits.items()}
        )

    def publish_group_limits(
        self,
        queues: list[str],
        limits: dict[str, tuple[int | None, tuple[int, int] | None]],
    ) -> None:
        """HSET ``gconc:<task>`` = N and ``grate:<task>`` = ``<count>/<period ms>`` (the limits
        of each group of the task, ``@task(group_concurrency=, group_rate=)``), HDEL them for
        tasks without (two round trips). claim.lua enforces them per group."""
        conc = {name: b"%d" % n if n else None for name, (n, _) in limits.items()}
        rates = {name: b"%d/%d" % r if r else None for name, (_, r) in limits.items()}
        self._publish(queues, "gconc", conc)
        self._publish(queues, "grate", rates)

    def group_of(self, queue: str, job_id: str) -> str | None:
        """The group ``job_id`` was scheduled with (the ``groups`` hash: ``<task>\n<group>``, or
        its member of ``parked`` while parked, lua/include/base.lua); None for none."""
        key = self._store.key(queue, "groups")
        value = self._store.call(self._store.command(b"HGET", key, job_id, route=key))
        parts = _text(value).split("\n") if value is not None else []
        return parts[1] if len(parts) > 1 else None

    def publish_queue_limits(self, limits: dict[str, int | None]) -> None:
        """HSET ``qconc`` = N in the control hash of each queue of ``limits`` with a concurrency
        limit (DELAYQ['QUEUES']), HDEL it where the limit is None (one round trip). claim.lua
        enforces it, and drops the holders (``qhold``) a removed limit left."""
        ops = []
        for queue, limit in limits.items():
            key = self._store.key(queue, "control")
            if limit:
                ops.append(self._store.command(b"HSET", key, b"qconc", b"%d" % limit, route=key))
            else:
                ops.append(self._store.command(b"HDEL", key, b"qconc", route=key))
        for reply in self._store.run(ops, budget=2.0) if ops else ():
            if isinstance(reply, Exception):
                raise reply

    def publish_fair(self, fair: dict[str, bool]) -> None:
        """HSET ``fair`` = 1 in the control hash of each fair queue of ``fair``
        (DELAYQ['QUEUES'][q]['fair']), HDEL it elsewhere (one round trip): claim.lua then claims
        the queue's due jobs in turns, group by group (lua/include/fair.lua)."""
        ops = []
        for queue, on in fair.items():
            key = self._store.key(queue, "control")
            if on:
                ops.append(self._store.command(b"HSET", key, b"fair", b"1", route=key))
            else:
                ops.append(self._store.command(b"HDEL", key, b"fair", route=key))
        for reply in self._store.run(ops, budget=2.0) if ops else ():
            if isinstance(reply, Exception):
                raise reply

    def queue_limit(self, queue: str) -> tuple[int | None, int]:
        """The concurrency limit of ``queue`` as workers published it (None: none), and how many
        slots are listed as held (checked against the jobs at the next claim)."""
        key = self._store.key(queue, "control")
        limit, held = self._store.call(
            self._store.command(b"HMGET", key, b"qconc", b"qhold", route=key)
        )
        text = _text(limit) if limit is not None else ""
        return (int(text) if text.isdigit() else None), len(_text(held or b"").split())

    def _publish(self, queues: list[str], kind: str, values: dict[str, bytes | None]) -> None:
        """``<kind>:<task>`` = value in each queue's control hash, HDEL where the value is None."""
        fields = [(f"{kind}:{name}".encode(), value) for name, value in values.items()]
        limited = [part for field, value in fields if value is not None for part in (field, value)]
        unlimited = [field for field, value in fields if value is None]
        ops = []
        for queue in queues:
            key = self._store.key(queue, "control")
            if limited:
                ops.append(self._store.command(b"HSET", key, *limited, route=key))
            if unlimited:
                ops.append(self._store.command(b"HDEL", key, *unlimited, route=key))
        for reply in self._store.run(ops, budget=2.0) if ops else ():
            if isinstance(reply, Exception):
                raise reply

    def limits(self, queue: str) -> list[Limit]:
        """The rate and concurrency limits of ``queue``'s control hash, by task name."""
        key = self._store.key(queue, "control")
        fields = {
            _text(k): _text(v)
            for k, v in _pairs(self._store.call(self._store.command(b"HGETALL", key, route=key)))
        }
        found: dict[str, dict[str, Any]] = {}
        for field, value in fields.items():
            kind, _, task = field.partition(":")
            if kind == "rate":
                count, _, period = value.partition("/")
                if count.isdigit() and period.isdigit():
                    found.setdefault(task, {})["rate"] = (int(count), int(period))
            elif kind == "conc" and value.isdigit():
                found.setdefault(task, {})["concurrency"] = int(value)
        return [
            Limit(
                task,
                spec.get("rate"),
                spec.get("concurrency"),
                len(fields.get(f"hold:{task}", "").split()) if "concurrency" in spec else 0,
            )
            for task, spec in sorted(found.items())
        ]


# The 0.7 free functions (control.pause(store, queue) is store.control.pause(queue)), with a
# DeprecationWarning: storage is internal, but they were importable.
_KEPT = (
    "pause resume paused_since paused_queues bands ranked_counts above_zero pending_slices"
    " pending_page oldest_parked_due publish_rates publish_concurrency publish_group_limits"
    " group_of publish_queue_limits queue_limit limits"
)
_MOVED = {name: name for name in _KEPT.split()}
__getattr__ = moved_getattr(__name__, "control", _MOVED)
