"""The worker's spans when OpenTelemetry tracing is on (monitoring/tracing.py): a claim's
``receive`` span, which reads the contexts stored beside the traced jobs it took (one HMGET,
storage/traces.py), and each attempt's ``process`` span, linked to the span that scheduled
the job. Nothing here runs while tracing is off."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django_delayq.exceptions import DelayQError
from django_delayq.jobs.record import traced as has_trace
from django_delayq.monitoring import tracing
from django_delayq.storage.store import Store
from django_delayq.storage.traces import read_traces
from django_delayq.worker.execution import Attempt, Outcome

logger = logging.getLogger("django_delayq.worker")

LATE = "ran past its timeout: its result is discarded"  # a late outcome's error


@contextlib.contextmanager
def traced(tracer: Any, attempt: Attempt) -> Iterator[Callable[[Outcome], Outcome]]:
    """The attempt's CONSUMER span, current inside; call what it gives with the outcome."""
    with tracing.processing(
        tracer, attempt.queue, attempt.id, attempt.number, attempt.trace
    ) as span:

        def ended(outcome: Outcome) -> Outcome:
            task = attempt.fields.task if attempt.fields is not None else ""
            error = outcome.error or {"type": "TimeoutError", "message": LATE}
            tracing.processed(span, task, outcome.ok and not outcome.late, error)
            return outcome

        yield ended


def read_contexts(store: Store, queue: str, attempts: Sequence[Attempt]) -> None:
    """Set each traced attempt's ``trace`` (record flag 't'): one HMGET for all of them.
    A failed read costs the links, never the jobs (logged)."""
    flagged = [a for a in attempts if has_trace(a.record)]
    if not flagged:
        return
    try:
        found = read_traces(store, queue, [a.id for a in flagged])
    except DelayQError as exc:
        logger.warning("could not read the trace contexts of %d jobs: %s", len(flagged), exc)
        return
    for attempt, context in zip(flagged, found, strict=True):
        attempt.trace = context


def received(
    tracer: Any, store: Store, queue: str, started: int, attempts: Sequence[Attempt]
) -> None:
    """A claim round trip that took ``attempts`` (begun at ``started``, time.time_ns()):
    its CLIENT span ``receive <queue>``, and the contexts of the traced jobs read. A claim
    that took nothing has no span (a worker polls)."""
    span = tracing.receive_span(tracer, queue, started, len(attempts))
    try:
        read_contexts(store, queue, attempts)
    finally:
        span.end()
