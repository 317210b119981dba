"""The dispatcher's round trips: deliver finished jobs' results and claim due jobs, one round
trip per queue claimed.

Every round trip may be sent again: a claim re-sent with its token returns the jobs it leased,
acks and failures answer the same twice. So whatever Redis answers (a lost reply, BUSY,
NOSCRIPT, READONLY, WRONGTYPE, an outage), the results of finished jobs are kept and sent again
until Redis takes them (delivery.py), and a claim whose reply was lost is re-sent with its
token and limit as they were.

Before its first claim the exchange writes the registered tasks' rate and concurrency limits
into each queue's control hash, where claim.lua reads them (limits.py); until that write gets
through, it is tried again before each claim.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django_delayq.exceptions import DelayQError
from django_delayq.monitoring.tracing import tracer as current_tracer
from django_delayq.recurring.claims import claimed as recurring_claimed
from django_delayq.storage.finished import Keep, attempt_summary, keep_setting
from django_delayq.storage.store import Claim, Store
from django_delayq.worker.delivery import Results
from django_delayq.worker.execution import Attempt, Outcome
from django_delayq.worker.expiry import sift as sift_expired
from django_delayq.worker.holdings import Holdings
from django_delayq.worker.limits import publish_limits
from django_delayq.worker.prefetch import Prefetch
from django_delayq.worker.starts import Starts
from django_delayq.worker.traced import received

logger = logging.getLogger("django_delayq.worker")


@dataclass
class Found:
    """What the claims of one exchange found, across its queues."""

    deadline: float | None = None  # monotonic time of the next due job
    more_due: bool = False  # a claim left due jobs behind
    error: DelayQError | None = None  # the first error of a round trip


def plain_ack(info: str) -> bool:
    """Whether claim_plain.lua takes the ack of a job of this info (its flags and unique
    key): flags i, k, l, u only (lua/claim_plain.lua)."""
    return not info.strip("ikul")


class Exchange:
    """The round trips of one worker's dispatcher (one thread: not thread-safe)."""

    def __init__(
        self,
        store: Store,
        queues: Sequence[str],
        *,
        instance: str,
        lease: float,
        holdings: Holdings,
        results: Results,
        prefetch: Prefetch,
        starts: Starts,
        stopping: Callable[[], bool],
        now: Callable[[], float | None],
        queue_limits: dict[str, int | None] | None = None,
    ) -> None:
        """``queue_limits``: the queues' concurrency limits (DELAYQ['QUEUES']): published
        with the tasks' limits, and a limited queue is claimed without prefetch, so its
        slots are held only by jobs a runner is about to start."""
        self.store, self.queues, self.instance, self.lease = store, list(queues), instance, lease
        self.queue_limits = queue_limits or dict.fromkeys(self.queues)
        self.holdings, self.results, self.prefetch = holdings, results, prefetch
        self.starts, self.stopping, self.now = starts, stopping, now
        # queue -> (token, limit) of a claim whose reply was lost: sent again as it was
        self._claim_tokens: dict[str, tuple[str, int]] = {}
        self._tokens = itertools.count(1)
        self._rotation = 0
        self.count = 0  # round trips (tests count them)
        self.deadline: float | None = None  # monotonic time of the next due job
        self.more_due = False  # the last claim left due jobs behind
        self.limits_published = False  # @task(rate=, concurrency=) written for claim.lua
        # finished jobs kept, per queue: (max age ms, max count) or (0, 0)
        self.keep = {queue: keep_setting(queue) for queue in self.queues}
        # Per queue, whether it was plain at its last claim (none of ranked, control, parked:
        # claim_plain.lua then claims it); a wrong guess costs one round trip, never a wrong
        # claim (both scripts read the queue's state atomically).
        self.plain = dict.fromkeys(self.queues, True)

    def run(self, claim: bool = True) -> None:
        """Deliver finished jobs' results and, with ``claim``, claim due ones. Results that
        Redis did not take are kept for the next round trip. Raises DelayQError when nothing
        got through (the caller backs off)."""
        self.count += 1
        if claim and not self.limits_published:
            self.limits_published = publish_limits(self.store, self.queues, self.queue_limits)
        outcomes = self.results.take_all()
        fails = [o for o in outcomes if not o.ok]
        acks: dict[str, list[Outcome]] = {}
        for o in outcomes:
            if o.ok:
                acks.setdefault(o.attempt.queue, []).append(o)
        wanted = self.prefetch.wanted()
        found = Found()
        first = True
        tracer = current_tracer()  # OpenTelemetry (worker/traced.py): None when off
        for queue in self._order(acks):
            # A queue with a concurrency limit: no prefetch (a slot is held only by a job
            # a runner or the loop is about to start).
            prefetching = not self.queue_limits[queue]
            token, limit = self._claim_of(queue, claim, wanted if prefetching else 0, prefetching)
            if not first and limit <= 0 and queue not in acks:
                continue
            queue_acks = acks.pop(queue, [])
            started = time.time_ns() if tracer is not None else 0
            result = self._send(queue, token, limit, fails if first else [], queue_acks)
            first = False
            if isinstance(result, Claim) and result.features:
                # claim_plain.lua acknowledged and leased nothing: claim.lua, at once
                self.results.settle_acks(queue_acks, result.acked, result.resent)
                queue_acks, self.plain[queue] = [], False
                result = self._send(queue, token, limit, [], [])
            if isinstance(result, Exception):
                if limit > 0:
                    self._claim_tokens[queue] = (token, limit)  # re-sent as it was next time
                self.results.keep(queue_acks)
                found.error = found.error or (result if isinstance(result, DelayQError) else None)
                continue
            self._claim_tokens.pop(queue, None)
            self.plain[queue] = result.plain
            self.results.settle_acks(queue_acks, result.acked, result.resent)
            self._take(queue, token, result, tracer, started)
            self._note(result, limit, wanted, found)
        if claim:
            self.deadline, self.more_due = found.deadline, found.more_due
        for queue_acks in acks.values():  # only when claim=False: an ack per remaining queue
            self.results.keep(queue_acks)
        if found.error is not None:
            raise found.error

    def flush(self, deadline: float) -> int:
        """A forced stop: deliver the results left, claiming nothing, until ``deadline``
        (time.monotonic()); returns how many could not be delivered."""
        while self.holdings.results_left() and time.monotonic() < deadline:
            try:
                self.run(claim=False)
            except DelayQError as exc:
                logger.warning("forced stop: results not delivered yet (%s); retrying", exc)
                time.sleep(0.2)
        return self.holdings.results_left()

    def _order(self, acks: dict[str, list[Outcome]]) -> list[str]:
        """Queues with acks first (their claims carry them), then the rest in rotation."""
        order = self.queues[self._rotation :] + self.queues[: self._rotation]
        self._rotation = (self._rotation + 1) % len(self.queues)
        order.sort(key=lambda q: q not in acks)
        return order

    def _claim_of(
        self, queue: str, claim: bool, wanted: int, prefetching: bool = True
    ) -> tuple[str, int]:
        """The token and limit of ``queue``'s claim: as many jobs as the runners, the
        prefetch and the event loop take (prefetch.py; none when not claiming or stopping),
        or the lost claim's again."""
        limit = 0
        if claim and not self.stopping():
            limit = self.prefetch.claim_limit(wanted, loop_extra=prefetching)
        return self._claim_tokens.get(queue) or (
            f"{self.instance}#{next(self._tokens)}",
            max(limit, 0),
        )

    def _send(
        self,
        queue: str,
        token: str,
        limit: int,
        fails: list[Outcome],
        acks: list[Outcome],
    ) -> Claim | Exception:
        """One round trip: ``fails``, then the claim carrying ``acks`` (claim_plain.lua for a
        queue plain at its last claim when every ack's job is plain). Settles the failures
        and returns the claim's reply (an exception when it did not get through)."""
        ops: list[Any] = [self.results.fail_op(o) for o in fails]
        plain = self.plain[queue] and all(plain_ack(o.attempt.info) for o in acks)
        ops.append(
            self.store.claim_op(
                queue,
                limit,
                lease=self.lease,
                token=token,
                instance=self.instance,
                acks=self._ack_entries(acks, self.keep[queue]),
                keep=self.keep[queue],
                now=self.now(),
                plain=plain,
            )
        )
        replies = self.store.run(ops)
        self.results.settle_fails(fails, replies[: len(fails)])
        return replies[-1]

    def _ack_entries(self, acks: list[Outcome], keep: Keep) -> list[tuple[str, ...]]:
        """What claim.lua takes of each finished job; with the attempt's summary when
        finished jobs are kept (its number, start on Redis's clock, as the time it ended
        is, duration, due time and this worker's name)."""
        if not keep[0]:
            return [(o.attempt.id, o.attempt.token, o.attempt.info) for o in acks]
        wall = self.starts.redis_now() - time.monotonic()
        name = self.results.executor.worker
        entries = []
        for o in acks:
            a = o.attempt
            began = a.started if a.started is not None else o.ended
            summary = attempt_summary(a.number, wall + began, o.ended - began, name, a.due)
            entries.append((a.id, a.token, a.info, summary))
        return entries

    def _take(
        self, queue: str, token: str, claim: Claim, tracer: Any = None, started: int = 0
    ) -> None:
        self.starts.offset = claim.now - time.time()
        if claim.jobs:
            attempts = [
                Attempt(queue, c.id, token, c.record, c.attempt, due=c.due) for c in claim.jobs
            ]
            attempts = sift_expired(
                self.store, self.results, queue, attempts, claim.now, self.keep[queue]
            )
            if tracer is not None:
                received(tracer, self.store, queue, started, attempts)
            recurring_claimed(self.store, claim.now, attempts, self.now())
            for_loop = self.holdings.add(attempts)
            self.prefetch.claimed(len(attempts), for_loop)

    def _note(self, claim: Claim, limit: int, wanted: int, found: Found) -> None:
        """What a claim says of the prefetch and of the jobs it left behind."""
        if claim.jobs:
            self.prefetch.size = wanted
        if len(claim.jobs) >= limit > 0:
            found.more_due = True
        if claim.next_due is not None:
            due = time.monotonic() + (claim.next_due - claim.now)
            found.deadline = due if found.deadline is None else min(found.deadline, due)
