"""A worker's background duties, each on a thread of its own so one never waits for another:
heartbeats (extend the leases of the attempts it holds) and recovery (move jobs whose lease
expired, because their worker died, back to pending or to the dead-letter set; then the
sweep of what a crash left of batches and chains, and a step of the scan for followers a
0.7.0 worker left waiting), both run by duties.py's loop; and waking (wait for a schedule()
that makes a job due sooner than the dispatcher's sleep).

Recovery is bounded: at most ``RECOVER_PER_PASS`` jobs per queue per pass, in calls of
``store.RECOVER_LIMIT``, each reply carrying what the signals need, so a backlog of expired
leases costs a few round trips per hundred jobs and never delays a heartbeat.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django_delayq import signals
from django_delayq.batches import forwarding
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.exceptions import DelayQError, LeaseLost
from django_delayq.jobs.job import DEAD, PENDING, decode_fields, make_job
from django_delayq.jobs.record import FLAG_LINKED
from django_delayq.jobs.state import worker_of
from django_delayq.scheduling.registry import sender
from django_delayq.storage.store import RECOVER_LIMIT, Recovered, Store
from django_delayq.wording import counted
from django_delayq.worker.duties import Backoff, Outage
from django_delayq.worker.execution import FINISHED
from django_delayq.worker.history import HistoryCounts

if TYPE_CHECKING:
    from django_delayq.worker.execution import Attempt, Executor

logger = logging.getLogger("django_delayq.worker")

RECOVER_PER_PASS = 1_000


def by_queue(attempts: Iterable[Attempt]) -> dict[str, list[tuple[str, str]]]:
    """(job id, lease token) of attempts, per queue: what extend and release take."""
    leases: dict[str, list[tuple[str, str]]] = {}
    for attempt in attempts:
        leases.setdefault(attempt.queue, []).append(attempt.lease)
    return leases


def release(
    store: Store,
    executor: Executor,
    attempts: list[Attempt],
    what: str,
    now: float | None,
    budget: float = 1.0,
    history: HistoryCounts | None = None,
) -> bool:
    """Hand ``attempts`` back to pending, the attempt not counted; False if Redis refused
    (they are then recovered once their lease expires, still without counting). A job
    release.lua dead-letters instead (another pending job holds its unique key) is counted
    dead in ``history``."""
    ok = True
    for queue, leases in by_queue(attempts).items():
        try:
            replies = store.release(queue, leases, now=now, budget=budget)
            if history is not None and (dead := replies.count(2)):
                history.add(queue, "x", dead)
            logger.info(
                "handed %s back to pending (%s, queue %s)", counted(len(leases), "job"), what, queue
            )
        except DelayQError as exc:
            ok = False
            logger.warning(
                "could not hand back %s (%s, queue %s: %s); they will be recovered once "
                "their lease expires",
                counted(len(leases), "job"),
                what,
                queue,
                exc,
            )
    if signals.job_released.receivers:
        for attempt in attempts:
            if attempt.fields is None:
                attempt.fields = decode_fields(attempt.record)
            job = replace(executor.job(attempt), status=PENDING, worker=None)
            signals.send(signals.job_released, sender(job.task), job=job)
    return ok


class Heartbeat:
    """Extends the leases of every attempt a worker holds, every ``lease / 3`` seconds
    (a duty: duties.py runs it)."""

    name = what = "heartbeat"
    log = logger

    def __init__(
        self,
        store: Store,
        lease: float,
        holding: Callable[[], list[Attempt]],
        now: Callable[[], float | None],
    ) -> None:
        self.store, self.lease, self.holding, self.now = store, lease, holding, now
        self.interval = max(lease / 3, 0.05)
        self.first = self.interval  # the leases were just taken
        self.beats = 0

    def step(self) -> float:
        self.beat()
        return self.interval

    def retry_in(self, exc: Exception, backoff: float) -> float:
        return min(backoff, self.interval)

    def beat(self) -> None:
        self.beats += 1
        attempts = self.holding()
        for queue, leases in by_queue(attempts).items():
            flags = self.store.extend(queue, leases, self.lease, now=self.now())
            for attempt, ok in zip((a for a in attempts if a.queue == queue), flags, strict=True):
                # A finished attempt's ack may have landed since the snapshot: its lease is gone
                # for a good reason, and a lost one is reported when its result is settled.
                if not ok and not attempt.lease_lost and attempt.state != FINISHED:
                    attempt.lease_lost = True
                    logger.warning(
                        "job %s: lease lost while this worker holds it (it ran past the "
                        "visibility timeout while Redis was unreachable); it may run twice",
                        attempt.id,
                    )


class Recovery:
    """Finds expired leases in the worker's queues and settles them, sending the signals a
    failed attempt sends (``job_failed`` with ``LeaseLost``; ``job_dead``). A duty
    (duties.py runs it) every ``every`` seconds; it checks ``stopped`` between batches."""

    name = what = "recovery"
    log = logger
    first = 0.0

    def __init__(
        self,
        store: Store,
        queues: list[str],
        instance: str,
        options: dict[str, Any],
        default_max_retries: int,
        stopped: threading.Event,
        now: Callable[[], float | None],
        every: float,
    ) -> None:
        self.store, self.queues, self.instance = store, queues, instance
        self.options, self.default_max_retries = options, default_max_retries
        self.stopped, self.now, self.every = stopped, now, every
        self._tokens = itertools.count(1)
        self._follower_scans: dict[str, int] = {}  # queue -> its scan's cursor
        self.passes = 0
        self.history: HistoryCounts | None = None  # counts its failures and deaths

    def step(self) -> float:
        self.run_pass()
        self.sweep()  # what a crash left of batches and chains
        self.promote_followers()  # what a 0.7.0 worker's end of a leader left waiting
        return self.every

    def retry_in(self, exc: Exception, backoff: float) -> float:
        return backoff

    def sweep(self) -> None:
        """Forward what a crash left of batches and chains: entries older than a lease (at
        most LEFTOVER_AFTER), as expired leases are recovered after one."""
        leftover = min(forwarding.LEFTOVER_AFTER, max(self.every * 2, 1.0))
        forwarding.sweep(self.store, self.queues, leftover_after=leftover)

    def promote_followers(self) -> list[str]:
        """One step of each queue's scan for followers whose leader ended without promoting
        them (a 0.7.0 worker's ack, failure or recovery), in one round trip: those it made
        pending (storage/followers.py). Raises what Redis raises (the duty's backoff)."""
        now = self.now()
        ops = [
            self.store.followers.promote_op(q, self._follower_scans.get(q, 0), now=now)
            for q in self.queues
        ]
        promoted, failed = [], None
        for queue, reply in zip(self.queues, self.store.run(ops), strict=True):
            if isinstance(reply, Exception):
                failed = reply  # that queue's step is taken again at the next pass
                continue
            self._follower_scans[queue], ids = reply
            for fid in ids:
                logger.info("job %s: its key's job ended on an older worker; pending now", fid)
            promoted += ids
        if failed is not None:
            raise failed
        return promoted

    def run_pass(self, limit: int = RECOVER_PER_PASS) -> int:
        """Recover up to ``limit`` jobs per queue; returns how many were moved."""
        self.passes += 1
        total = 0
        for queue in self.queues:
            moved = 0
            while moved < limit and not self.stopped.is_set():
                batch = self.store.recover(
                    queue,
                    token=f"{self.instance}#r{next(self._tokens)}",
                    instance=self.instance,
                    default_max_retries=self.default_max_retries,
                    now=self.now(),
                    limit=min(RECOVER_LIMIT, limit - moved),
                    **self.options,
                )
                for recovered in batch:
                    self._settled(queue, recovered)
                dead = [
                    (queue, r.id)
                    for r in batch
                    if r.outcome == "dead" and FLAG_LINKED in decode_fields(r.record).flags
                ]
                if dead:  # their ends go to their batches or chains
                    forwarding.forward_ids(self.store, dead)
                moved += len(batch)
                if len(batch) < RECOVER_LIMIT:
                    break
            total += moved
        return total

    def burst_pass(self) -> int | None:
        """--burst: recover every expired lease; how many moved, None when Redis refused
        (an error reply such as WRONGTYPE: logged, and the worker exits 1 at the end).
        Raises ConnectionError when Redis is unreachable."""
        try:
            moved = self.run_pass(limit=10**9)
            self.sweep()
            return moved
        except DelayQConnectionError:
            raise
        except DelayQError as exc:
            logger.error("--burst: expired leases could not be recovered: %s", exc)
            return None

    def _settled(self, queue: str, recovered: Recovered) -> None:
        lost = worker_of(recovered.lost_token) or "?"
        if recovered.outcome == "refund":
            logger.info(
                "job %s: worker %s stopped before starting it; back to pending (attempt not "
                "counted)",
                recovered.id,
                lost,
            )
            return
        dead = recovered.outcome == "dead"
        if self.history is not None:  # a lost lease is a failed attempt (job_failed below)
            self.history.add(queue, "f")
            if dead:
                self.history.add(queue, "x")
        logger.warning(
            "job %s recovered from a lost worker: %s (worker %s stopped heartbeating)",
            recovered.id,
            "dead-lettered" if dead else "back to pending",
            lost,
        )
        error = recovered.error or {}
        job = make_job(
            recovered.id,
            queue,
            DEAD if dead else PENDING,
            decode_fields(recovered.record),
            self.default_max_retries,
            attempts=recovered.attempts,
            errors=[error] if error else [],
        )
        message = f"lease expired: worker {lost} stopped heartbeating (crashed, killed or cut off)"
        signals.send(
            signals.job_failed,
            sender(job.task),
            job=job,
            exception=LeaseLost(message),
            traceback="",
            will_retry=not dead,
        )
        if dead:
            signals.send(
                signals.job_dead, sender(job.task), job=job, error=job.last_error or message
            )


class Waker:
    """Waits in BLPOP on the queues' wake lists, only while a runner is idle (it waits for one
    first, never spinning), and hands a token it cannot use back to the other workers."""

    def __init__(
        self,
        store: Store,
        queues: list[str],
        timeout: float,
        wait_for_idle_runner: Callable[[], bool],
        woken: Callable[[], bool],
        outage: Outage | None = None,
    ) -> None:
        self.store, self.queues, self.timeout = store, queues, timeout
        self.wait_for_idle_runner, self.woken = wait_for_idle_runner, woken
        self.outage = outage  # the worker's (duties.py)
        self.waits = 0  # BLPOPs sent (tests count them: a spinning waker sends thousands)

    def loop(self) -> None:
        outage = Backoff("waker", outage=self.outage)
        while self.wait_for_idle_runner():
            self.waits += 1
            try:
                got = self.store.wait_for_wake(self.queues, self.timeout)
                outage.ok()
            except DelayQError as exc:
                time.sleep(outage.failed(exc))
                continue
            if got and not self.woken():
                with contextlib.suppress(DelayQError):
                    self.store.give_back_wake(self.queues[0])


def wakers_for(
    store: Store, queues: Sequence[str], max_sleep: float, runners: Any, outage: Outage
) -> list[Waker]:
    """The wakers of a worker's queues: one BLPOP may wait on several lists only when they
    live on one server, so on a cluster each queue has its own."""
    groups = [[q] for q in queues] if store.cluster else [queues]
    return [
        Waker(store, group, max_sleep, runners.wait_for_idle_runner, runners.woken, outage)
        for group in groups
    ]
