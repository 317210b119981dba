"""OpenTelemetry tracing, optional (``pip install django-delayq[otel]``).

On when ``opentelemetry-api`` is importable and the project configured a tracer provider
(``trace.set_tracer_provider()``, or ``opentelemetry-instrument``) before the first job is
scheduled or the worker starts: decided once per process and cached (:func:`tracer`), so
with tracing off schedule() and the worker pay one global read, and nothing of
OpenTelemetry is imported when it is not installed.

The spans follow OpenTelemetry's messaging semantic conventions:

- ``send <queue>`` (PRODUCER) around schedule(): its context is the job's creation
  context, stored beside the job (the queue's ``trace`` hash, storage/traces.py; the
  record carries flag 't');
- ``receive <queue>`` (CLIENT) around a worker's claim round trip that took jobs;
- ``process <queue>`` (CONSUMER) around each attempt, **linked** to the creation context
  (not its child: a job may run hours after the request that scheduled it, runs once per
  attempt, and is claimed in batches; a link keeps the request's trace short and still
  leads from one to the other). The task's own spans are children of it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

SYSTEM = "django_delayq"  # messaging.system: not one of the well-known values

# None: not decided yet; False: off (not installed, or no provider); else the Tracer.
_tracer: Any = None


def tracer() -> Any:
    """The Tracer when tracing is on, else None (decided on the first call, then cached)."""
    found = _tracer
    if found is None:
        found = _decide()
    return found or None


def _decide() -> Any:
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError:
        _tracer = False
        return False
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        _tracer = False
    else:
        _tracer = trace.get_tracer("django_delayq", _version())
    return _tracer


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("django-delayq")
    except metadata.PackageNotFoundError:
        return None


def reset() -> None:
    """Decide again at the next call (a test that configures a provider, or removes one)."""
    global _tracer
    _tracer = None


def _attributes(queue: str, operation: str, job_id: str | None = None) -> dict[str, Any]:
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if job_id is not None:
        attributes["messaging.message.id"] = job_id
    return attributes


@contextlib.contextmanager
def sending(found: Any, queue: str, task: str) -> Iterator[tuple[Any, str]]:
    """The PRODUCER span of one schedule(): (the span, its context as stored beside the job:
    the propagator's carrier as JSON). An exception escaping is recorded on the span."""
    from opentelemetry import propagate, trace

    attributes = _attributes(queue, "send")
    attributes["django_delayq.task"] = task
    with found.start_as_current_span(
        f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield span, json.dumps(carrier, separators=(",", ":")) if carrier else ""


def receive_span(found: Any, queue: str, started: int, count: int) -> Any:
    """The CLIENT span of a claim round trip that took ``count`` jobs, begun at ``started``
    (time.time_ns()); the caller ends it."""
    from opentelemetry import trace

    attributes = _attributes(queue, "receive")
    attributes["messaging.batch.message_count"] = count
    return found.start_span(
        f"receive {queue}",
        kind=trace.SpanKind.CLIENT,
        attributes=attributes,
        start_time=started,
    )


# A W3C traceparent of version 00: trace id, span id, flags (lowercase hex).
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# The context sending() stores when the carrier holds only a traceparent (the common case),
# byte for byte: matched on the stored bytes without decoding the JSON (faster).
_STORED = re.compile(rb'\{"traceparent":"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})"\}')


def _link(stored: str | bytes | None) -> list[Any]:
    """The link to the creation context stored beside a job ([] for none or garbage)."""
    if not stored:
        return []
    from opentelemetry import trace

    raw = stored.encode() if isinstance(stored, str) else stored
    match = _STORED.fullmatch(raw)
    if match is not None:
        trace_id, span_id, flags = int(match[1], 16), int(match[2], 16), int(match[3], 16)
        context = trace.SpanContext(trace_id, span_id, True, trace.TraceFlags(flags))
    else:
        context = _extracted(raw)
        if context is None:
            return []
    return [trace.Link(context)] if context.is_valid else []


def _extracted(raw: bytes) -> Any:
    """The span context of a stored carrier other than a lone traceparent (None if garbage)."""
    from opentelemetry import propagate, trace

    try:
        carrier = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(carrier, dict):
        return None
    match = _TRACEPARENT.fullmatch(carrier.get("traceparent", "")) if len(carrier) == 1 else None
    if match is not None:  # another spelling of the common carrier (spaces, key order)
        trace_id, span_id, flags = int(match[1], 16), int(match[2], 16), int(match[3], 16)
        return trace.SpanContext(trace_id, span_id, True, trace.TraceFlags(flags))
    return trace.get_current_span(propagate.extract(carrier)).get_span_context()


class _Processing:
    """processing()'s context manager: the span started and made current on entry, made
    not current and ended on exit. A class and a plain attach/detach rather than
    ``start_as_current_span`` (two generator context managers deep): this runs once per
    attempt, and the layers cost a measurable share of a no-op job."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.token: Any = None

    def __enter__(self) -> Any:
        from opentelemetry import context, trace

        self.token = context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, *exc: object) -> None:
        from opentelemetry import context

        try:
            context.detach(self.token)
        finally:
            self.span.end()


def processing(
    found: Any, queue: str, job_id: str, attempt: int, stored: str | bytes | None
) -> _Processing:
    """The CONSUMER span of one attempt, linked to the span that scheduled the job (its
    context ``stored`` beside it), current while the task runs (a context manager giving
    the span). Give its end to :func:`processed`."""
    from opentelemetry import trace

    attributes = _attributes(queue, "process", job_id)
    attributes["django_delayq.attempt"] = attempt
    span = found.start_span(
        f"process {queue}",
        kind=trace.SpanKind.CONSUMER,
        links=_link(stored),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    return _Processing(span)


def processed(span: Any, task: str, ok: bool, error: Mapping[str, Any]) -> None:
    """The attempt's end on its span: the task; a failure's error as OpenTelemetry's
    ``exception`` event (what ``record_exception`` writes) and an ERROR status."""
    from opentelemetry.trace import Status, StatusCode

    if task:
        span.set_attribute("django_delayq.task", task)
    if ok:
        return
    kind, message = str(error.get("type", "")), str(error.get("message", ""))
    span.add_event(
        "exception",
        {
            "exception.type": kind,
            "exception.message": message,
            "exception.stacktrace": str(error.get("traceback", "")),
        },
    )
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))
