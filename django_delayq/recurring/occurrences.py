"""Occurrences from a schedule's definition: the one step definition -> record -> stored
(occur.lua), taken by the reconcile pass (the occurrences each schedule should have) and by
a claim of occurrences (each schedule's successor): :class:`Occurrences`, and the record,
queue and id of an occurrence."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django_delayq.conf import delayq_settings
from django_delayq.jobs.record import JobSpec, encode_job
from django_delayq.recurring.definitions import Definition, ScheduleError, parse
from django_delayq.recurring.ids import occurrence_id
from django_delayq.scheduling.registry import find_task
from django_delayq.storage.store import Store

CHUNK = 500  # occurrences per occur.lua call

# Records and queues by (digest, registered task): a pass encodes each schedule's once.
_records: dict[tuple[str, int], tuple[bytes, str]] = {}


def encoded(definition: Definition) -> tuple[bytes, str]:
    """(record_of, queue_of) of ``definition``, cached."""
    key = (definition.digest, id(find_task(definition.task)))
    found = _records.get(key)
    if found is None:
        if len(_records) > 100_000:
            _records.clear()
        found = _records[key] = (record_of(definition), queue_of(definition))
    return found


def queue_of(definition: Definition) -> str:
    if definition.queue:
        return definition.queue
    task = find_task(definition.task)
    return (task.queue if task is not None else None) or delayq_settings.DEFAULT_QUEUE


def record_of(definition: Definition) -> bytes:
    """The job record of an occurrence: the task's call, flag 'i' (a finished occurrence
    leaves a tombstone, which occur.lua reads), the task's priority (0 for a task this
    process does not import), so occur.lua ranks it as schedule() would."""
    task = find_task(definition.task)
    max_retries = task.max_retries if task is not None else None
    if max_retries is None:
        max_retries = delayq_settings.MAX_RETRIES
    spec = JobSpec(
        definition.task,
        list(definition.args),
        definition.kwargs,
        None,
        max_retries,
        task.priority if task is not None else 0,
        undecided=task is None,
        tombstone=True,
    )
    return encode_job(spec).data


def recorded_definition(name: str, recorded: dict) -> Definition | None:
    """The definition a ScheduleState row records (``{"spec": ..., "queue": ...}``), or None
    when it cannot be parsed here."""
    try:
        return parse(name, recorded.get("spec") or {}, "database")
    except ScheduleError:
        return None


_ids: dict[tuple[str, int, int], str] = {}


def cached_id(name: str, version: int, fire: int) -> str:
    """occurrence_id, remembered (a pass asks for each schedule's next one again)."""
    key = (name, version, fire)
    found = _ids.get(key)
    if found is None:
        if len(_ids) > 200_000:
            _ids.clear()
        found = _ids[key] = occurrence_id(name, version, fire)
    return found


class Occurrences:
    """Occurrences to store, by queue: job id -> (record, fire time in epoch ms)."""

    def __init__(self) -> None:
        self.by_queue: dict[str, dict[str, tuple[bytes, int]]] = defaultdict(dict)

    def add(
        self, definition: Definition, version: int, fires: Iterable[int], queue: str | None = None
    ) -> None:
        """The occurrences of ``definition`` (under ``version``) at ``fires``, in its queue,
        or in ``queue`` (the queue the database records for it, when given)."""
        record, own_queue = encoded(definition)
        items = self.by_queue[queue or own_queue]
        for fire in fires:
            items[cached_id(definition.name, version, fire)] = (record, fire)

    def store(
        self,
        store: Store,
        queue: str,
        decided_ms: int,
        now: float | None = None,
        skip_pending: bool = False,
    ) -> list[str]:
        """Store ``queue``'s occurrences with occur.lua (CHUNK a call; ``decided_ms``: when
        the durable record that allowed them was read): one outcome each ('created',
        'exists', 'done', 'stale'). ``skip_pending``: one ZMSCORE first, and what is pending
        answers 'exists' without a script call (a pass finds nearly every one there).
        Raises the DelayQError of a call Redis did not answer."""
        items = [(job_id, record, fire) for job_id, (record, fire) in self.by_queue[queue].items()]
        if skip_pending:
            scores = store.recurring.pending_due(queue, [item[0] for item in items])
            items = [item for item, score in zip(items, scores, strict=True) if score is None]
            outcomes = ["exists"] * (len(scores) - len(items))
        else:
            outcomes = []
        for start in range(0, len(items), CHUNK):
            outcomes += store.recurring.occur(queue, items[start : start + CHUNK], decided_ms, now)
        return outcomes
