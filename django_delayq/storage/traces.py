"""The trace context stored beside a job (OpenTelemetry, monitoring/tracing.py): the queue's
``trace`` hash, job id -> the context of the span that scheduled it, for jobs whose record
has flag 't'. schedule.lua writes it with the job (ARGV[13]); a schedule_many() batch writes
it with one HSET sent just before its schedule_many.lua call, in the same round trip;
ack.lua, and every script that forgets a job, delete it. The worker reads it only when
tracing is on, one HMGET per claim that took traced jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from django_delayq.storage.moved import moved_getattr
from django_delayq.storage.ops import Op

if TYPE_CHECKING:
    from django_delayq.storage.calls import Calls


class TraceStore:
    """A Store's trace contexts (``store.traces``): the queue's ``trace`` hash."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def write_op(self, queue: str, traces: Mapping[str, str]) -> Op:
        """HSET the contexts of jobs about to be stored by schedule_many.lua (id -> context)."""
        key = self._store.key(queue, "trace")
        fields = [part for pair in traces.items() for part in pair]
        return self._store.command(b"HSET", key, *fields, route=key)

    def read(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        """The contexts stored beside ``ids`` (None where there is none), in order."""
        key = self._store.key(queue, "trace")
        return list(self._store.call(self._store.command(b"HMGET", key, *ids, route=key)))


# The 0.7 free functions, which took a store first: store.traces.<method>(...) since 0.8.
_MOVED = {"write_traces_op": "write_op", "read_traces": "read"}
__getattr__ = moved_getattr(__name__, "traces", _MOVED)
