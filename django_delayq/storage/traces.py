"""The trace context stored beside a job (OpenTelemetry, monitoring/tracing.py): the queue's
``trace`` hash, job id -> the context of the span that scheduled it, for jobs whose record
has flag 't'. schedule.lua writes it with the job (ARGV[13]); a schedule_many() batch writes
it with one HSET sent just before its schedule_many.lua call, in the same round trip;
ack.lua, and every script that forgets a job, delete it. The worker reads it only when
tracing is on, one HMGET per claim that took traced jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django_delayq.storage.ops import Op
from django_delayq.storage.store import Store


def write_traces_op(store: Store, queue: str, traces: Mapping[str, str]) -> Op:
    """HSET the contexts of jobs about to be stored by schedule_many.lua (id -> context)."""
    key = store.key(queue, "trace")
    fields = [part for pair in traces.items() for part in pair]
    return store.command(b"HSET", key, *fields, route=key)


def read_traces(store: Store, queue: str, ids: Sequence[str]) -> list[bytes | None]:
    """The contexts stored beside ``ids`` (None where there is none), in order."""
    key = store.key(queue, "trace")
    return list(store.call(store.command(b"HMGET", key, *ids, route=key)))
