"""The parts of a :class:`~django_delayq.worker.dispatch.Worker`, made when it is: what
claims, starts, runs and reports attempts, and its background duties (dispatch.py's module
docstring says which thread does what)."""

from __future__ import annotations

from typing import Any

from django_delayq.conf import delayq_settings
from django_delayq.outbox.relay import Relay
from django_delayq.worker import aio, maintenance
from django_delayq.worker.aio import Loop
from django_delayq.worker.delivery import Results
from django_delayq.worker.exchange import Exchange
from django_delayq.worker.execution import Executor
from django_delayq.worker.holdings import Holdings
from django_delayq.worker.maintenance import Heartbeat, Recovery
from django_delayq.worker.prefetch import Prefetch
from django_delayq.worker.presence import Presence
from django_delayq.worker.runners import Runners
from django_delayq.worker.starts import Starts


def make_dispatch_parts(worker: Any) -> None:
    """What claims, starts, runs and reports attempts."""
    worker.executor = Executor(
        worker.name,
        default_max_retries=worker.default_max_retries,
        retry_backoff=float(delayq_settings.RETRY_BACKOFF),
        retry_backoff_max=float(delayq_settings.RETRY_BACKOFF_MAX),
    )
    worker.holdings = Holdings(worker.concurrency, worker.async_concurrency, aio.classify)
    worker.prefetch = Prefetch(worker.holdings, aio.loop_share)
    worker.marker = worker.store.marker()
    worker.starts = Starts(worker.store, worker.marker, worker.lease, worker.default_max_retries)
    worker.results = Results(
        worker.store,
        worker.executor,
        worker.holdings,
        worker.dead_options,
        worker.default_max_retries,
        worker._now,
    )
    shared = (worker.holdings, worker.prefetch, worker.starts, worker.executor)
    events = {"wake": worker._wake, "stopped": worker._stopped}
    worker.runners = Runners(*shared, **events, stopping=lambda: worker._stopping)
    worker.loop = Loop(*shared, **events, stopping=lambda: worker._stopping)
    worker.exchange = Exchange(
        worker.store,
        worker.queues,
        instance=worker.instance,
        lease=worker.lease,
        holdings=worker.holdings,
        results=worker.results,
        prefetch=worker.prefetch,
        starts=worker.starts,
        stopping=lambda: worker._stopping,
        now=worker._now,
        queue_limits=worker.queue_limits,
    )


def make_background_duties(worker: Any, relay: bool) -> None:
    """Heartbeats, recovery, the roster entry, the relay; wakers are made by run()."""
    worker.heartbeat = Heartbeat(
        worker.store, worker.lease, worker.holdings.holding, worker._stopped, worker._now
    )
    worker.recovery = Recovery(
        worker.store,
        worker.queues,
        worker.instance,
        worker.dead_options,
        worker.default_max_retries,
        worker._stopped,
        worker._now,
    )
    worker.presence = Presence(worker, worker._stopped)  # on the roster of live workers
    worker.relay = Relay(worker.store, worker._stopped) if relay else None
    worker.wakers: list[maintenance.Waker] = []
