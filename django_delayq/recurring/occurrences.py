"""An occurrence's job record and queue, from its schedule's definition (the reconcile pass
and the claims of occurrences both store occurrences)."""

from __future__ import annotations

from django_delayq.conf import delayq_settings
from django_delayq.jobs.record import FLAG_TOMBSTONE, FLAG_UNDECIDED, encode_record
from django_delayq.recurring.definitions import Definition, ScheduleError, parse
from django_delayq.scheduling.registry import find_task

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
    flags = FLAG_TOMBSTONE
    max_retries = task.max_retries if task is not None else None
    if task is None:
        flags += FLAG_UNDECIDED
    if max_retries is None:
        max_retries = delayq_settings.MAX_RETRIES
    priority = task.priority if task is not None else 0
    return encode_record(
        definition.task,
        list(definition.args),
        definition.kwargs,
        None,
        max_retries,
        flags,
        priority,
    )


def recorded_definition(name: str, recorded: dict) -> Definition | None:
    """The definition a ScheduleState row records (``{"spec": ..., "queue": ...}``), or None
    when it cannot be parsed here."""
    try:
        return parse(name, recorded.get("spec") or {}, "database")
    except ScheduleError:
        return None
