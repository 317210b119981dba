"""The worker: claim -> run -> ack / retry / dead-letter, with heartbeats and recovery.

Threads of one Worker:

- the dispatcher (the thread that calls :meth:`Worker.run`): in one pipelined round
  trip it acknowledges finished jobs, records failures and claims as many due jobs as
  there are free runner threads plus a few to prefetch (see below); then it sleeps until
  the next due time (capped at ``MAX_SLEEP``), a refill or a failure, a wake-up or a
  stop request;
- ``concurrency`` runner threads, each running one job at a time;
- a waker thread (not in burst mode) blocked in BLPOP on the queues' wake lists, so
  a ``schedule()`` of a job due sooner than anything pending starts it at once;
- a maintenance thread that extends the leases of running jobs (heartbeat) and
  recovers jobs whose lease expired because their worker died.

Prefetch: when jobs are short, a round trip per job would cost more than the jobs, so
the dispatcher claims up to ``PREFETCH_MAX`` more due jobs than it has runners and
refills when half of them are gone, acknowledging the finished ones in the same round
trip. Prefetched jobs are claimed like running ones (leased, heartbeated, recovered if
the worker dies). How many depends on how long jobs take (a moving average): enough
that a prefetched job waits about ``PREFETCH_WAIT`` for a runner, none for jobs that
take longer than that. When every runner has been busy for ``PREFETCH_STALL`` (a slow
job in a fast queue), and when the worker stops, jobs not started yet are handed back to
pending, so they never wait for a busy worker while another one is idle.

Redis going away never kills the worker: every thread logs, backs off and retries,
and finished jobs stay queued for acknowledgement until Redis is back.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import secrets
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from queue import SimpleQueue
from typing import Any

import redis
from asgiref.sync import async_to_sync
from django.db import close_old_connections
from django.utils.module_loading import autodiscover_modules

from . import signals
from .conf import delayq_settings
from .connection import get_store
from .exceptions import CorruptJob, DelayQError, LeaseLost
from .job import (
    DEAD,
    RUNNING,
    Job,
    decode_record,
    empty_fields,
    id_timestamp,
    job_from_raw,
    to_datetime,
)
from .registry import Task, _registry, get_task
from .store import Claim, Op, Store

logger = logging.getLogger("django_delayq.worker")

TRACEBACK_LIMIT = 16_000
MESSAGE_LIMIT = 2_000
PREFETCH_MAX = 32  # claimed jobs waiting for a runner, at most
PREFETCH_WAIT = 0.01  # seconds a prefetched job should wait for a runner, on average
PREFETCH_STALL = 0.25  # seconds every runner may be busy before queued jobs are handed back

# The job whose task the current thread is running; set by Worker._execute around the call.
_current_job: ContextVar[Job | None] = ContextVar("django_delayq_current_job", default=None)


def current_job() -> Job | None:
    """The job being run by the calling code (its id, queue, attempts, worker), else None.

    Set by the worker only while a task function runs (async tasks see it too); None
    when a task is called directly. backends.py reads it for django.tasks results.
    """
    return _current_job.get()


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds before retry number ``attempt`` (1-based): base * 2**(attempt-1), capped,
    plus up to 25% jitter so failed jobs do not retry in lockstep. base 0: at once."""
    if base <= 0:
        return 0.0
    delay = min(base * 2 ** (attempt - 1), cap)
    return delay + random.uniform(0, delay * 0.25)


@dataclass
class Claimed:
    """A job this worker claimed, from dispatch until its ack/fail is sent."""

    queue: str
    id: str
    token: str
    record: bytes
    attempts: int
    key: str | None = None
    started: float | None = None  # time.monotonic() when a runner took it
    withdrawn: bool = False  # handed back to pending before a runner took it
    finished: bool = False  # run, its ack or failure not sent yet


