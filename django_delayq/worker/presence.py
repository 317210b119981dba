"""A worker's presence on the roster of live workers (roster.py), on a thread of its own.

At start and then every ``every`` seconds (``VISIBILITY_TIMEOUT / 3``, at most
``EVERY_MAX``) the worker writes its description: name, host, pid, queues, concurrency,
version, how long it has run, the jobs it is running, jobs done and failed attempts since it
started. The description expires ``MISSED_BEATS`` beats after it was written, so a worker
that was SIGKILLed (or froze, or lost Redis) leaves the roster within ``3 * every`` seconds
(15 s with the default ``VISIBILITY_TIMEOUT`` of 60); a worker that stops takes itself off.

Each beat is one pipelined round trip on this thread, never on the heartbeat's, so a slow
Redis never delays the leases' extension.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from django_delayq.exceptions import DelayQError
from django_delayq.storage.roster import encode_description
from django_delayq.storage.store import Store
from django_delayq.worker.duties import Outage, duty_thread
from django_delayq.worker.execution import STARTED, Attempt

logger = logging.getLogger("django_delayq.worker")

EVERY_MAX = 5.0  # seconds between two beats, at most
MISSED_BEATS = 3  # a description expires after this many beats without a new one


def beat_interval(lease: float) -> float:
    """Seconds between two presence beats for a visibility timeout of ``lease`` seconds."""
    return min(max(lease / 3, 0.05), EVERY_MAX)


class Described(Protocol):
    """What a roster entry tells of a worker (a :class:`~django_delayq.worker.dispatch.Worker`
    is one); read at every beat."""

    @property
    def store(self) -> Store: ...
    @property
    def name(self) -> str: ...
    @property
    def instance(self) -> str: ...
    @property
    def queues(self) -> Sequence[str]: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def burst(self) -> bool: ...
    @property
    def lease(self) -> float: ...
    @property
    def processed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def stopping(self) -> bool: ...
    def holding(self) -> list[Attempt]: ...


class Presence:
    """Keeps ``worker`` on the roster while it runs (see the module docstring); a duty
    (duties.py runs it)."""

    name = what = "presence"
    log = logger
    first = 0.0  # on the roster at once

    def __init__(self, worker: Described, stopped: threading.Event) -> None:
        self.worker = worker
        self.stopped = stopped
        self.every = beat_interval(worker.lease)
        self.ttl = self.every * MISSED_BEATS
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started = time.monotonic()
        self.beats = 0
        self.ok = False  # the last beat reached Redis
        self.thread: threading.Thread | None = None
        self.supervisor: int | None = None  # pid of the supervisor (--processes), if any

    def new_thread(self, outage: Outage | None = None) -> threading.Thread:
        """The thread that runs the beats (not started), one per Worker.run() (``outage``:
        the worker's)."""
        self.thread = duty_thread(self, self.stopped, outage)
        return self.thread

    def describe(self) -> bytes:
        from django_delayq import __version__

        worker = self.worker
        now = time.monotonic()
        running = [
            (a.queue, a.id, a.fields.task if a.fields else "", now - (a.started or now))
            for a in worker.holding()
            if a.state == STARTED
        ]
        return encode_description(
            name=worker.name,
            host=self.host,
            pid=self.pid,
            queues=worker.queues,
            # Jobs it runs at once: its threads, and its event loop's slots (aio.py)
            concurrency=worker.concurrency + getattr(worker, "async_concurrency", 0),
            version=__version__,
            uptime=now - self.started,
            every=self.every,
            ttl=self.ttl,
            running=running,
            done=worker.processed,
            failed=worker.failed,
            stopping=worker.stopping,
            burst=worker.burst,
            supervisor=self.supervisor,
        )

    def beat(self) -> None:
        """Write the description once (raises DelayQError when Redis does not take it)."""
        self.beats += 1
        store = self.worker.store
        ops = store.roster.beat_ops(self.worker.instance, self.describe(), self.ttl, time.time())
        self.ok = False
        for result in store.run(ops):
            if isinstance(result, Exception):
                raise result
        self.ok = True

    def step(self) -> float:
        self.beat()
        return self.every

    def retry_in(self, exc: Exception, backoff: float) -> float:
        return min(backoff, self.every)

    def close(self) -> None:
        """At stop (``stopped`` is set): wait for a beat under way, so that none lands after
        the removal, and take the worker off the roster. Neither is tried when the last beat
        did not reach Redis (a connection attempt can take seconds): the description then
        expires by itself."""
        if not self.ok:
            return
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout=1.0)
        self.remove()

    def remove(self) -> None:
        """Take the worker off the roster."""
        store = self.worker.store
        try:
            for result in store.run(store.roster.gone_ops(self.worker.instance), budget=0.5):
                if isinstance(result, Exception):
                    raise result
        except DelayQError as exc:
            logger.info("worker %s: not taken off the roster (%s)", self.worker.name, exc)
