"""OpenTelemetry tracing (monitoring/tracing.py, worker/traced.py, storage/traces.py): a job
scheduled inside a span carries that span's context; a real burst worker runs each attempt in
a CONSUMER span linked to the PRODUCER span of schedule(), with the messaging attributes, and
records a failure; with no tracer provider nothing is stored beside the job and no span is
made. Over fakeredis and real Redis (the store fixture).

The SDK's TracerProvider is given to tracing.py directly (its cached tracer), never installed
as the process's global provider: the other tests of this process stay untraced."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from django_delayq import batch, get_job, schedule, schedule_many, task
from django_delayq.jobs.record import traced
from django_delayq.monitoring import tracing
from django_delayq.worker.dispatch import Worker
from tests.test_async_api import astore, run  # noqa: F401 (a fixture)

RAN: list[str] = []


@task(name="tests.tracing.ok", max_retries=0)
def ok(tag: str) -> None:
    RAN.append(tag)


@task(name="tests.tracing.flaky", max_retries=1, retry_backoff=0)
def flaky(tag: str) -> None:
    RAN.append(tag)
    if RAN.count(tag) == 1:
        raise ValueError(f"first attempt of {tag} fails")


@task(name="tests.tracing.broken", max_retries=0)
def broken() -> None:
    raise RuntimeError("always broken")


@task(name="tests.tracing.async_ok", max_retries=0)
async def async_ok(tag: str) -> None:
    RAN.append(tag)


@pytest.fixture
def spans(monkeypatch):
    """An SDK tracer whose spans land in memory, used by django-delayq as if configured."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("tests"))
    RAN.clear()
    yield provider.get_tracer("tests.caller"), exporter
    RAN.clear()


def run_burst(**kwargs) -> None:
    assert Worker(["default"], burst=True, **kwargs).run() == 0


def _by_name(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _stored(store, job_id: str) -> bytes | None:
    return store.client.hget(store.key("default", "trace"), job_id)


def test_the_attempt_span_is_linked_to_the_span_of_schedule(store, spans):
    caller, exporter = spans
    with caller.start_as_current_span("request") as request:
        job = schedule(ok, "a")
    (send,) = _by_name(exporter, "send default")
    assert (
        send.kind is SpanKind.PRODUCER and send.parent.span_id == request.get_span_context().span_id
    )
    assert send.attributes["messaging.message.id"] == job.id
    assert send.attributes["messaging.system"] == "django_delayq"
    assert _stored(store, job.id) is not None  # beside the job, flag 't' on its record
    assert traced(store.client.hget(store.key("default", "jobs"), job.id))

    run_burst()
    assert RAN == ["a"]
    (process,) = _by_name(exporter, "process default")
    assert process.kind is SpanKind.CONSUMER
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.links[0].context.trace_id == request.get_span_context().trace_id
    assert process.context.trace_id != send.context.trace_id  # a link, not a child
    attributes = dict(process.attributes)
    assert attributes == {
        "messaging.system": "django_delayq",
        "messaging.destination.name": "default",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": job.id,
        "django_delayq.attempt": 1,
        "django_delayq.task": ok.name,
    }
    assert process.status.status_code is StatusCode.UNSET
    (receive,) = _by_name(exporter, "receive default")
    assert receive.kind is SpanKind.CLIENT
    assert receive.attributes["messaging.batch.message_count"] == 1
    assert _stored(store, job.id) is None  # the ack deleted it with the job


def test_each_failed_attempt_records_its_error_and_every_attempt_is_linked(store, spans):
    caller, exporter = spans
    with caller.start_as_current_span("request"):
        job = schedule(flaky, "f")
        dead = schedule(broken)
    sends = {s.attributes["messaging.message.id"]: s for s in _by_name(exporter, "send default")}
    run_burst()
    run_burst()  # the retry
    processes = [
        p
        for p in _by_name(exporter, "process default")
        if p.attributes["messaging.message.id"] == job.id
    ]
    assert [p.attributes["django_delayq.attempt"] for p in processes] == [1, 2]
    for p in processes:
        assert [link.context.span_id for link in p.links] == [sends[job.id].context.span_id]
    first, second = processes
    assert first.status.status_code is StatusCode.ERROR
    (event,) = first.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "builtins.ValueError"
    assert event.attributes["exception.message"] == "first attempt of f fails"
    assert "Traceback" in event.attributes["exception.stacktrace"]
    assert second.status.status_code is StatusCode.UNSET and not second.events
    assert _stored(store, job.id) is None
    # A dead job keeps its context (a requeue links to it too) until it is deleted.
    assert get_job(dead.id).status == "dead"
    assert _stored(store, dead.id) is not None
    assert store.delete_dead("default", [dead.id]) == [True]
    assert _stored(store, dead.id) is None


def test_schedule_many_and_a_batch_carry_the_context(store, spans):
    caller, exporter = spans
    with caller.start_as_current_span("request"):
        jobs = schedule_many(ok, [("m1",), ("m2",), {"args": ["m3"], "key": "k3"}])
        with batch() as members:
            member = schedule(ok, "b1")
    assert members.id
    (many, one) = _by_name(exporter, "send default")
    assert many.attributes["messaging.batch.message_count"] == 3
    for job in jobs:
        assert _stored(store, job.id) is not None
    run_burst()
    assert sorted(RAN) == ["b1", "m1", "m2", "m3"]
    links = {
        p.attributes["messaging.message.id"]: [link.context.span_id for link in p.links]
        for p in _by_name(exporter, "process default")
    }
    assert links == {
        **{job.id: [many.context.span_id] for job in jobs},
        member.id: [one.context.span_id],
    }
    assert store.client.hlen(store.key("default", "trace")) == 0


def test_an_async_task_on_the_event_loop_runs_in_its_linked_span(store, spans):
    caller, exporter = spans
    with caller.start_as_current_span("request"):
        job = async_ok.schedule("x")
    run_burst(async_concurrency=5)
    assert RAN == ["x"]
    (send,) = _by_name(exporter, "send default")
    (process,) = _by_name(exporter, "process default")
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.attributes["messaging.message.id"] == job.id


@task(name="tests.tracing.nested", max_retries=0)
def nested() -> None:
    with tracing.tracer().start_as_current_span("inside"):
        RAN.append("nested")


def test_aschedule_carries_the_context(astore, spans):  # noqa: F811 (the fixture)
    caller, exporter = spans

    async def in_a_view():
        with caller.start_as_current_span("request"):
            return await ok.aschedule("as")

    job = run(in_a_view)
    assert _stored(astore, job.id) is not None
    run_burst()
    assert RAN == ["as"]
    (send,) = _by_name(exporter, "send default")
    (process,) = _by_name(exporter, "process default")
    assert send.attributes["messaging.message.id"] == job.id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]


