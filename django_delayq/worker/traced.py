"""The worker's spans when OpenTelemetry tracing is on (monitoring/tracing.py): a claim's
``receive`` span, which reads the contexts stored beside the traced jobs it took (one HMGET,
storage/traces.py), and each attempt's ``process`` span, linked to the span that scheduled
the job. Nothing here runs while tracing is off."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django_delayq.exceptions import DelayQError
from django_delayq.jobs.record import traced as has_trace
from django_delayq.monitoring import tracing
from django_delayq.storage.store import Store
from django_delayq.worker.execution import Attempt, Outcome

logger = logging.getLogger("django_delayq.worker")

LATE = "ran past its timeout: its result is discarded"  # a late outcome's error


class traced:  # lower case: used as the function it was, ``with traced(tracer, attempt)``
    """The attempt's CONSUMER span, current inside; call what it gives with the outcome.
    A class rather than a generator context manager: once per attempt, it is cheaper."""

    __slots__ = ("attempt", "processing")

    def __init__(self, tracer: Any, attempt: Attempt) -> None:
        self.attempt = attempt
        self.processing = tracing.processing(
            tracer, attempt.queue, attempt.id, attempt.number, attempt.trace
        )

    def __enter__(self) -> Callable[[Outcome], Outcome]:
        self.processing.__enter__()
        return self.ended

    def __exit__(self, *exc: object) -> None:
        self.processing.__exit__(*exc)

    def ended(self, outcome: Outcome) -> Outcome:
        attempt = self.attempt
        task = attempt.fields.task if attempt.fields is not None else ""
        error = outcome.error or {"type": "TimeoutError", "message": LATE}
        tracing.processed(self.processing.span, task, outcome.ok and not outcome.late, error)
        return outcome


def read_contexts(store: Store, queue: str, attempts: Sequence[Attempt]) -> None:
    """Set each traced attempt's ``trace`` (record flag 't'): one HMGET for all of them.
    A failed read costs the links, never the jobs (logged)."""
    flagged = [a for a in attempts if has_trace(a.record)]
    if not flagged:
        return
    try:
        found = store.traces.read(queue, [a.id for a in flagged])
    except DelayQError as exc:
        logger.warning("could not read the trace contexts of %d jobs: %s", len(flagged), exc)
        return
    for attempt, context in zip(flagged, found, strict=True):
        attempt.trace = context


def received(
    tracer: Any, store: Store, queue: str, started: int, attempts: Sequence[Attempt]
) -> None:
    """A claim round trip that took ``attempts`` (begun at ``started``, time.time_ns()):
    its CLIENT span ``receive <queue>``, and the contexts of the traced jobs read, unless
    the tracer's sampler records no attempt span (tracing.reads_links: ALWAYS_OFF, a ratio
    of 0). A claim that took nothing has no span (a worker polls)."""
    span = tracing.receive_span(tracer, queue, started, len(attempts))
    try:
        if tracing.reads_links(tracer):
            read_contexts(store, queue, attempts)
    finally:
        span.end()
