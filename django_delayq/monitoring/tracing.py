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
  leads from one to the other). The task's own spans are children of it. A root whatever
  is current, so a ParentBased sampler decides it with its root sampler: when that records
  none (ALWAYS_OFF, a ratio of 0), the claim reads no stored context (reads_links()), and
  with a ratio a context is parsed and linked only for a recorded span (sampling()).
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


# A W3C traceparent of version 00: trace id, span id, flags (lowercase hex).
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# The context sending() stores when the carrier holds only a traceparent (the common case),
# byte for byte: matched on the stored bytes without decoding the JSON (faster).
_STORED = re.compile(rb'\{"traceparent":"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})"\}')

# How a tracer's process spans are sampled (_Spans.sampling), from its sampler: every one
# recorded, none, each decided on its own new trace id (the SDK's TraceIdRatioBased), or
# a sampler this module does not know (which may look at the links: given at start).
ALWAYS, NEVER, EACH, UNKNOWN = "always", "never", "each", "unknown"
LINKS_CACHED = 256  # parsed contexts kept per tracer (a batch's jobs share one; retries)


def sampling(found: Any) -> str:
    """How ``found``'s process spans are sampled. They are roots (started in an empty
    context, processing()), so a ParentBased sampler decides with its root sampler, and no
    sampler of the SDK looks at the links: only UNKNOWN needs them before the span starts."""
    try:
        from opentelemetry.sdk.trace import sampling as sdk
    except ImportError:  # the API alone: its tracers make no spans, whoever configured them
        return UNKNOWN
    sampler = getattr(found, "sampler", None)
    if type(sampler) in (sdk.ParentBased, sdk.ParentBasedTraceIdRatio):  # not a subclass
        sampler = getattr(sampler, "_root", None)
    if sampler is sdk.ALWAYS_ON:
        return ALWAYS
    if sampler is sdk.ALWAYS_OFF:
        return NEVER
    if type(sampler) is sdk.TraceIdRatioBased:  # a subclass may decide otherwise
        return ALWAYS if sampler.rate >= 1 else NEVER if sampler.bound <= 0 else EACH
    return UNKNOWN


def reads_links(found: Any) -> bool:
    """Whether a claim reads its traced jobs' stored contexts: not when no process span of
    ``found`` can be recorded (the sampler drops every one, or the tracer is disabled)."""
    enabled = getattr(found, "_is_enabled", None)  # the SDK's tracer configurator (1.3x)
    if enabled is not None and not enabled():
        return False
    return _spans_of(found).sampling is not NEVER


class _Spans:
    """What the worker's spans of one tracer reuse, made on its first claim or attempt:
    OpenTelemetry's names (imported once, not per attempt), each queue's attributes, the
    links of the contexts seen last, and how the tracer samples."""

    def __init__(self, found: Any) -> None:
        from opentelemetry import context, trace

        self.tracer = found
        self.sampling = sampling(found)
        self.trace, self.Link = trace, trace.Link
        self.CONSUMER, self.CLIENT = trace.SpanKind.CONSUMER, trace.SpanKind.CLIENT
        self.root = context.Context()  # no parent: a process span starts a trace of its own
        self.attach, self.detach = context.attach, context.detach
        self.in_context = trace.set_span_in_context
        self.templates: dict[tuple[str, str], dict[str, Any]] = {}
        self.parsed: dict[str | bytes, tuple[Any, ...]] = {}

    def attributes(self, queue: str, operation: str) -> dict[str, Any]:
        """The operation's attributes on ``queue`` (shared: copy before changing)."""
        found = self.templates.get((queue, operation))
        if found is None:
            found = self.templates[queue, operation] = _attributes(queue, operation)
        return found

    def links(self, stored: str | bytes | None) -> tuple[Any, ...]:
        """The link to the creation context ``stored`` (() for none or garbage), parsed once
        for the last LINKS_CACHED contexts (runner threads share it: clear() is atomic)."""
        if not stored:
            return ()
        found = self.parsed.get(stored)
        if found is None:
            context = _context(stored, self.trace)
            found = (self.Link(context),) if context is not None and context.is_valid else ()
            if len(self.parsed) >= LINKS_CACHED:
                self.parsed.clear()
            self.parsed[stored] = found
        return found


_spans: _Spans | None = None


def _spans_of(found: Any) -> _Spans:
    global _spans
    spans = _spans
    if spans is None or spans.tracer is not found:
        spans = _spans = _Spans(found)
    return spans


def receive_span(found: Any, queue: str, started: int, count: int) -> Any:
    """The CLIENT span of a claim round trip that took ``count`` jobs, begun at ``started``
    (time.time_ns()); the caller ends it."""
    spans = _spans_of(found)
    attributes = spans.attributes(queue, "receive").copy()
    attributes["messaging.batch.message_count"] = count
    return found.start_span(
        f"receive {queue}", kind=spans.CLIENT, attributes=attributes, start_time=started
    )


def _context(stored: str | bytes, trace: Any = None) -> Any:
    """The span context stored beside a job (None for garbage); ``trace`` is
    ``opentelemetry.trace`` when the caller has it at hand."""
    if trace is None:
        from opentelemetry import trace

    raw = stored.encode() if isinstance(stored, str) else stored
    match = _STORED.fullmatch(raw)
    if match is None:
        return _extracted(raw)
    trace_id, span_id, flags = int(match[1], 16), int(match[2], 16), int(match[3], 16)
    return trace.SpanContext(trace_id, span_id, True, trace.TraceFlags(flags))


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

    __slots__ = ("span", "spans", "token")

    def __init__(self, span: Any, spans: _Spans) -> None:
        self.span, self.spans = span, spans
        self.token: Any = None

    def __enter__(self) -> Any:
        self.token = self.spans.attach(self.spans.in_context(self.span))
        return self.span

    def __exit__(self, *exc: object) -> None:
        try:
            self.spans.detach(self.token)
        finally:
            self.span.end()


def processing(
    found: Any, queue: str, job_id: str, attempt: int, stored: str | bytes | None
) -> _Processing:
    """The CONSUMER span of one attempt, linked to the span that scheduled the job (its
    context ``stored`` beside it), current while the task runs (a context manager giving
    the span). Give its end to :func:`processed`.

    A root span, whatever is current. A sampler that decides without the links (the SDK's)
    gets none: the span is started, and the stored context parsed and linked only if the
    span is recorded (a dropped span costs no parsing); any other sampler gets them."""
    spans = _spans_of(found)
    deferred = spans.sampling is EACH or spans.sampling is NEVER
    attributes = spans.attributes(queue, "process").copy()
    attributes["messaging.message.id"] = job_id
    attributes["django_delayq.attempt"] = attempt
    span = found.start_span(
        f"process {queue}",
        context=spans.root,
        kind=spans.CONSUMER,
        links=() if deferred else spans.links(stored),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    if deferred and stored and span.is_recording():
        for link in spans.links(stored):
            span.add_link(link.context)
    return _Processing(span, spans)


def processed(span: Any, task: str, ok: bool, error: Mapping[str, Any]) -> None:
    """The attempt's end on its span: the task; a failure's error as OpenTelemetry's
    ``exception`` event (what ``record_exception`` writes) and an ERROR status."""
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
    from opentelemetry.trace import Status, StatusCode  # a failure: not each attempt

    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))