def test_the_task_s_own_spans_are_children_of_the_attempt_span(store, spans):
    _, exporter = spans
    schedule(nested)
    run_burst()
    (send,) = _by_name(exporter, "send default")  # a root span: no caller's span around it
    (process,) = _by_name(exporter, "process default")
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    (inside,) = _by_name(exporter, "inside")
    assert inside.parent.span_id == process.context.span_id


def test_without_a_provider_nothing_is_stored_and_no_span_is_made(store, monkeypatch):
    monkeypatch.setattr(tracing, "_tracer", None)  # decided again: no provider is configured
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    RAN.clear()
    job = schedule(ok, "plain")
    many = schedule_many(ok, [("p2",)])
    assert tracing._tracer is False  # decided once, cached
    assert not store.client.exists(store.key("default", "trace"))
    for one in (job, *many):
        assert not traced(store.client.hget(store.key("default", "jobs"), one.id))
    run_burst()
    assert sorted(RAN) == ["p2", "plain"]
    RAN.clear()


def test_the_decision_follows_the_global_provider(monkeypatch):
    monkeypatch.setattr(tracing, "_tracer", None)
    assert tracing.tracer() is None  # the default proxy: off
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert tracing.tracer() is None  # cached until reset()
    tracing.reset()
    assert tracing.tracer() is not None
    tracing.reset()


def test_a_garbage_context_costs_the_link_not_the_job(store, spans):
    _, exporter = spans
    job = schedule(ok, "g")
    store.client.hset(store.key("default", "trace"), job.id, b"not json")
    run_burst()
    assert RAN == ["g"]
    (process,) = _by_name(exporter, "process default")
    assert process.links == ()


def test_a_replace_by_key_takes_the_new_context_or_drops_the_old(store, spans, monkeypatch):
    caller, _ = spans
    with caller.start_as_current_span("first"):
        first = schedule(ok, "r1", key="r", delay=60)
    stored = _stored(store, first.id)
    with caller.start_as_current_span("second"):
        second = schedule(ok, "r2", key="r", delay=60)
    assert second.id == first.id and second.outcome == "replaced"
    assert _stored(store, first.id) not in (None, stored)  # the replacing call's context
    monkeypatch.setattr(tracing, "_tracer", False)  # tracing off: an untraced replace
    third = schedule(ok, "r3", key="r", delay=60)
    assert third.outcome == "replaced" and _stored(store, first.id) is None
    assert not traced(store.client.hget(store.key("default", "jobs"), first.id))
    assert store.cancel("default", job_id=first.id) is not None


