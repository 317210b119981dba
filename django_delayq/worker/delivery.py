"""Results of finished attempts on their way to Redis.

The dispatcher (dispatch.py) sends failures and acks in its round trips; this module builds the
failure ops, reads Redis's answers to them, and keeps every result that Redis did not take
(a lost reply, BUSY, NOSCRIPT, READONLY, WRONGTYPE, an outage) for the next round trip: a
finished job's result is never dropped. Acks and failures answer the same when sent twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django_delayq.jobs.record import FLAG_LINKED
from django_delayq.storage.store import Store
from django_delayq.worker.execution import Executor, Outcome
from django_delayq.worker.forwarder import Forwarder
from django_delayq.worker.history import HistoryCounts
from django_delayq.worker.holdings import Holdings

logger = logging.getLogger("django_delayq.worker")


class Results:
    """Delivers the outcomes a worker's runners leave in its ``holdings``, and settles the
    attempts there once Redis took their results."""

    def __init__(
        self,
        store: Store,
        executor: Executor,
        holdings: Holdings,
        dead_options: dict[str, Any],
        default_max_retries: int,
        now: Callable[[], float | None],
        forwarder: Forwarder,
        history: HistoryCounts | None = None,
    ) -> None:
        """``history``: the queues' history, counted as attempts settle (None: off)."""
        self.forward = forwarder.notify  # the ends of linked jobs go there (forwarder.py)
        self.store = store
        self.executor = executor
        self.holdings = holdings
        self.dead_options = dead_options
        self.default_max_retries = default_max_retries
        self.now = now
        self.history = history

    def take_all(self) -> list[Outcome]:
        """Every outcome not delivered yet, for the next round trip."""
        return self.holdings.take_results()

    def fail_op(self, outcome: Outcome) -> Any:
        a = outcome.attempt
        return self.store.fail_op(
            a.queue,
            a.id,
            a.token,
            outcome.error,
            delay=outcome.delay,
            default_max_retries=self.default_max_retries,
            now=self.now(),
            **self.dead_options,
        )

    def keep(self, outcomes: list[Outcome]) -> None:
        """Results Redis did not take: deliver them in the next round trip."""
        if not outcomes:
            return
        for o in outcomes:
            o.resends += 1
        self.holdings.return_results(outcomes)

    def settle_fails(self, outcomes: list[Outcome], results: list[Any]) -> None:
        kept, linked, settled = [], [], []
        for outcome, result in zip(outcomes, results, strict=True):
            if isinstance(result, Exception):
                if outcome.resends == 0:
                    logger.warning(
                        "job %s: failure not recorded yet (%s)", outcome.attempt.id, result
                    )
                kept.append(outcome)
                continue
            self.holdings.settle(outcome.attempt)
            what, when = result
            if self.history is not None:
                settled.append((outcome.attempt, "f" if what != "lost" else "", what == "dead"))
            if what == "dead":
                if _linked(outcome):
                    linked.append((outcome.attempt.queue, outcome.attempt.id))
                self.executor.died(outcome, when)
            elif what == "lost":
                self.executor.lost(outcome)
        self.keep(kept)
        if self.history is not None and settled:
            self.history.settled(settled)
        if linked:
            self.forward(linked)

    def settle_acks(self, outcomes: list[Outcome], flags: list[int], resent: bool = False) -> None:
        """``resent``: the answers of a claim the transport re-sent after a lost reply."""
        linked, settled = [], []
        for outcome, flag in zip(outcomes, flags, strict=True):
            self.holdings.settle(outcome.attempt)
            lost = flag == -1 or (flag == 0 and not outcome.resends and not resent)
            if lost:
                self.executor.lost(outcome)  # 0 after a re-send: the lost round trip acked it
            if self.history is not None:
                settled.append((outcome.attempt, "" if lost else "d", False))
            if flag >= 0 and _linked(outcome):
                # A batch member or chain step: its end goes on. 0 too: gone may be this very
                # ack, re-sent by the transport after a lost reply (its entry is there then).
                linked.append((outcome.attempt.queue, outcome.attempt.id))
        if self.history is not None and settled:
            self.history.settled(settled)
        if linked:
            self.forward(linked)


def _linked(outcome: Outcome) -> bool:
    """Whether the attempt's job is linked (record flag 'l': batches/links.py)."""
    return FLAG_LINKED in outcome.attempt.info.partition("=")[0]
