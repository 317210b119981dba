"""The parts of a :class:`~django_delayq.worker.dispatch.Worker`, made by :func:`make_parts`
when it is: what claims, starts, runs and reports attempts, and its background duties
(dispatch.py's module docstring says which thread does what). Each part gets what it uses
as arguments; none reads the Worker's own state (the roster entry reads its public
counters through :class:`~django_delayq.worker.presence.Described`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_delayq.conf import delayq_settings
from django_delayq.outbox.relay import Relay
from django_delayq.storage.marks import StartMarks
from django_delayq.worker import aio
from django_delayq.worker.aio import Loop
from django_delayq.worker.claiming import Exchange
from django_delayq.worker.delivery import Results
from django_delayq.worker.execution import Executor
from django_delayq.worker.forwarder import Forwarder
from django_delayq.worker.history import HistoryCounts, HistoryFlush, history_on
from django_delayq.worker.holdings import Holdings
from django_delayq.worker.maintenance import Heartbeat, Recovery
from django_delayq.worker.prefetch import Prefetch
from django_delayq.worker.presence import Described, Presence
from django_delayq.worker.runners import Runners
from django_delayq.worker.starts import Starts


@dataclass(frozen=True)
class Parts:
    """A worker's parts; the events they share are the worker's (``wake`` wakes its
    dispatcher, ``stopped`` ends the threads, ``stopping()`` says a stop was requested)."""

    executor: Executor  # runs one attempt (execution.py)
    holdings: Holdings  # the attempts held and the results not delivered yet
    prefetch: Prefetch  # how many jobs to claim
    runners: Runners  # the runner threads and their watchdog
    loop: Loop  # the event loop of async tasks (aio.py)
    marker: StartMarks  # the start marks' own connection
    starts: Starts  # marks an attempt started just before it runs
    results: Results  # the results on their way to Redis (delivery.py)
    exchange: Exchange  # the dispatcher's round trips
    heartbeat: Heartbeat  # duties (duties.py runs them): the leases' extension,
    recovery: Recovery  # the expired leases' recovery,
    presence: Presence  # the roster entry,
    relay: Relay | None  # and the outbox relay (``relay=True``)
    forwarder: Forwarder  # the ends of batch members and chain steps (forwarder.py)
    history: HistoryFlush | None  # the queues' history, flushed (None: DELAYQ["HISTORY"] off)


def make_parts(
    worker: Described,
    *,
    async_concurrency: int,
    default_max_retries: int,
    dead_options: dict[str, Any],
    queue_limits: dict[str, int | None],
    now: Callable[[], float | None],
    wake: threading.Event,
    stopped: threading.Event,
    stopping: Callable[[], bool],
    relay: bool,
) -> Parts:
    """The parts of ``worker``: what it is (store, name, instance, queues, concurrency,
    lease) is read from it, its counters at each roster beat."""
    store, queues, lease = worker.store, worker.queues, worker.lease
    executor = _executor(worker.name, default_max_retries)
    holdings = Holdings(worker.concurrency, async_concurrency, aio.classify)
    prefetch = Prefetch(holdings, aio.loop_share)
    marker = store.marker()
    starts = Starts(store, marker, lease, default_max_retries)
    executor.now = starts.redis_now
    forwarder = Forwarder(store, stopped, wake)
    counts = HistoryCounts(starts.redis_now) if history_on() else None
    results = Results(
        store, executor, holdings, dead_options, default_max_retries, now, forwarder, counts
    )
    shared = (holdings, prefetch, starts, executor)
    events: dict[str, Any] = {"wake": wake, "stopped": stopped, "stopping": stopping}
    exchange = Exchange(
        store,
        queues,
        instance=worker.instance,
        lease=lease,
        holdings=holdings,
        results=results,
        prefetch=prefetch,
        starts=starts,
        stopping=stopping,
        now=now,
        queue_limits=queue_limits,
    )
    return Parts(
        executor=executor,
        holdings=holdings,
        prefetch=prefetch,
        runners=Runners(*shared, **events),
        loop=Loop(*shared, **events),
        marker=marker,
        starts=starts,
        results=results,
        exchange=exchange,
        heartbeat=Heartbeat(store, lease, holdings.holding, now),
        recovery=_recovery(worker, dead_options, default_max_retries, stopped, now, counts),
        presence=Presence(worker, stopped),
        relay=Relay(store, stopped) if relay else None,
        forwarder=forwarder,
        history=None if counts is None else HistoryFlush(store, counts),
    )


def _executor(name: str, default_max_retries: int) -> Executor:
    return Executor(
        name,
        default_max_retries=default_max_retries,
        retry_backoff=float(delayq_settings.RETRY_BACKOFF),
        retry_backoff_max=float(delayq_settings.RETRY_BACKOFF_MAX),
    )


def _recovery(
    worker: Described,
    dead_options: dict[str, Any],
    default_max_retries: int,
    stopped: threading.Event,
    now: Callable[[], float | None],
    history: HistoryCounts | None,
) -> Recovery:
    """Recovery, every half lease (0.25 s to 30 s): an expired lease waits at most that;
    it counts the failures and deaths it settles in ``history``."""
    every = min(max(worker.lease / 2, 0.25), 30.0)
    args = (dead_options, default_max_retries, stopped, now)
    recovery = Recovery(worker.store, list(worker.queues), worker.instance, *args, every=every)
    recovery.history = history
    return recovery
