"""OpenTelemetry tracing's worker side under samplers (monitoring/tracing.py, worker/traced.py):
a claim reads its traced jobs' stored contexts only when an attempt span may be recorded,
an attempt span the sampler drops parses no context, a recorded one is still linked to the
span of schedule(), and a sampler django-delayq does not know gets the links when the span
starts. Over fakeredis and real Redis (the store fixture).

As in test_tracing.py, the SDK's TracerProvider is given to tracing.py directly (its cached
tracer), never installed as the process's global provider."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)

from django_delayq import schedule, schedule_many
from django_delayq.monitoring import tracing
from tests.test_tracing import RAN, ok, run_burst


def _provider(monkeypatch, sampler) -> InMemorySpanExporter:
    """Tracing on with ``sampler``; the exporter of what it records."""
    provider = TracerProvider(sampler=sampler)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("tests"))
    RAN.clear()
    return exporter


@pytest.fixture
def reads(monkeypatch):
    """The HMGETs of stored contexts the worker sends (the ids of each)."""
    calls: list[list[str]] = []
    from django_delayq.storage.traces import TraceStore

    real = TraceStore.read

    def counted(self, queue, ids):
        calls.append(list(ids))
        return real(self, queue, ids)

    monkeypatch.setattr(TraceStore, "read", counted)
    return calls


@pytest.fixture
def parsed(monkeypatch):
    """The stored contexts the worker parses."""
    calls: list[bytes] = []
    real = tracing._context

    def counted(stored, *args):
        calls.append(stored)
        return real(stored, *args)

    monkeypatch.setattr(tracing, "_context", counted)
    return calls


def _stored(store, job_id: str) -> bytes:
    return store.client.hget(store.key("default", "trace"), job_id)


_parse = tracing._context  # not the counted one of the fixture


def _span_id(stored: bytes) -> int:
    return _parse(stored).span_id


def _processes(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == "process default"]


class Custom(Sampler):
    """A sampler of the project's own: records a span that has links."""

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None):
        return SamplingResult(Decision.RECORD_AND_SAMPLE if links else Decision.DROP, attributes)

    def get_description(self) -> str:
        return "Custom"


class Ratio(TraceIdRatioBased):
    """A subclass: it may decide otherwise, so it is not trusted to ignore the links."""


@pytest.mark.parametrize(
    ("sampler", "expected"),
    [
        (ALWAYS_ON, tracing.ALWAYS),
        (DEFAULT_ON, tracing.ALWAYS),  # the SDK's default: ParentBased(ALWAYS_ON)
        (ALWAYS_OFF, tracing.NEVER),
        (DEFAULT_OFF, tracing.NEVER),
        (TraceIdRatioBased(0), tracing.NEVER),
        (TraceIdRatioBased(1), tracing.ALWAYS),
        (TraceIdRatioBased(0.25), tracing.EACH),
        (ParentBasedTraceIdRatio(0.25), tracing.EACH),
        (ParentBased(TraceIdRatioBased(0.25)), tracing.EACH),
        (Custom(), tracing.UNKNOWN),
        (ParentBased(Custom()), tracing.UNKNOWN),
        (Ratio(0.25), tracing.UNKNOWN),
    ],
)
def test_how_a_tracer_s_process_spans_are_sampled(sampler, expected):
    tracer = TracerProvider(sampler=sampler).get_tracer("tests")
    assert tracing.sampling(tracer) == expected
    assert tracing.reads_links(tracer) is (expected != tracing.NEVER)


def test_a_disabled_tracer_reads_no_context():
    class Disabled:
        sampler = ALWAYS_ON

        def _is_enabled(self) -> bool:
            return False

    assert not tracing.reads_links(Disabled())


def test_a_sampler_that_drops_every_span_reads_and_parses_nothing(
    store, monkeypatch, reads, parsed
):
    exporter = _provider(monkeypatch, DEFAULT_OFF)
    jobs = [schedule(ok, "n1"), *schedule_many(ok, [("n2",), ("n3",)])]
    for job in jobs:  # a dropped send span still has a context: stored beside the job
        assert _stored(store, job.id) is not None
    run_burst()
    assert sorted(RAN) == ["n1", "n2", "n3"]
    assert reads == [] and parsed == []  # no HMGET, nothing parsed
    assert exporter.get_finished_spans() == ()
    assert store.client.hlen(store.key("default", "trace")) == 0  # the acks deleted them


def test_a_ratio_sampler_links_each_recorded_attempt_and_parses_only_those(
    store, monkeypatch, reads, parsed
):
    exporter = _provider(monkeypatch, ParentBasedTraceIdRatio(0.5))
    jobs = [schedule(ok, f"r{i}") for i in range(24)]
    contexts = {job.id: _stored(store, job.id) for job in jobs}
    parsed.clear()
    run_burst()
    assert len(RAN) == 24
    assert sorted(i for ids in reads for i in ids) == sorted(contexts)  # all read: HMGET per claim
    recorded = _processes(exporter)
    assert recorded  # 24 coin tosses: none recorded once in 16 million runs
    for span in recorded:
        stored = contexts[span.attributes["messaging.message.id"]]
        assert [link.context.span_id for link in span.links] == [_span_id(stored)]
    # The dropped attempts' contexts were never parsed: one parse per recorded span.
    assert sorted(parsed) == sorted(
        contexts[s.attributes["messaging.message.id"]] for s in recorded
    )


def test_a_sampler_of_the_project_s_own_gets_the_links_at_the_start(store, monkeypatch, reads):
    exporter = _provider(monkeypatch, ParentBased(Custom()))
    job = schedule(ok, "c")  # its send span has no link: dropped, its context still stored
    stored = _stored(store, job.id)
    run_burst()
    assert RAN == ["c"] and reads == [[job.id]]
    (process,) = _processes(exporter)  # recorded: the sampler saw its link
    assert [link.context.span_id for link in process.links] == [_span_id(stored)]


def test_the_attempt_span_is_a_root_whatever_span_is_current(monkeypatch):
    exporter = _provider(monkeypatch, DEFAULT_ON)
    around = tracing._tracer.start_as_current_span("around")
    with around, tracing.processing(tracing._tracer, "default", "j1", 1, None) as span:
        assert trace.get_current_span() is span
    (process,) = _processes(exporter)
    assert process.parent is None


def test_parsed_contexts_are_kept_up_to_a_bound(monkeypatch, parsed):
    _provider(monkeypatch, DEFAULT_ON)
    spans = tracing._spans_of(tracing._tracer)
    first = b'{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    links = spans.links(first)
    assert spans.links(first) is links and len(parsed) == 1  # parsed once
    for i in range(tracing.LINKS_CACHED):
        spans.links(b'{"traceparent":"00-%032x-%016x-01"}' % (i + 1, i + 1))
    assert len(spans.parsed) <= tracing.LINKS_CACHED
    before = len(parsed)
    again = spans.links(first)  # parsed again once dropped, the same link
    assert again is not links and again[0].context == links[0].context
    assert links[0].context.span_id == 0xB7AD6B7169203331 and len(parsed) == before + 1
    assert spans.links(b"garbage") == () and spans.links(None) == ()