def test_a_cancelled_job_leaves_no_context(store, spans):
    job = schedule(ok, "c", delay=60)
    assert _stored(store, job.id) is not None
    assert store.cancel("default", job_id=job.id) is not None
    assert not store.client.exists(store.key("default", "trace"))


def test_a_context_with_a_tracestate_goes_through_the_propagators(store, spans):
    _, exporter = spans
    job = schedule(ok, "s")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    store.client.hset(
        store.key("default", "trace"),
        job.id,
        f'{{"traceparent":"{parent}","tracestate":"vendor=1"}}',
    )
    run_burst()
    (process,) = _by_name(exporter, "process default")
    (link,) = process.links
    assert link.context.span_id == 0xB7AD6B7169203331 and link.context.is_remote
    assert link.context.trace_state.get("vendor") == "1"


def test_one_claim_links_each_job_to_its_own_span_and_an_untraced_one_to_none(
    store, spans, monkeypatch
):
    # The contexts are read once per claim (one HMGET for the traced jobs it took; the first claim
    # may take only one job, so this does not prove one claim took all three): each
    # attempt still gets its own job's context, a retry too, and a job scheduled while
    # tracing was off (no flag 't') none, in the same claim.
    caller, exporter = spans
    tracer = tracing._tracer
    with caller.start_as_current_span("first"):
        first = schedule(flaky, "m1")
    with caller.start_as_current_span("second"):
        second = schedule(ok, "m2")
    monkeypatch.setattr(tracing, "_tracer", False)
    plain = schedule(ok, "m3")
    monkeypatch.setattr(tracing, "_tracer", tracer)
    sends = {s.attributes["messaging.message.id"]: s for s in _by_name(exporter, "send default")}
    assert set(sends) == {first.id, second.id}
    run_burst()  # the retry (no backoff) is claimed again by the same burst
    run_burst()
    receives = _by_name(exporter, "receive default")
    assert sum(r.attributes["messaging.batch.message_count"] for r in receives) == 4
    processes = _by_name(exporter, "process default")
    links = [
        (p.attributes["messaging.message.id"], [link.context.span_id for link in p.links])
        for p in processes
    ]
    assert sorted(links) == sorted(
        [
            (first.id, [sends[first.id].context.span_id]),
            (first.id, [sends[first.id].context.span_id]),  # the retry
            (second.id, [sends[second.id].context.span_id]),
            (plain.id, []),
        ]
    )
    assert sorted(RAN) == ["m1", "m1", "m2", "m3"]


def test_a_context_spelled_otherwise_still_links(store, spans):
    # Not the bytes sending() writes (spaces, flags 00): decoded as JSON, same link.
    _, exporter = spans
    job = schedule(ok, "o")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    store.client.hset(store.key("default", "trace"), job.id, f'{{ "traceparent": "{parent}" }}')
    run_burst()
    (process,) = _by_name(exporter, "process default")
    (link,) = process.links
    assert link.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert link.context.span_id == 0xB7AD6B7169203331 and not link.context.trace_flags.sampled


def test_the_attempt_span_ends_and_stops_being_current_when_the_block_raises(spans):
    _, exporter = spans
    before = trace.get_current_span()
    attempt = tracing.processing(tracing._tracer, "q", "j1", 1, None)
    with pytest.raises(KeyError), attempt as span:
        assert trace.get_current_span() is span
        raise KeyError("a bug around the task")
    assert trace.get_current_span() is before
    (ended,) = _by_name(exporter, "process q")
    assert ended.end_time is not None and ended.links == ()


@pytest.mark.django_db(transaction=True)
def test_a_job_that_waited_in_the_database_has_a_send_span_and_no_link(store, spans):
    """docs/howto/monitoring.rst: every scheduled job gets its send span (with its id); an
    on_commit job inside a transaction and a job beyond HORIZON wait as rows, which keep no
    context, so their attempts' spans have no link; on_commit outside a transaction stores
    the job in Redis at once, and its attempt is linked."""
    from django.db import transaction

    from tests.conftest import more_settings

    caller, exporter = spans
    with caller.start_as_current_span("request"):
        with transaction.atomic():
            committed = schedule(ok, "commit", on_commit=True)
        at_once = schedule(ok, "at once", on_commit=True)
        with more_settings(store, HORIZON=60):
            far = schedule(ok, "far", delay=120)
    assert (committed.waits_in, at_once.waits_in, far.waits_in) == ("database", "redis", "database")
    sends = {s.attributes["messaging.message.id"]: s for s in _by_name(exporter, "send default")}
    assert set(sends) == {committed.id, at_once.id, far.id}
    run_burst()
    links = {
        p.attributes["messaging.message.id"]: [link.context.span_id for link in p.links]
        for p in _by_name(exporter, "process default")
    }
    assert links == {committed.id: [], at_once.id: [sends[at_once.id].context.span_id]}
