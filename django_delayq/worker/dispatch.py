"""The worker: claim -> run -> ack / retry / dead-letter, with heartbeats and recovery.

Threads of one Worker:

- the dispatcher (the thread that calls :meth:`Worker.run`): in one round trip (claiming.py)
  it records failures, acknowledges finished jobs and claims as many due jobs as it has idle
  runners plus a few to prefetch (prefetch.py); then it sleeps until the next due time (at
  most ``MAX_SLEEP``), a refill, a failure, a wake-up or a stop request;
- ``concurrency`` runner threads (runners.py), each running one attempt at a time
  (execution.py), marked started in Redis just before it runs (starts.py), and a watchdog
  that fails an attempt past its task's timeout and starts a runner in its thread's place;
- with ``async_concurrency``, an event loop (aio.py) running up to that many attempts of
  ``async def`` tasks at once (the claim's limit accounts for both pools: prefetch.py);
- a waker thread (not in burst mode), blocked in BLPOP on the queues' wake lists while a runner
  is idle, so a ``schedule()`` of a job due sooner than anything pending starts it at once;
- the background duties, each on a thread of its own run by duties.py's loop: heartbeat,
  recovery (maintenance.py), presence (presence.py), the recurring passes
  (recurring/passes.py) and, with ``relay=True`` (the command's default), the outbox relay
  (outbox/relay.py): due outbox rows into Redis, one bounded pass per second.

The parts these threads use are made once, by parts.py, and held as ``Worker.parts``.

The threads share the attempts held and the results not delivered yet only through
:class:`~django_delayq.worker.holdings.Holdings`. When every runner has been busy for
``PREFETCH_STALL`` (a slow job in a fast queue), and when the worker stops, claimed jobs no
runner started are handed back, no attempt counted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence

from django.utils.module_loading import autodiscover_modules

from django_delayq.conf import delayq_settings
from django_delayq.conf.queues import queue_limits
from django_delayq.exceptions import DelayQError
from django_delayq.jobs.state import encode_instance_name
from django_delayq.recurring.claims import worker_stopped as recurring_stopped
from django_delayq.recurring.passes import duty as recurring_duty
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.store import Store
from django_delayq.wording import counted
from django_delayq.worker.duties import Backoff, Duty, Outage, duty_thread
from django_delayq.worker.execution import Attempt
from django_delayq.worker.maintenance import Waker, release, wakers_for
from django_delayq.worker.parts import make_parts
from django_delayq.worker.prefetch import PREFETCH_STALL
from django_delayq.worker.upgrade import refuse_old_layout

logger = logging.getLogger("django_delayq.worker")

BURST_OUTAGE = 10.0  # seconds of unreachable Redis after which --burst gives up (exit 2)
FORCED_FLUSH = 5.0  # seconds a forced stop spends delivering results and handing jobs back


class Worker:
    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        async_concurrency: int = 0,
        burst: bool = False,
        store: Store | None = None,
        name: str | None = None,
        shutdown_timeout: float | None = None,
        clock: Callable[[], float] | None = None,
        relay: bool = False,
    ) -> None:
        """``relay``: also move outbox rows (outbox.py) into Redis, on a thread of its own
        (``manage.py delayq_worker`` turns it on unless ``--no-relay``). ``async_concurrency``:
        attempts of ``async def`` tasks run at once on the worker's event loop (aio.py); 0
        runs them on the runner threads, one per thread."""
        if type(concurrency) is not int or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if type(async_concurrency) is not int or async_concurrency < 0:
            raise ValueError(f"async_concurrency must be an int >= 0, got {async_concurrency!r}")
        self.async_concurrency = async_concurrency
        self.queues = [check_queue_name(q) for q in dict.fromkeys(queues or delayq_settings.QUEUES)]
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        self.concurrency = concurrency
        self.burst = burst
        self.store = store or get_store()
        self.name = f"{socket.gethostname()}:{os.getpid()}" if name is None else name
        # Lease tokens: <instance>#<counter>; the instance differs between two workers even
        # when they share a --name. Any name works: the characters the scripts read as
        # markers ('~', '|', '#', '/', whitespace...) are percent-encoded in it.
        self.instance = f"{encode_instance_name(self.name)}~{secrets.token_hex(4)}"
        self.clock = clock
        # Redis down, as all its threads see it (duties.py): a test may swap in a clock.
        self.outage = Outage(self.store.address())
        self._read_settings(shutdown_timeout)
        self._wake = threading.Event()  # the dispatcher sleeps on it
        self._stopped = threading.Event()  # the threads exit when set
        self._stop_lock = threading.Lock()  # request_stop may be called from any thread
        self._stopping = False
        self._forced = False
        self._reachable = False  # the last round trip got through
        self._forwardings = 0  # the forwarder's generation at the last claim (--burst)
        self.loops = 0  # turns of the dispatcher's loop (a spinning loop shows here)
        self.parts = make_parts(
            self,
            async_concurrency=async_concurrency,
            default_max_retries=self.default_max_retries,
            dead_options=self.dead_options,
            queue_limits=self.queue_limits,
            relay=relay,
            stopping=lambda: self._stopping,
            now=self._now,
            wake=self._wake,
            stopped=self._stopped,
        )
        self.wakers: list[Waker] = []  # made by run()

    def _read_settings(self, shutdown_timeout: float | None) -> None:
        self.shutdown_timeout = float(
            delayq_settings.SHUTDOWN_TIMEOUT if shutdown_timeout is None else shutdown_timeout
        )
        self.lease = float(delayq_settings.VISIBILITY_TIMEOUT)
        self.max_sleep = float(delayq_settings.MAX_SLEEP)
        self.queue_limits = queue_limits(self.queues)  # ConfigurationError on a bad one
        self.default_max_retries = int(delayq_settings.MAX_RETRIES)
        self.dead_options = {
            "dead_max_age": float(delayq_settings.DEAD_MAX_AGE),
            "dead_max_count": int(delayq_settings.DEAD_MAX_COUNT),
            "max_errors": int(delayq_settings.MAX_ERRORS_KEPT),
        }

    # -- control and counters -------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def request_stop(self, force: bool = False) -> None:
        """Stop claiming and let running jobs finish; ``force`` (or a second call) stops now.

        Safe to call from another thread (the command's signal handler starts one).
        """
        with self._stop_lock:
            if self._stopping:
                force = True
            self._stopping = True
            self._forced = self._forced or force
        self.parts.holdings.wake_waker()
        self._wake.set()

    def _now(self) -> float | None:
        return None if self.clock is None else self.clock()

    def holding(self) -> list[Attempt]:
        """The attempts this worker holds a lease for."""
        return self.parts.holdings.holding()

    @property
    def processed(self) -> int:
        """Attempts that succeeded since the worker was made."""
        return self.parts.holdings.processed

    @property
    def failed(self) -> int:
        """Attempts that failed since the worker was made."""
        return self.parts.holdings.failed

    @property
    def exchanges(self) -> int:
        """Round trips of the dispatcher (tests count them)."""
        return self.parts.exchange.count

    # -- main loop ------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is due). Returns the exit code:
        0 after a graceful stop, 1 after a forced one, when results could not be delivered or
        when a queue holds 0.1's layout (delayq_upgrade converts it), 2 when --burst gave up
        on an unreachable Redis."""
        autodiscover_modules("tasks")
        refused = refuse_old_layout(self, BURST_OUTAGE)  # before recovery could misread 0.1's
        if refused is not None:
            return refused
        logger.info(
            "worker %s started: queues %s, concurrency %d%s%s",
            self.name,
            ",".join(self.queues),
            self.concurrency,
            f", async concurrency {self.async_concurrency}" if self.async_concurrency else "",
            ", burst" if self.burst else "",
        )
        if self.parts.relay is not None and self.burst:
            self.parts.relay.burst()
        for thread in self._threads():
            thread.daemon = True
            thread.start()
        try:
            code = self._dispatch_loop()
        finally:
            self._close()
            recurring_stopped()  # successors stored, the occurrences' last outcomes written
        logger.info(
            "worker %s stopped: %s done, %s",
            self.name,
            counted(self.processed, "job"),
            counted(self.failed, "failed attempt"),
        )
        return code

    def _threads(self) -> list[threading.Thread]:
        """The threads besides the dispatcher, not started (see the module docstring)."""
        parts = self.parts
        threads = parts.runners.threads()
        if self.async_concurrency:
            threads.append(parts.loop.thread())
        threads.append(duty_thread(parts.heartbeat, self._stopped, self.outage))
        threads.append(parts.forwarder.thread())
        threads.append(parts.presence.new_thread(self.outage))
        if parts.history is not None:
            threads.append(duty_thread(parts.history, self._stopped, self.outage))
        if not self.burst:
            duties: list[Duty] = [] if parts.relay is None else [parts.relay]
            duties.append(parts.recovery)
            duties.append(recurring_duty(self.store, self.clock))
            threads += [duty_thread(duty, self._stopped, self.outage) for duty in duties]
            runners = parts.runners
            for waker in wakers_for(self.store, self.queues, self.max_sleep, runners, self.outage):
                self.wakers.append(waker)
                threads.append(threading.Thread(target=waker.loop, name="delayq-waker"))
        return threads

    def _close(self) -> None:
        """The dispatcher is done: stop the threads, leave the roster and the worker set."""
        self._stopped.set()
        self.parts.holdings.wake_all()
        self.parts.forwarder.close()  # ends not forwarded yet (else the sweep takes them)
        self.parts.marker.close()
        if self.parts.history is not None:
            self.parts.history.last_flush()  # the counts since the last flush
        self.parts.presence.close()  # off the roster
        if self._reachable:  # else recovery drops them in time
            with contextlib.suppress(DelayQError):
                self.store.forget_worker(self.queues, self.instance, budget=0.5)

    def _dispatch_loop(self) -> int:
        outage = Backoff("dispatcher", outage=self.outage)
        stop_at: float | None = None
        recovered_at_start = not self.burst
        while True:
            self.loops += 1
            self._wake.clear()
            try:
                if not recovered_at_start:  # --burst: leave no expired lease behind
                    self.parts.recovery.burst_pass()
                    recovered_at_start = True
                self._forwardings = self.parts.forwarder.generation  # before the claim
                self.parts.exchange.run()
                outage.ok()
                pause = None
                self._reachable = True
            except DelayQError as exc:
                self._reachable = False
                pause = outage.failed(exc)
                if self.burst and self.outage.down_for() > BURST_OUTAGE:
                    logger.error(
                        "--burst: Redis unreachable or failing for %.0f s (%s); giving up",
                        BURST_OUTAGE,
                        exc,
                    )
                    return 2
            if self._stopping:
                stop_at = stop_at or time.monotonic() + self.shutdown_timeout
                if (code := self._wind_down(stop_at, pause)) is not None:
                    return code
            elif pause is not None:
                self._wake.wait(pause)
            elif not (self.burst and self._nothing_left()):
                self._sleep()
            elif (code := self._burst_end(outage)) is not None:
                return code

    def _wind_down(self, stop_at: float, pause: float | None) -> int | None:
        """One turn of a stop: hand waiting jobs back; 0 once the running ones finished and
        their results are delivered, a forced stop's code when forced or at ``stop_at``;
        else None after a short wait."""
        self._hand_back_waiting("waiting")
        if self.parts.holdings.emptied():
            return 0
        if self._forced or time.monotonic() >= stop_at:
            return self._stop_now()
        self._wake.wait(min(0.5, pause or 0.5, max(stop_at - time.monotonic(), 0.0)))
        return None

    def _nothing_left(self) -> bool:
        """--burst: nothing held, nothing due now, no due job left behind by the last claim."""
        deadline = self.parts.exchange.deadline
        due_soon = deadline is not None and deadline <= time.monotonic()
        idle = self.parts.holdings.idle()
        # A forwarding since the last claim may have stored a chain step or a callback; one
        # under way wakes the dispatcher when it ends, nothing else being left (set first).
        forwarder = self.parts.forwarder
        forwarder.wake_when_idle = idle
        settled = forwarder.idle() and forwarder.generation == self._forwardings
        return idle and not self.parts.exchange.more_due and not due_soon and settled

    def _burst_end(self, outage: Backoff) -> int | None:
        """--burst, nothing left to run: recover expired leases; 0 once none was left, 1 when
        Redis refused (expired leases may be left: the exit code says so), None to go on."""
        try:
            moved = self.parts.recovery.burst_pass()
        except DelayQError as exc:  # unreachable: back off like any round trip
            self._wake.wait(outage.failed(exc))
            return None
        if moved is None:
            return 1
        return 0 if moved == 0 else None

    def _sleep(self) -> None:
        """Hand waiting jobs back if their pool stalled; sleep until there is work to do."""
        threads, loop = self.parts.prefetch.stalled()
        if threads or loop:
            self._hand_back_waiting("waiting (stalled)", threads, loop)
        timeout = self._sleep_time()
        if timeout > 0:
            self._wake.wait(timeout)

    def _sleep_time(self) -> float:
        load = self.parts.holdings.load()
        capacity = self.concurrency + self.parts.prefetch.size - load.busy
        if load.results and (load.failures or self.parts.prefetch.refill_due(load)):
            return 0.0
        room = capacity > 0 or load.async_busy < self.async_concurrency
        if self.parts.exchange.more_due and room and self.parts.prefetch.claim_now(load):
            return 0.0
        limit = self.max_sleep
        if load.waiting:
            limit = min(limit, PREFETCH_STALL)
        deadline = self.parts.exchange.deadline
        if deadline is None or not self.parts.prefetch.room(load):
            return limit
        return max(0.0, min(deadline - time.monotonic(), limit))

    def _hand_back_waiting(self, what: str, threads: bool = True, loop: bool = True) -> None:
        """Hand claimed jobs no runner has started back to pending (no attempt counted)."""
        waiting = self.parts.holdings.take_waiting(threads, loop)
        if waiting:
            if threads:
                self.parts.prefetch.size = 0
            self._release(waiting, what)

    def _release(self, attempts: list[Attempt], what: str, budget: float = 1.0) -> bool:
        parts = self.parts
        counts = parts.history.counts if parts.history is not None else None
        return release(self.store, parts.executor, attempts, what, self._now(), budget, counts)

    def _stop_now(self) -> int:
        """A forced stop: deliver the results of finished jobs, hand the others back (attempt
        not counted), exit 1."""
        abandoned = self.parts.holdings.take_unfinished()
        deadline = time.monotonic() + FORCED_FLUSH
        if left := self.parts.exchange.flush(deadline):
            logger.error(
                "forced stop: the results of %d finished jobs could not be delivered; they will "
                "run again once their lease expires",
                left,
            )
        if abandoned:
            self._release(abandoned, "unfinished", budget=max(deadline - time.monotonic(), 0.5))
        return 1
