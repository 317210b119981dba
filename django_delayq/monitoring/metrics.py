"""The Prometheus metrics endpoint (opt-in: include ``django_delayq.urls``).

Per queue, read from Redis at each scrape (:func:`django_delayq.monitoring.health.report`), so every
web process answers the same:

gauges   ``delayq_pending_jobs``, ``delayq_due_jobs``, ``delayq_running_jobs``,
         ``delayq_dead_jobs``, ``delayq_finished_jobs`` (kept, see FINISHED_MAX_AGE),
         ``delayq_lag_seconds``, ``delayq_live_workers``, ``delayq_queue_paused`` (1 while
         ``django_delayq.pause`` holds the queue)
counters ``delayq_jobs_done_total``, ``delayq_attempts_failed_total``,
         ``delayq_attempts_retried_total``, ``delayq_jobs_dead_lettered_total``,
         ``delayq_jobs_recovered_total``, ``delayq_jobs_expired_total`` (not started before
         their ``expires``, never run), ``delayq_jobs_rescheduled_total`` (pending jobs
         moved by ``reschedule()`` or Postpone), ``delayq_jobs_limited_total`` (kept in Redis by the
         scripts since the queue began; the last counts hold-backs, not jobs: its name is
         kept for the dashboards that use it)

each labelled ``queue``; and ``delayq_batches`` (gauge, labelled ``state``: ``open``, the
batches a worker still looks after, and ``done``, the other batches of the list of the
last 30 days: two ZCARDs whatever the number of batches). Rendered by ``prometheus_client``
(the ``prometheus`` extra) from a collector registered in a registry of its own per
request, never in the global one, in the format the scraper asks for (Prometheus text or
OpenMetrics).

Who may read it: a request with ``Authorization: Bearer <DELAYQ["METRICS_TOKEN"]>``, or a
logged-in user with the ``django_delayq.view_job`` permission; otherwise 401 (no or a wrong
token) or 403 (a user without the permission). 503 when Redis cannot be read.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConfigurationError, DelayQError
from django_delayq.monitoring import health
from django_delayq.recurring.status import ScheduleCollector, safe_report
from django_delayq.storage.connection import get_store

try:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.exposition import choose_encoder
except ImportError as exc:  # pragma: no cover - the extra is in the test extra
    raise ConfigurationError(
        "django_delayq.urls serves Prometheus metrics with prometheus_client, which is not "
        "installed: pip install 'django-delayq[prometheus]'"
    ) from exc

logger = logging.getLogger("django_delayq.metrics")

PERMISSION = "django_delayq.view_job"
REALM = 'Bearer realm="django-delayq metrics"'

GAUGES = (
    ("delayq_pending_jobs", "Jobs in the pending set, due or not.", "pending"),
    ("delayq_due_jobs", "Pending jobs whose due time has passed (the backlog).", "due"),
    ("delayq_running_jobs", "Jobs claimed by a worker (in progress).", "running"),
    ("delayq_dead_jobs", "Jobs in the dead-letter set.", "dead"),
    (
        "delayq_finished_jobs",
        "Succeeded and cancelled jobs kept (DELAYQ FINISHED_MAX_AGE, FINISHED_MAX_COUNT).",
        "finished",
    ),
    (
        "delayq_lag_seconds",
        "Seconds the oldest due job has waited (0: none is due, or the queue is paused).",
        "scaling_lag",
    ),
    ("delayq_live_workers", "Live workers serving the queue.", "workers"),
    ("delayq_queue_paused", "1 while the queue is paused (nothing is claimed), else 0.", "paused"),
)
COUNTERS = (
    ("delayq_jobs_done", "Jobs that ran successfully.", "done"),
    ("delayq_attempts_failed", "Attempts that raised, retried or not.", "failed"),
    ("delayq_attempts_retried", "Failed attempts scheduled to run again.", "retried"),
    ("delayq_jobs_dead_lettered", "Jobs moved to the dead-letter set.", "dead"),
    (
        "delayq_jobs_recovered",
        "Jobs taken back from workers that stopped heartbeating.",
        "recovered",
    ),
    (
        "delayq_jobs_expired",
        "Jobs not started before their expiry (schedule(expires=...)): ended, never run.",
        "expired",
    ),
    (
        "delayq_jobs_rescheduled",
        "Pending jobs whose due time was moved (reschedule(), the admin's Postpone).",
        "rescheduled",
    ),
    (
        "delayq_jobs_limited",
        "Hold-backs, not jobs: each time a claim held a due job back for its task's rate or "
        "concurrency limit (one job may be held back many times).",
        "limited",
    ),
)


class QueueCollector:
    """A prometheus_client collector of one health report."""

    def __init__(self, report: health.Report) -> None:
        self.report = report

    def collect(self) -> Iterator[Any]:
        for name, documentation, attribute in GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=["queue"])
            for q in self.report.queues:
                gauge.add_metric([q.queue], float(getattr(q, attribute)))
            yield gauge
        for name, documentation, total in COUNTERS:
            counter = CounterMetricFamily(name, documentation, labels=["queue"])
            for q in self.report.queues:
                counter.add_metric([q.queue], float(q.totals.get(total, 0)))
            yield counter


class BatchCollector:
    """``delayq_batches`` by state, from (batches listed, batches open): two ZCARDs."""

    def __init__(self, listed: int, opened: int) -> None:
        self.listed, self.opened = listed, opened

    def collect(self) -> Iterator[Any]:
        gauge = GaugeMetricFamily(
            "delayq_batches",
            "Batches (django_delayq.batch()) by state: open (a member not ended, or a decided "
            "callback not stored yet), done (the other batches of the last 30 days).",
            labels=["state"],
        )
        gauge.add_metric(["open"], float(self.opened))
        # An open batch may outlive its line in the list (30 days): never below 0.
        gauge.add_metric(["done"], float(max(self.listed - self.opened, 0)))
        yield gauge


def _denied(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics, else the 401 or 403 to answer."""
    token = delayq_settings.METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        if isinstance(token, str) and token and hmac.compare_digest(given.encode(), token.encode()):
            return None
        response = HttpResponse("wrong bearer token\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = REALM
        return response
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        if user.has_perm(PERMISSION):
            return None
        return HttpResponse(
            f"needs the {PERMISSION} permission\n", status=403, content_type="text/plain"
        )
    response = HttpResponse(
        "log in as a user with the view_job permission, or send the bearer token\n",
        status=401,
        content_type="text/plain",
    )
    response["WWW-Authenticate"] = REALM
    return response


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    denied = _denied(request)
    if denied is not None:
        return denied
    try:
        report = health.report(get_store(), totals=True)
        batches = get_store().batches.counts()
    except DelayQError as exc:
        logger.warning("metrics: Redis cannot be read: %s", exc)
        return HttpResponse(f"Redis cannot be read: {exc}\n", status=503, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(report))
    registry.register(BatchCollector(*batches))
    registry.register(ScheduleCollector(safe_report(get_store())))  # recurring schedules
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)
