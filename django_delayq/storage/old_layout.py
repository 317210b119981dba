"""Redis layout 1 (django-delayq 0.1) in a queue: finding it, and converting it with
``lua/upgrade.lua``.

``store.old_layout`` (:class:`OldLayoutStore`), a subject store of
:class:`~django_delayq.storage.store.Store`: key names come from :mod:`.keys`. This module
deals in counts, ids and record bytes; re-encoding a record is :mod:`.upgrade`'s (it needs
job.py and the task registry), and so is the loop that calls
:meth:`OldLayoutStore.step` until a queue is converted.

Layout 1 is told apart by its scores: float epoch seconds, below ``OLD_SCORES`` (10^11),
where this layout's are epoch milliseconds (above 10^12 since 2001) or, for reserved leases,
negative; and by the ``meta`` hash, which this layout does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_delayq.storage.scripts import lib_constant

OLD_SCORES = int(lib_constant("OLD_SCORES", "upgrade"))  # milliseconds, see upgrade.lua
OLD_SETS = ("pending", "running", "dead")

if TYPE_CHECKING:
    from django_delayq.storage.calls import Calls


@dataclass(frozen=True)
class OldData:
    """What a queue holds in layout 1: entries per set, and fields of the meta hash."""

    queue: str
    pending: int = 0
    running: int = 0
    dead: int = 0
    meta: int = 0

    @property
    def found(self) -> bool:
        return bool(self.pending or self.running or self.dead or self.meta)

    def describe(self) -> str:
        return (
            f"{self.pending} pending, {self.running} in progress, {self.dead} dead, "
            f"{self.meta} meta fields"
        )


@dataclass(frozen=True)
class UpgradeStep:
    """The reply of one upgrade.lua call (see its header)."""

    left: int  # layout-1 entries left in the sets, +1 while the meta hash exists
    pending: int  # entries converted by this call, per set
    running: int
    dead: int
    records: int  # records this call replaced with the format-3 ones it was given
    orphans: int  # meta fields deleted with no job to convert them for
    legacy: list[tuple[str, bytes]]  # (id, layout-1 record) to re-encode for the next call


def _parse_step(reply: list) -> UpgradeStep:
    left, pending, running, dead, records, orphans, flat = reply
    legacy = [
        (flat[i].decode() if isinstance(flat[i], bytes) else str(flat[i]), flat[i + 1])
        for i in range(0, len(flat), 2)
    ]
    return UpgradeStep(
        int(left), int(pending), int(running), int(dead), int(records), int(orphans), legacy
    )


class OldLayoutStore:
    """A Store's 0.1 layout (``store.old_layout``): detection (worker start, system check,
    dry run) and conversion."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def data(self, queues: Sequence[str]) -> list[OldData]:
        """Per queue, its layout-1 entries (``ZCOUNT <set> 0 (10^11``, O(log N)) and meta
        fields (``HLEN``, O(1)): one round trip for all of them. Raises DelayQError when
        Redis cannot be read."""
        ops = []
        for queue in queues:
            for kind in OLD_SETS:
                key = self._store.key(queue, kind)
                ops.append(self._store.command(b"ZCOUNT", key, 0, b"(%d" % OLD_SCORES, route=key))
            meta = self._store.key(queue, "meta")
            ops.append(self._store.command(b"HLEN", meta, route=meta))
        results = self._store.run(ops, 2.0) if ops else []
        counts = [_count(r) for r in results]
        return [OldData(queue, *counts[i * 4 : i * 4 + 4]) for i, queue in enumerate(queues)]

    def confirmed(self, found: Sequence[OldData], sample: int = 20) -> list[OldData]:
        """Of ``found`` (:meth:`data`'s counts), the queues that really hold layout 1: a meta
        hash, or a low-scored entry (among the first ``sample`` of each set) whose record is
        layout-1 JSON. Low-scored ids without a record (orphans, garbage) or with this
        layout's records are not 0.1 data: the worker's own paths deal with them. At most two
        round trips. Raises DelayQError when Redis cannot be read."""
        confirmed = [d for d in found if d.meta]
        suspects = [d for d in found if d.found and not d.meta]
        ops, owners = [], []
        for data in suspects:
            for kind in OLD_SETS:
                if getattr(data, kind):
                    key = self._store.key(data.queue, kind)
                    limit = (b"LIMIT", 0, sample)
                    ops.append(
                        self._store.command(
                            b"ZRANGEBYSCORE", key, 0, b"(%d" % OLD_SCORES, *limit, route=key
                        )
                    )
                    owners.append(data)
        ids: dict[str, list[bytes]] = {}
        for data, reply in zip(owners, self._store.run(ops, 2.0) if ops else [], strict=True):
            if isinstance(reply, Exception):
                _count(reply)  # raises unless the key is of the wrong type
                continue
            ids.setdefault(data.queue, []).extend(reply)
        ops = []
        asked = [d for d in suspects if ids.get(d.queue)]
        for data in asked:
            jobs = self._store.key(data.queue, "jobs")
            ops.append(self._store.command(b"HMGET", jobs, *ids[data.queue], route=jobs))
        for data, records in zip(asked, self._store.run(ops, 2.0) if ops else [], strict=True):
            if isinstance(records, Exception):
                _count(records)
                continue
            if any(r and r[:1] in (b"[", b"{") for r in records):
                confirmed.append(data)
        return confirmed

    def step(
        self, queue: str, limit: int, records: Sequence[tuple[str, bytes, bytes]] = ()
    ) -> UpgradeStep:
        """One upgrade.lua call: replace the ``records`` (id, old record, new record or
        b"" to keep the old one) a previous step returned, then convert up to ``limit``
        layout-1 entries. Safe to send twice (a lost reply is re-sent)."""
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        argv: list[Any] = [limit]
        for job_id, old, new in records:
            argv += (job_id, old, new)
        return self._store.call(self._store.op("upgrade", queue, argv, _parse_step))


def _count(reply: Any) -> int:
    """A count read while looking for layout 1. A key of the wrong type holds no layout-1
    data (and is the worker's own paths' business, not a reason to refuse to start); any
    other error is raised."""
    if isinstance(reply, Exception):
        if "WRONGTYPE" in str(reply):
            return 0
        raise reply
    return int(reply)
