"""Many jobs stored in Redis in one round trip: the one builder of that batch, used by
schedule_many() (api.py) and by the outbox relay (relaying.py).

A batch is one SADD per queue (the registry of queues), one schedule_many.lua call per
queue for the jobs without a unique key or group, and one schedule.lua call per job with
one; every op may be re-sent (the scripts answer the same on a repeat).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_delayq.storage.store import Op, Scheduled, Store


@dataclass(slots=True)
class Entry:
    """One job of a batch. ``when``: ``{"delay": seconds}`` or ``{"at": epoch}``. Not
    changed once made (not frozen: a frozen dataclass sets each field through
    ``object.__setattr__``, and schedule_many() makes one a job)."""

    id: str
    queue: str
    record: bytes
    when: dict[str, float]
    key: str | None = None
    on_conflict: str = "replace"
    link: str = ""  # batches/links.py: the record has flag 'l'
    group: str | None = None  # limits per group (schedule.lua's ARGV[12])
    trace: str = ""  # the scheduling span's context (storage/traces.py): the record has flag 't'
    max_wait: float | None = None  # a debounce's cap, with key (schedule.lua's ARGV[14])
    first_due: float | None = None  # a relayed row's first due time, with max_wait (ARGV[15])


class Batch:
    """The ops that store ``entries`` and the ids each op answers for. ``relay``: the relay
    of outbox rows (a relayed id is never stored twice, and a keyed row adopts its key:
    outbox promises I1, I3; see Store.schedule_op)."""

    def __init__(self, store: Store, entries: Sequence[Entry], relay: bool = False) -> None:
        self.ops: list[Op] = []
        self._owners: list[list[str]] = []  # the ids of each op ([] for a SADD)
        plain: dict[str, list[Entry]] = {}
        for entry in entries:
            if entry.queue not in plain:
                plain[entry.queue] = []
                self.ops.append(store.remember_queue_op(entry.queue))
                self._owners.append([])
            if entry.key is None and entry.group is None:
                plain[entry.queue].append(entry)
                continue
            op = store.schedule_op(
                entry.queue,
                entry.id,
                entry.record,
                **entry.when,
                key=entry.key,
                on_conflict=entry.on_conflict,
                relay=relay,
                adopt=relay,
                link=entry.link,
                group=entry.group,
                trace=entry.trace,
                max_wait=entry.max_wait,
                first_due=entry.first_due,
            )
            self.ops.append(op)
            self._owners.append([entry.id])
        for queue, group in plain.items():
            if group:
                traces = {e.id: e.trace for e in group if e.trace}
                if traces:  # before the jobs: never an entry for a job already finished
                    self.ops.append(store.traces.write_op(queue, traces))
                    self._owners.append([])
                jobs = [(e.id, e.record, e.when, e.link) for e in group]
                self.ops.append(store.schedule_many_op(queue, jobs, relay=relay))
                self._owners.append([e.id for e in group])

    def results(self, replies: Sequence[Any]) -> tuple[dict[str, Scheduled], Exception | None]:
        """The replies to :attr:`ops` (in order) as the result of each job Redis took, by
        id, and the first error (the jobs of its op were not stored, or may not have been).
        A lost SADD is an error too (it heals with the queue's next job)."""
        done: dict[str, Scheduled] = {}
        error: Exception | None = None
        for ids, result in zip(self._owners, replies, strict=True):
            if isinstance(result, Exception):
                error = error or result
            elif not ids:
                continue  # the queue registry's SADD
            elif isinstance(result, Scheduled):
                done[ids[0]] = result
            else:
                done.update(zip(ids, result, strict=True))
        return done, error