@dataclass
class Outcome:
    claimed: Claimed
    ok: bool
    job: Job | None = None
    error: dict[str, Any] = field(default_factory=dict)
    delay: float = -1.0  # negative: never retry
    max_retries: int = 0
    retried: bool = False  # a previous flush of this outcome failed


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
    ) -> None:
        if type(concurrency) is not int or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self.queues = list(dict.fromkeys(queues or delayq_settings.QUEUES))
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        self.concurrency = concurrency
        self.burst = burst
        self.store = store or get_store()
        for queue in self.queues:
            self.store.keys(queue)  # validates the name
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{random.randrange(16**4):04x}"
        self.clock = clock
        self.shutdown_timeout = (
            delayq_settings.SHUTDOWN_TIMEOUT if shutdown_timeout is None else shutdown_timeout
        )
        self.lease = float(delayq_settings.VISIBILITY_TIMEOUT)
        self.max_sleep = float(delayq_settings.MAX_SLEEP)
        self.default_max_retries = int(delayq_settings.MAX_RETRIES)
        self.retry_backoff = float(delayq_settings.RETRY_BACKOFF)
        self.retry_backoff_max = float(delayq_settings.RETRY_BACKOFF_MAX)
        self.dead_options = {
            "dead_max_age": float(delayq_settings.DEAD_MAX_AGE),
            "dead_max_count": int(delayq_settings.DEAD_MAX_COUNT),
            "max_errors": int(delayq_settings.MAX_ERRORS_KEPT),
        }
        self._wake = threading.Event()
        self._slot_free = threading.Event()
        self._stopped = threading.Event()  # threads exit when set
        self._inbox: SimpleQueue[Claimed | None] = SimpleQueue()
        self._done: deque[Outcome] = deque()
        self._running: dict[str, Claimed] = {}  # claimed and not yet acked/failed
        self._lock = threading.Lock()
        self._busy = 0  # dispatched to runners (running or waiting) and not finished
        self._prefetch = 0  # jobs claimed beyond the runners in the last claim
        self._job_time: float | None = None  # moving average of a job's run time (s)
        self._stopping = False
        self._forced = False
        self._tokens = itertools.count(1)
        # Lease tokens must differ between workers even when two share a --name.
        self._token_prefix = f"{self.name}:{secrets.token_hex(4)}"
        self._rotation = 0
        self._deadline: float | None = None  # monotonic time of the next due job
        self.processed = 0
        self.failed = 0

    # -- control --------------------------------------------------------------

    def request_stop(self, force: bool = False) -> None:
        """Stop claiming and let running jobs finish; ``force`` (or a second call) stops now.

        Safe to call from a signal handler or another thread.
        """
        if self._stopping:
            force = True
        self._stopping = True
        self._forced = self._forced or force
        self._wake.set()
        self._slot_free.set()

    def _now(self) -> float | None:
        return None if self.clock is None else self.clock()

    # -- main loop ------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is due). Returns an exit code."""
        autodiscover_modules("tasks")
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
        threads.append(
            threading.Thread(target=self._maintain, name="delayq-maintenance", daemon=True)
        )
        if not self.burst:
            for group in self._wake_groups():
                threads.append(
                    threading.Thread(
                        target=self._waker, args=(group,), name="delayq-waker", daemon=True
                    )
                )
        for thread in threads:
            thread.start()
        stop_at: float | None = None
        code = 0
        outage = _Backoff("dispatcher")
        try:
            while True:
                self._wake.clear()
                try:
                    claimed_any = self._exchange()
                    outage.ok()
                except (DelayQError, redis.exceptions.RedisError) as exc:
                    pause = outage.failed(exc)
                    if self._stopping:
                        # Redis is away: nothing can be acked or handed back, so stop once
                        # running jobs are done, on a second signal, or at the grace
                        # period's end; unacked jobs are recovered after their lease.
                        stop_at = stop_at or time.monotonic() + self.shutdown_timeout
                        if self._forced or self._busy == 0 or time.monotonic() >= stop_at:
                            code = 1 if self._running else 0
                            break
                        pause = min(pause, 0.5)
                    self._wake.wait(pause)
                    continue
                if self._stopping:
                    self._hand_back_waiting()
                    stop_at = stop_at or time.monotonic() + self.shutdown_timeout
                    if self._busy == 0 and not self._done:
                        break
                    if self._forced or time.monotonic() >= stop_at:
                        code = self._abandon()
                        break
                elif self.burst and not claimed_any and self._idle() and not self._due_now():
                    break
                elif self._stalled():
                    self._hand_back_waiting()
                self._wake.wait(self._sleep_time(stop_at))
        finally:
            self._stopped.set()
            self._slot_free.set()
            for _ in range(self.concurrency):
                self._inbox.put(None)
        logger.info(
            "worker %s stopped: %d jobs done, %d failed attempts",
            self.name,
            self.processed,
            self.failed,
        )
        return code

    def _idle(self) -> bool:
        return self._busy == 0 and not self._done

    def _due_now(self) -> bool:
        return self._deadline is not None and self._deadline <= time.monotonic()

    def _sleep_time(self, stop_at: float | None) -> float:
        if stop_at is not None:
            return max(0.0, min(stop_at - time.monotonic(), self.max_sleep))
        if self._done and self._refill_now():
            return 0.0
        if self._busy >= self.concurrency:
            # Runners wake us for a refill or a failure; waiting jobs need a stall check.
            return PREFETCH_STALL if self._busy > self.concurrency else self.max_sleep
        if self._deadline is None:
            return self.max_sleep
        return max(0.0, min(self._deadline - time.monotonic(), self.max_sleep))

    # -- prefetch ---------------------------------------------------------------

    def _prefetch_size(self) -> int:
        """How many due jobs to claim beyond the runners: as many as the runners get
        through in about PREFETCH_WAIT, judging by recent jobs (none before the first)."""
        if self._job_time is None:
            return 0
        estimate = self._job_time
        if self._busy:  # a job running for long now says more than the average
            with self._lock:
                started = self._run_starts()
            if started:
                estimate = max(estimate, time.monotonic() - min(started))
        per_wait = PREFETCH_WAIT * self.concurrency / max(estimate, 1e-6)
        return min(PREFETCH_MAX, int(per_wait))

    def _refill_now(self) -> bool:
        """Whether the dispatcher should flush and claim now: half the prefetched jobs are
        gone (with no prefetch: a runner is free)."""
        return self._busy < self.concurrency + (self._prefetch + 1) // 2

    def _stalled(self) -> bool:
        """Jobs wait for a runner while every runner is on a job older than PREFETCH_STALL."""
        if self._busy <= self.concurrency:
            return False
        limit = time.monotonic() - PREFETCH_STALL
        with self._lock:
            started = self._run_starts()
        return len(started) >= self.concurrency and max(started) < limit

    def _run_starts(self) -> list[float]:
        """When the jobs runners are on now started (call with the lock held)."""
        return [
            c.started for c in self._running.values() if c.started is not None and not c.finished
        ]

    def _hand_back_waiting(self) -> None:
        """Hand claimed jobs no runner has taken yet back to pending (attempt not counted)."""
        with self._lock:
            waiting = [c for c in self._running.values() if c.started is None and not c.withdrawn]
            for item in waiting:
                item.withdrawn = True
                del self._running[item.id]
            self._busy -= len(waiting)
        if not waiting:
            return
        self._prefetch = 0
        self._release(waiting, "waiting", logger.info)

    def _release(self, items: list[Claimed], what: str, log: Callable[..., None]) -> None:
        """Hand ``items`` back to pending, the attempt not counted; if Redis refuses, they
        are recovered once their lease expires."""
        for queue, entries in _leases_by_queue(items).items():
            try:
                self.store.release(queue, entries, now=self._now())
                log("handed %d %s jobs of %s back to pending", len(entries), what, queue)
            except (DelayQError, redis.exceptions.RedisError) as exc:
                logger.warning(
                    "could not hand back %d %s jobs of %s (%s); they will be recovered",
                    len(entries),
                    what,
                    queue,
                    exc,
                )

    def _wake_groups(self) -> list[list[str]]:
        # One BLPOP may wait on several lists only when they live on one server.
        return [[q] for q in self.queues] if self.store.cluster else [self.queues]

    # -- one round trip: acks, failures, claims ---------------------------------

    def _exchange(self) -> bool:
        """Flush finished jobs and claim due ones; True if any job was claimed."""
        outcomes: list[Outcome] = []
        while self._done:
            outcomes.append(self._done.popleft())
        result_ops = self._result_ops(outcomes)
        claimed_any = False
        order = self.queues[self._rotation :] + self.queues[: self._rotation]
        self._rotation = (self._rotation + 1) % len(self.queues)
        # The acks of the first queue ride in its claim: one script call, not two.
        folded = next(
            (
                op_group
                for op_group in result_ops
                if op_group[0].script == "ack" and op_group[0].queue == order[0]
            ),
            None,
        )
        if folded is not None:
            result_ops.remove(folded)
        ops = [op for op, _ in result_ops]
        deadline: float | None = None
        first = True
        prefetch = self._prefetch_size()
        for queue in order:
            free = self.concurrency + prefetch - self._busy if not self._stopping else 0
            if free <= 0 and not first:
                break
            token = f"{self._token_prefix}:{next(self._tokens)}"
            batch = (
                [
                    *ops,
                    self.store.claim_op(
                        queue,
                        max(free, 0),
                        lease=self.lease,
                        token=token,
                        worker=self.name,
                        now=self._now(),
                        acks=[(o.claimed.id, o.claimed.token, o.claimed.key) for o in folded[1]]
                        if folded
                        else (),
                    ),
                ]
                if first
                else [
                    self.store.claim_op(
                        queue,
                        free,
                        lease=self.lease,
                        token=token,
                        worker=self.name,
                        now=self._now(),
                    )
                ]
            )
            try:
                results = self.store.run(batch)
            except DelayQError:
                if first:
                    for outcome in outcomes:
                        outcome.retried = True
                    self._done.extendleft(reversed(outcomes))
                raise
            claim = results[-1]
            if first:
                if folded is not None:
                    result_ops.append(folded)
                    results.insert(-1, claim if isinstance(claim, Exception) else claim.acked)
                self._handle_results(result_ops, results[:-1])
                first = False
            if isinstance(claim, Exception):
                raise claim
            claimed_any |= self._dispatch(queue, token, claim)
            if claim.jobs:
                self._prefetch = prefetch
            if claim.next_due is not None:
                due = time.monotonic() + (claim.next_due - claim.now)
                deadline = due if deadline is None else min(deadline, due)
        self._deadline = deadline
        return claimed_any

    def _result_ops(self, outcomes: list[Outcome]) -> list[tuple[Op, list[Outcome]]]:
        """One fail op per failure and one ack op per queue, each with its outcomes."""
        ops: list[tuple[Op, list[Outcome]]] = []
        acks: dict[str, list[Outcome]] = {}
        for o in outcomes:
            c = o.claimed
            if o.ok:
                acks.setdefault(c.queue, []).append(o)
            else:
                op = self.store.fail_op(
                    c.queue,
                    c.id,
                    c.token,
                    o.error,
                    delay=o.delay,
                    max_retries=o.max_retries,
                    key=c.key,
                    now=self._now(),
                    **self.dead_options,
                )
                ops.append((op, [o]))
        for queue, group in acks.items():
            entries = [(o.claimed.id, o.claimed.token, o.claimed.key) for o in group]
            ops.append((self.store.ack_op(queue, entries, now=self._now()), group))
        return ops

    def _handle_results(self, ops: list[tuple[Op, list[Outcome]]], results: list[Any]) -> None:
        for (op, group), result in zip(ops, results, strict=True):
            if isinstance(result, Exception):
                # Not connection trouble (that raises): the script refused; the jobs'
                # leases will expire and recovery will retry them.
                logger.error("%s of %d jobs failed: %s", op.script, len(group), result)
            elif op.script == "ack":
                for outcome, ok in zip(group, result, strict=True):
                    if not ok:
                        self._lost(outcome)
            elif result[0] == "dead":
                self._died(group[0], result[1])
            elif result[0] == "lost":
                self._lost(group[0])
        with self._lock:
            for _, group in ops:
                for outcome in group:
                    self._running.pop(outcome.claimed.id, None)

    def _lost(self, outcome: Outcome) -> None:
        log = logger.info if outcome.retried else logger.warning
        log(
            "job %s: lease lost before it was acknowledged (it ran longer than the visibility "
            "timeout without heartbeats, or Redis was unreachable); it may run again",
            outcome.claimed.id,
        )

    def _died(self, outcome: Outcome, died_at: float | None) -> None:
        job = outcome.job or self._job(outcome.claimed, None)
        job = replace(job, status=DEAD, died_at=to_datetime(died_at), lease_until=None)
        logger.error("job %s %s moved to the dead-letter set", job.id, job.task or "?")
        message = f"{outcome.error.get('type')}: {outcome.error.get('message')}"
        signals.send(signals.job_dead, _sender(job.task), job=job, error=message)

    def _dispatch(self, queue: str, token: str, claim: Claim) -> bool:
        for claimed in claim.jobs:
            item = Claimed(queue, claimed.id, token, claimed.record, claimed.attempts)
            with self._lock:
                self._running[item.id] = item
                self._busy += 1
                if self._busy >= self.concurrency:
                    self._slot_free.clear()
            self._inbox.put(item)
        return bool(claim.jobs)

    def _abandon(self) -> int:
        """Hand unfinished jobs back to pending (not counted as attempts); exit code 1."""
        with self._lock:
            finished = {outcome.claimed.id for outcome in self._done}
            unfinished = [i for i in self._running.values() if i.id not in finished]
        self._release(unfinished, "unfinished", logger.warning)
        return 1 if unfinished else 0

    # -- runner threads -------------------------------------------------------

    def _runner(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            started = time.monotonic()
            with self._lock:
                if item.withdrawn:  # handed back to pending while it waited
                    continue
                item.started = started
            try:
                outcome = self._execute(item)
            except BaseException as exc:  # never lose a slot or a job to a bug here
                logger.exception("internal error running job %s", item.id)
                outcome = Outcome(item, ok=False, error=_error_info(exc, item.attempts, self.name))
            item.finished = True
            took = time.monotonic() - started
            average = self._job_time
            self._job_time = took if average is None else average + (took - average) / 8
            with self._lock:
                self._busy -= 1
                self._slot_free.set()
            self._done.append(outcome)
            if not outcome.ok or self._stopping or self._refill_now():
                self._wake.set()

    def _job(self, item: Claimed, fields: dict[str, Any] | None) -> Job:
        fields = fields or empty_fields()
        return Job(
            id=item.id,
            task=fields["task"],
            args=fields["args"],
            kwargs=fields["kwargs"],
            queue=item.queue,
            status=RUNNING,
            attempts=item.attempts,
            max_retries=self._max_retries(fields),
            key=fields["key"],
            created_at=to_datetime(id_timestamp(item.id)),
            worker=self.name,
        )

    def _max_retries(self, fields: dict[str, Any]) -> int:
        if fields["max_retries"] is not None:
            return fields["max_retries"]
        task = _registry.get(fields["task"])
        if task is not None and task.max_retries is not None:
            return task.max_retries
        return self.default_max_retries

    def _execute(self, item: Claimed) -> Outcome:
        close_old_connections()
        try:
            try:
                fields = decode_record(item.record)
            except CorruptJob as exc:
                logger.error("job %s has a corrupt record, dead-lettering it: %s", item.id, exc)
                return Outcome(item, ok=False, error=_error_info(exc, item.attempts, self.name))
            item.key = fields["key"]
            job = self._job(item, fields)
            task = _registry.get(job.task)
            log = logger.isEnabledFor(logging.INFO)
            started = time.perf_counter()
            try:
                if task is None:
                    get_task(job.task)  # raises TaskNotFound with the explanation
                signals.send(signals.job_started, task, job=job)
                if log:
                    logger.info("job %s %s started (attempt %d)", job.id, job.task, job.attempts)
                running = _current_job.set(job)
                try:
                    if task.is_async:
                        result = async_to_sync(task.func)(*job.args, **job.kwargs)
                    else:
                        result = task.func(*job.args, **job.kwargs)
                finally:
                    _current_job.reset(running)
            except BaseException as exc:
                return self._failed(item, job, task, exc, time.perf_counter() - started)
            duration = time.perf_counter() - started
            self.processed += 1
            if log:
                logger.info("job %s %s succeeded in %.1f ms", job.id, job.task, duration * 1000)
            signals.send(signals.job_succeeded, task, job=job, result=result, duration=duration)
            return Outcome(item, ok=True, job=job)
        finally:
            close_old_connections()

    def _failed(
        self, item: Claimed, job: Job, task: Task | None, exc: BaseException, duration: float
    ) -> Outcome:
        self.failed += 1
        tb = "".join(traceback.format_exception(exc))
        will_retry = job.attempts <= job.max_retries
        base = self.retry_backoff
        if task is not None and task.retry_backoff is not None:
            base = float(task.retry_backoff)
        delay = backoff_delay(job.attempts, base, self.retry_backoff_max) if will_retry else -1.0
        logger.warning(
            "job %s %s failed in %.1f ms (attempt %d of %d): %s: %s; %s",
            job.id,
            job.task,
            duration * 1000,
            job.attempts,
            job.max_retries + 1,
            type(exc).__name__,
            exc,
            f"retrying in {delay:.1f} s" if will_retry else "moving it to the dead-letter set",
        )
        signals.send(
            signals.job_failed,
            _sender(job.task),
            job=job,
            exception=exc,
            traceback=tb,
            will_retry=will_retry,
        )
        return Outcome(
            item,
            ok=False,
            job=job,
            error=_error_info(exc, job.attempts, self.name, tb),
            delay=delay,
            max_retries=job.max_retries,
        )

    # -- waker and maintenance threads ------------------------------------------

    def _waker(self, group: list[str]) -> None:
        outage = _Backoff("waker")
        timeout = self.max_sleep  # the store keeps it below the socket's read timeout
        while not self._stopped.is_set() and not self._stopping:
            if self._busy >= self.concurrency:
                self._slot_free.wait(self.max_sleep)
                continue
            try:
                woken = self.store.wait_for_wake(group, timeout)
                outage.ok()
            except (DelayQError, redis.exceptions.RedisError) as exc:
                self._stopped.wait(outage.failed(exc))
                continue
            if not woken:
                continue
            if self._busy >= self.concurrency or self._stopping:
                # We cannot take it: let another worker have it.
                with contextlib.suppress(DelayQError, redis.exceptions.RedisError):
                    self.store.give_back_wake(group[0])
            else:
                self._wake.set()

    def _maintain(self) -> None:
        heartbeat = max(self.lease / 3, 0.05)
        recover_every = min(max(self.lease / 2, 0.25), 30.0)
        next_recover = 0.0
        outage = _Backoff("maintenance")
        while not self._stopped.wait(0 if next_recover == 0.0 else heartbeat):
            try:
                self._heartbeat()
                if time.monotonic() >= next_recover:
                    self.recover()
                    next_recover = time.monotonic() + recover_every
                outage.ok()
            except (DelayQError, redis.exceptions.RedisError) as exc:
                self._stopped.wait(outage.failed(exc))
                next_recover = next_recover or 1.0

    def _heartbeat(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for queue, entries in _leases_by_queue(running).items():
            flags = self.store.extend(queue, entries, self.lease, now=self._now())
            for (job_id, _), ok in zip(entries, flags, strict=True):
                if not ok:
                    logger.warning("job %s: lease lost while running; it may run twice", job_id)

    def recover(self) -> int:
        """Move jobs with expired leases back to pending (or dead); returns how many."""
        total = 0
        for queue in self.queues:
            while True:
                moved = self.store.recover(
                    queue,
                    default_max_retries=self.default_max_retries,
                    now=self._now(),
                    **self.dead_options,
                )
                total += len(moved)
                for job_id, outcome in moved:
                    logger.warning(
                        "job %s recovered from a lost worker: %s",
                        job_id,
                        "dead-lettered" if outcome == "dead" else "back to pending",
                    )
                    raw = self.store.fetch(queue, job_id)
                    if raw is None:
                        continue
                    job = job_from_raw(raw, self.default_max_retries)
                    # The lost worker's attempt failed: job_failed, like any failed attempt.
                    error = job.errors[-1] if job.errors else {}
                    signals.send(
                        signals.job_failed,
                        _sender(job.task),
                        job=job,
                        exception=LeaseLost(error.get("message") or "lease expired"),
                        traceback="",
                        will_retry=outcome != "dead",
                    )
                    if outcome == "dead":
                        signals.send(
                            signals.job_dead,
                            _sender(job.task),
                            job=job,
                            error=job.last_error or "lease expired",
                        )
                if len(moved) < 100:
                    break
        return total


def _leases_by_queue(items: Sequence[Claimed]) -> dict[str, list[tuple[str, str]]]:
    """(job id, lease token) pairs of claimed jobs, per queue: what release/extend take."""
    by_queue: dict[str, list[tuple[str, str]]] = {}
    for item in items:
        by_queue.setdefault(item.queue, []).append((item.id, item.token))
    return by_queue


class _Backoff:
    """Exponential backoff with jitter for a thread that lost Redis; logs once per outage."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.delay = 0.0

    def failed(self, exc: Exception) -> float:
        if self.delay == 0.0:
            logger.warning(
                "%s: Redis unreachable or failing (%s); retrying with backoff", self.what, exc
            )
        self.delay = min(max(self.delay * 2, 0.1), 5.0)
        return self.delay * random.uniform(0.5, 1.0)

    def ok(self) -> None:
        if self.delay:
            logger.warning("%s: Redis is back", self.what)
        self.delay = 0.0


def _sender(task_name: str) -> Any:
    return _registry.get(task_name) or task_name


def _error_info(exc: BaseException, attempt: int, worker: str, tb: str | None = None) -> dict:
    kind = type(exc)
    tb = tb if tb is not None else "".join(traceback.format_exception(exc))
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc)[:MESSAGE_LIMIT],
        "traceback": tb[-TRACEBACK_LIMIT:],
        "attempt": attempt,
        "at": time.time(),
        "worker": worker,
    }
