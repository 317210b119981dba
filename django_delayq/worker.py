"""The worker: claim -> run -> ack / retry / dead-letter, with heartbeats and recovery.

Threads of one Worker:

- the dispatcher (the thread that calls :meth:`Worker.run`): in one round trip it records
  failures, acknowledges finished jobs and claims as many due jobs as it has idle runners plus
  a few to prefetch (see below); then it sleeps until the next due time (at most
  ``MAX_SLEEP``), a refill, a failure, a wake-up or a stop request;
- ``concurrency`` runner threads (execution.py), each running one attempt at a time; a runner
  marks an attempt started in Redis just before running it (starts.py: a write nobody waits
  for, or a script call it waits for when the worker settles the job's retry policy);
- a waker thread (not in burst mode), blocked in BLPOP on the queues' wake lists only while a
  runner is idle, so a ``schedule()`` of a job due sooner than anything pending starts it at
  once;
- a heartbeat thread and a recovery thread (maintenance.py);
- with ``relay=True`` (the command's default) a relay thread that moves due outbox rows into
  Redis (outbox.py), one bounded pass per second, never in the heartbeat's way.

Every round trip may be sent again: a claim re-sent with its token returns the jobs it leased,
acks and failures answer the same twice. So whatever Redis answers (a lost reply, BUSY,
NOSCRIPT, READONLY, WRONGTYPE, an outage), the results of finished jobs are kept and sent
again until Redis takes them, and a claim whose reply was lost is re-sent with its token.

Prefetch: when jobs are short, a round trip per job would cost more than the jobs, so the
dispatcher claims up to ``PREFETCH_MAX`` more due jobs than it has runners and refills when
half of them are gone. How many depends on how long jobs take (a moving average): enough that
a prefetched job waits about ``PREFETCH_WAIT`` for a runner, none for jobs that take longer.
Claimed jobs count no attempt until a runner starts them, so a worker that dies with jobs
waiting in it costs them nothing. When every runner has been busy for ``PREFETCH_STALL``
(a slow job in a fast queue), and when the worker stops, waiting jobs are handed back.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from django.utils.module_loading import autodiscover_modules

from .conf import delayq_settings
from .connection import get_store
from .delivery import Results
from .exceptions import ConnectionError as DelayQConnectionError
from .exceptions import DelayQError
from .execution import FINISHED, STARTED, Attempt, Executor, Outcome
from .execution import backoff_delay as backoff_delay  # re-exported
from .execution import current_job as current_job  # re-exported
from .job import encode_instance_name
from .maintenance import Backoff, Heartbeat, Recovery, Waker, release
from .presence import Presence
from .relaying import Relay
from .starts import Starts
from .store import Claim, Store, check_queue_name
from .upgrade import refuse_old_layout
from .wording import counted

logger = logging.getLogger("django_delayq.worker")

PREFETCH_MAX = 64  # claimed jobs waiting for a runner, at most
PREFETCH_WAIT = 0.02  # seconds a prefetched job should wait for a runner, on average
PREFETCH_STALL = 0.25  # seconds every runner may be busy before waiting jobs are handed back
BURST_OUTAGE = 10.0  # seconds of unreachable Redis after which --burst gives up (exit 2)
FORCED_FLUSH = 5.0  # seconds a forced stop spends delivering results and handing jobs back


class Worker:
    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        burst: bool = False,
        store: Store | None = None,
        name: str | None = None,
        shutdown_timeout: float | None = None,
        clock: Callable[[], float] | None = None,
        relay: bool = False,
    ) -> None:
        """``relay``: also move outbox rows (outbox.py) into Redis, on a thread of its own
        (``manage.py delayq_worker`` turns it on unless ``--no-relay``)."""
        if type(concurrency) is not int or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
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
        self.shutdown_timeout = float(
            delayq_settings.SHUTDOWN_TIMEOUT if shutdown_timeout is None else shutdown_timeout
        )
        self.lease = float(delayq_settings.VISIBILITY_TIMEOUT)
        self.max_sleep = float(delayq_settings.MAX_SLEEP)
        self.default_max_retries = int(delayq_settings.MAX_RETRIES)
        self.dead_options = {
            "dead_max_age": float(delayq_settings.DEAD_MAX_AGE),
            "dead_max_count": int(delayq_settings.DEAD_MAX_COUNT),
            "max_errors": int(delayq_settings.MAX_ERRORS_KEPT),
        }
        self.executor = Executor(
            self.name,
            default_max_retries=self.default_max_retries,
            retry_backoff=float(delayq_settings.RETRY_BACKOFF),
            retry_backoff_max=float(delayq_settings.RETRY_BACKOFF_MAX),
        )
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # runners wait for attempts
        self._idle_runner = threading.Condition(self._lock)  # the waker waits for an idle runner
        self._wake = threading.Event()  # the dispatcher sleeps on it
        self._stopped = threading.Event()  # the threads exit when set
        self._leases: dict[tuple[str, str], Attempt] = {}  # held: claimed, not settled
        self._waiting: deque[Attempt] = deque()  # claimed, no runner yet
        self._running = 0  # attempts runners are on
        self._done: deque[Outcome] = deque()  # finished, result not delivered yet
        # queue -> (token, limit) of a claim whose reply was lost: sent again as it was
        self._claim_tokens: dict[str, tuple[str, int]] = {}
        self._tokens = itertools.count(1)
        self._prefetch = 0  # jobs claimed beyond the runners in the last claim
        self._job_time: float | None = None  # moving average of a job's run time (s)
        self._deadline: float | None = None  # monotonic time of the next due job
        self._more_due = False  # the last claim left due jobs behind
        self._rotation = 0
        self._stopping = False
        self._forced = False
        self.marker = self.store.marker()
        self.starts = Starts(self.store, self.marker, self.lease, self.default_max_retries)
        self.heartbeat = Heartbeat(self.store, self.lease, self.holding, self._stopped, self._now)
        self.recovery = Recovery(
            self.store,
            self.queues,
            self.instance,
            self.dead_options,
            self.default_max_retries,
            self._stopped,
            self._now,
        )
        self.results = Results(
            self.store,
            self.executor,
            self._lock,
            self._leases,
            self._done,
            self.dead_options,
            self.default_max_retries,
            self._now,
        )
        self.presence = Presence(self, self._stopped)  # on the roster of live workers
        self.relay = Relay(self.store, self._stopped) if relay else None
        self.processed = 0
        self.failed = 0
        self.exchanges = 0  # round trips of the dispatcher (tests count them)
        self.loops = 0  # turns of the dispatcher's loop (a spinning loop shows here)
        self._reachable = False  # the last round trip got through
        self.wakers: list[Waker] = []

    # -- control --------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def request_stop(self, force: bool = False) -> None:
        """Stop claiming and let running jobs finish; ``force`` (or a second call) stops now.

        Safe to call from another thread (the command's signal handler starts one).
        """
        with self._lock:
            if self._stopping:
                force = True
            self._stopping = True
            self._forced = self._forced or force
            self._idle_runner.notify_all()
        self._wake.set()

    def _now(self) -> float | None:
        return None if self.clock is None else self.clock()

    def holding(self) -> list[Attempt]:
        """The attempts this worker holds a lease for (heartbeat)."""
        with self._lock:
            return list(self._leases.values())

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
            "worker %s started: queues %s, concurrency %d%s",
            self.name,
            ",".join(self.queues),
            self.concurrency,
            ", burst" if self.burst else "",
        )
        threads = [
            threading.Thread(target=self._runner, name=f"delayq-runner-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        threads.append(threading.Thread(target=self.heartbeat.loop, name="delayq-heartbeat"))
        threads.append(self.presence.new_thread())
        if self.relay is not None and self.burst:
            self.relay.burst()
        elif self.relay is not None:
            threads.append(threading.Thread(target=self.relay.loop, name="delayq-relay"))
        if not self.burst:
            every = min(max(self.lease / 2, 0.25), 30.0)
            threads.append(
                threading.Thread(target=self.recovery.loop, args=(every,), name="delayq-recovery")
            )
            for group in self._wake_groups():
                waker = Waker(
                    self.store, group, self.max_sleep, self._wait_for_idle_runner, self._woken
                )
                self.wakers.append(waker)
                threads.append(threading.Thread(target=waker.loop, name="delayq-waker"))
        for thread in threads:
            thread.daemon = True
            thread.start()
        try:
            code = self._dispatch_loop()
        finally:
            self._stopped.set()
            with self._lock:
                self._work.notify_all()
                self._idle_runner.notify_all()
            self.marker.close()
            self.presence.close()  # off the roster
            if self._reachable:  # else recovery drops them in time
                with contextlib.suppress(DelayQError):
                    self.store.forget_worker(self.queues, self.instance, budget=0.5)
        logger.info(
            "worker %s stopped: %s done, %s",
            self.name,
            counted(self.processed, "job"),
            counted(self.failed, "failed attempt"),
        )
        return code

    def _dispatch_loop(self) -> int:
        outage = Backoff("dispatcher")
        outage_since: float | None = None
        stop_at: float | None = None
        recovered_at_start = not self.burst
        while True:
            self.loops += 1
            self._wake.clear()
            try:
                if not recovered_at_start:  # --burst: leave no expired lease behind
                    self._burst_recovery()
                    recovered_at_start = True
                self._exchange()
                outage.ok()
                outage_since = None
                pause = None
                self._reachable = True
            except DelayQError as exc:
                self._reachable = False
                pause = outage.failed(exc)
                outage_since = outage_since or time.monotonic()
                if self.burst and time.monotonic() - outage_since > BURST_OUTAGE:
                    logger.error(
                        "--burst: Redis unreachable or failing for %.0f s (%s); giving up",
                        BURST_OUTAGE,
                        exc,
                    )
                    return 2
            if self._stopping:
                stop_at = stop_at or time.monotonic() + self.shutdown_timeout
                self._hand_back_waiting("waiting")
                with self._lock:
                    finished = self._running == 0 and not self._waiting
                if finished and not self._done:
                    return 0
                if self._forced or time.monotonic() >= stop_at:
                    return self._stop_now()
                timeout = min(0.5, pause or 0.5, max(stop_at - time.monotonic(), 0.0))
                self._wake.wait(timeout)
                continue
            if pause is not None:
                self._wake.wait(pause)
                continue
            if self.burst and self._idle() and not self._more_due and not self._due_soon():
                try:
                    moved = self._burst_recovery()
                except DelayQError as exc:  # unreachable: back off like any round trip
                    self._wake.wait(outage.failed(exc))
                    continue
                if moved is None:
                    return 1  # expired leases may be left: say so with the exit code
                if moved == 0:
                    return 0
                continue
            if self._stalled():
                self._hand_back_waiting("waiting (stalled)")
            timeout = self._sleep_time()
            if timeout > 0:
                self._wake.wait(timeout)

    def _burst_recovery(self) -> int | None:
        """--burst: recover every expired lease; how many moved, None when Redis refused
        (an error reply such as WRONGTYPE: logged, and the worker exits 1 at the end).
        Raises ConnectionError when Redis is unreachable."""
        try:
            return self.recovery.run_pass(limit=10**9)
        except DelayQConnectionError:
            raise
        except DelayQError as exc:
            logger.error("--burst: expired leases could not be recovered: %s", exc)
            return None

    def _idle(self) -> bool:
        with self._lock:
            return not self._leases and not self._done

    def _due_soon(self) -> bool:
        return self._deadline is not None and self._deadline <= time.monotonic()

    def _sleep_time(self) -> float:
        with self._lock:
            busy = len(self._waiting) + self._running
            failures = any(not o.ok for o in self._done)
            done = bool(self._done)
            waiting = bool(self._waiting)
        capacity = self.concurrency + self._prefetch - busy
        if done and (failures or self._refill_due(busy)):
            return 0.0
        if capacity > 0 and self._more_due and busy < self.concurrency:
            return 0.0
        limit = self.max_sleep
        if waiting:
            limit = min(limit, PREFETCH_STALL)
        if self._deadline is None or busy >= self.concurrency:
            return limit
        return max(0.0, min(self._deadline - time.monotonic(), limit))

    # -- prefetch -----------------------------------------------------------------

    def _prefetch_size(self) -> int:
        """How many due jobs to claim beyond the runners: as many as the runners get through
        in about PREFETCH_WAIT, judging by recent jobs (none before the first)."""
        if self._job_time is None:
            return 0
        estimate = self._job_time
        with self._lock:
            started = [a.started for a in self._leases.values() if a.state == STARTED and a.started]
        if started:  # a job running for long now says more than the average
            estimate = max(estimate, time.monotonic() - min(started))
        per_wait = PREFETCH_WAIT * self.concurrency / max(estimate, 1e-6)
        return min(PREFETCH_MAX, int(per_wait))

    def _refill_due(self, busy: int) -> bool:
        """Half the prefetched jobs are gone (with no prefetch: a runner is idle)."""
        return busy < self.concurrency + (self._prefetch + 1) // 2

    def _stalled(self) -> bool:
        """Jobs wait for a runner while every runner is on a job older than PREFETCH_STALL."""
        limit = time.monotonic() - PREFETCH_STALL
        with self._lock:
            if not self._waiting:
                return False
            started = [a.started for a in self._leases.values() if a.state == STARTED]
        return len(started) >= self.concurrency and max(s or 0.0 for s in started) < limit

    def _hand_back_waiting(self, what: str) -> None:
        """Hand claimed jobs no runner has started back to pending (no attempt counted)."""
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
            for attempt in waiting:
                del self._leases[attempt.lease]
        if waiting:
            self._prefetch = 0
            self._release(waiting, what)

    def _release(self, attempts: list[Attempt], what: str, budget: float = 1.0) -> bool:
        return release(self.store, self.executor, attempts, what, self._now(), budget)

    def _stop_now(self) -> int:
        """A forced stop: deliver the results of finished jobs, hand the others back (attempt
        not counted), exit 1."""
        with self._lock:
            abandoned = [a for a in self._leases.values() if a.state != FINISHED]
            for attempt in abandoned:
                del self._leases[attempt.lease]
            self._waiting.clear()
        deadline = time.monotonic() + FORCED_FLUSH
        while self._done and time.monotonic() < deadline:
            try:
                self._exchange(claim=False)
            except DelayQError as exc:
                logger.warning("forced stop: results not delivered yet (%s); retrying", exc)
                time.sleep(0.2)
        if self._done:
            logger.error(
                "forced stop: the results of %d finished jobs could not be delivered; they will "
                "run again once their lease expires",
                len(self._done),
            )
        if abandoned:
            self._release(abandoned, "unfinished", budget=max(deadline - time.monotonic(), 0.5))
        return 1

    def _wake_groups(self) -> list[list[str]]:
        # One BLPOP may wait on several lists only when they live on one server.
        return [[q] for q in self.queues] if self.store.cluster else [self.queues]

    # -- one round trip: failures, acks, claims ---------------------------------

    def _exchange(self, claim: bool = True) -> None:
        """Deliver finished jobs' results and claim due ones, one round trip per queue
        claimed. Results that Redis did not take are kept for the next round trip; a claim
        whose reply was lost is sent again with its token. Raises DelayQError when nothing
        got through (the caller backs off)."""
        self.exchanges += 1
        outcomes = self.results.take_all()
        fails = [o for o in outcomes if not o.ok]
        acks: dict[str, list[Outcome]] = {}
        for o in outcomes:
            if o.ok:
                acks.setdefault(o.attempt.queue, []).append(o)
        order = self.queues[self._rotation :] + self.queues[: self._rotation]
        self._rotation = (self._rotation + 1) % len(self.queues)
        # Queues with acks go first (their claims carry them), then the rest in rotation.
        order.sort(key=lambda q: q not in acks)
        prefetch = self._prefetch_size()
        first = True
        deadline: float | None = None
        more_due = False
        error: DelayQError | None = None
        for queue in order:
            with self._lock:
                busy = len(self._waiting) + self._running
            limit = self.concurrency + prefetch - busy if claim and not self._stopping else 0
            token, limit = self._claim_tokens.get(queue) or (
                f"{self.instance}#{next(self._tokens)}",
                max(limit, 0),
            )
            if not first and limit <= 0 and queue not in acks:
                continue
            queue_acks = acks.pop(queue, [])
            ops = [self.results.fail_op(o) for o in fails] if first else []
            ops.append(
                self.store.claim_op(
                    queue,
                    limit,
                    lease=self.lease,
                    token=token,
                    instance=self.instance,
                    acks=[(o.attempt.id, o.attempt.token, o.attempt.info) for o in queue_acks],
                    now=self._now(),
                )
            )
            sent_fails = fails if first else []
            first = False
            results = self.store.run(ops)
            self.results.settle_fails(sent_fails, results[: len(sent_fails)])
            result = results[-1]
            if isinstance(result, Exception):
                if limit > 0:
                    self._claim_tokens[queue] = (token, limit)  # re-sent as it was next time
                self.results.keep(queue_acks)
                error = error or (result if isinstance(result, DelayQError) else None)
                continue
            self._claim_tokens.pop(queue, None)
            self.results.settle_acks(queue_acks, result.acked)
            self._take(queue, token, result)
            if result.jobs:
                self._prefetch = prefetch
            if len(result.jobs) >= limit > 0:
                more_due = True
            if result.next_due is not None:
                due = time.monotonic() + (result.next_due - result.now)
                deadline = due if deadline is None else min(deadline, due)
        if claim:
            self._deadline = deadline
            self._more_due = more_due
        for queue_acks in acks.values():  # only when claim=False: an ack per remaining queue
            self.results.keep(queue_acks)
        if error is not None:
            raise error

    def _take(self, queue: str, token: str, claim: Claim) -> None:
        self.starts.offset = claim.now - time.time()
        if not claim.jobs:
            return
        attempts = [Attempt(queue, c.id, token, c.record, c.attempt) for c in claim.jobs]
        with self._lock:
            for attempt in attempts:
                self._leases[attempt.lease] = attempt
            self._waiting.extend(attempts)
            self._work.notify(len(attempts))

    # -- runner threads -------------------------------------------------------

    def _runner(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._stopped.is_set():
                    self._work.wait()
                if self._stopped.is_set():
                    return
                attempt = self._waiting.popleft()
                attempt.state = STARTED
                attempt.started = time.monotonic()
                self._running += 1
            if not self.starts.start(attempt):
                self._drop(attempt)
                continue
            outcome = self.executor.run(attempt)
            took = time.monotonic() - attempt.started
            with self._lock:
                self._running -= 1
                attempt.state = FINISHED
                average = self._job_time
                self._job_time = took if average is None else average + (took - average) / 8
                if outcome.ok:
                    self.processed += 1
                else:
                    self.failed += 1
                if attempt.lease in self._leases:  # else a forced stop handed it back
                    self._done.append(outcome)
                busy = len(self._waiting) + self._running
                wake = not outcome.ok or self._stopping or self._refill_due(busy)
                if busy < self.concurrency:
                    self._idle_runner.notify()
            if wake:
                self._wake.set()

    def _drop(self, attempt: Attempt) -> None:
        """A runner took ``attempt`` and will not run it (Starts.settle): forget its lease."""
        with self._lock:
            self._running -= 1
            attempt.state = FINISHED
            self._leases.pop(attempt.lease, None)
            if len(self._waiting) + self._running < self.concurrency:
                self._idle_runner.notify()
        self._wake.set()

    # -- the waker's view of the runners --------------------------------------------

    def _wait_for_idle_runner(self) -> bool:
        """Block until a runner is idle; False once the worker stops."""
        with self._lock:
            while (
                len(self._waiting) + self._running >= self.concurrency
                and not self._stopping
                and not self._stopped.is_set()
            ):
                self._idle_runner.wait()
            return not (self._stopping or self._stopped.is_set())

    def _woken(self) -> bool:
        """A wake token arrived: wake the dispatcher; False if no runner is idle now."""
        with self._lock:
            full = len(self._waiting) + self._running >= self.concurrency
        if full or self._stopping:
            return False
        self._wake.set()
        return True
