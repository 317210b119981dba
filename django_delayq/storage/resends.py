"""Re-sending commands (the transport's retry policy; not a job's retries, which are
worker/execution.py's): after a round trip, which failed ops are sent again, which have their
final answer, and how long to pause in between. :meth:`.transport.Transport.run` applies it.

- Redis did not run the command (no connection could be made; or it answered one of
  :data:`.errors.NOT_RUN`): every op is sent again (the transport loads the script after
  ``NOSCRIPT``, reconnects after ``READONLY`` (a failover) and refreshes the cluster's slots
  after ``MOVED``/``ASK``).
- The connection broke after the command was written, so Redis may have run it (a lost
  reply): only ops with :attr:`.ops.Policy.RESEND` are sent again, with their resend args;
  they are idempotent by construction (each script's header says how). An op with
  :attr:`.ops.Policy.ONCE` answers :class:`~django_delayq.exceptions.OutcomeUnknown` instead,
  and so does a re-sent op whose budget ran out before Redis answered it.
- Any other error reply is that op's final answer (:func:`.errors.translate`).

Between rounds: 50 ms, doubling, at most 1 s; no pause when only scripts were missing (the
transport has just loaded them). This is the only retry layer: redis-py's own ``Retry``
never runs here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from django_delayq.exceptions import OutcomeUnknown
from django_delayq.storage.errors import (
    BROKEN,
    NOT_RUN,
    SLOTS_MOVED,
    code,
    translate,
    unavailable,
)
from django_delayq.storage.ops import Op, Policy

FIRST_PAUSE = 0.05
MAX_PAUSE = 1.0


class Failure:
    """Why one op has no answer yet: the error, and whether Redis may have run it."""

    __slots__ = ("exc", "maybe_ran")

    def __init__(self, exc: BaseException, maybe_ran: bool) -> None:
        self.exc, self.maybe_ran = exc, maybe_ran


# The errors reading one reply can raise, for reply_failure().
READ_ERRORS = (
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ResponseError,
    *BROKEN,
    redis.exceptions.InvalidResponse,
)
NOSCRIPT, RECONNECT, LOST = "noscript", "reconnect", "lost"


def reply_failure(exc: BaseException) -> tuple[Failure, str]:
    """What one of READ_ERRORS, raised reading a reply, means, for the sync and the asyncio
    transport alike: the op's Failure, and what the transport does next: ``NOSCRIPT``
    (forget the loaded scripts), ``RECONNECT`` (a failover: close the connection), ``LOST``
    (the connection broke: this reply and the ones after it are lost, the ops may have
    run), or ``""``."""
    if isinstance(exc, redis.exceptions.BusyLoadingError):  # -LOADING: not run
        return Failure(exc, maybe_ran=False), ""
    if isinstance(exc, redis.exceptions.ResponseError):
        then = {"NOSCRIPT": NOSCRIPT, "READONLY": RECONNECT}.get(code(exc) or "", "")
        return Failure(exc, maybe_ran=False), then
    return Failure(exc, maybe_ran=True), LOST


class Resends:
    """The re-sends of one list of ops, within ``budget`` seconds. ``resent``: the ops were
    sent before and their replies lost (they go with their resend args from the start).
    ``started``: the ``time.monotonic()`` the budget counts from (default: now)."""

    def __init__(
        self, ops: Sequence[Op], budget: float, resent: bool = False, started: float | None = None
    ) -> None:
        self.ops = ops
        self.deadline = (time.monotonic() if started is None else started) + budget
        # Indexes of the ops Redis may have run already: sent again with their resend args.
        self.resent: set[int] = set(range(len(ops))) if resent else set()
        self.pause = FIRST_PAUSE
        self.slots_moved = False  # the last round met MOVED, ASK, CLUSTERDOWN or TRYAGAIN

    def triage(self, failures: dict[int, Failure], results: list[Any]) -> list[int]:
        """Put the final answers among ``failures`` in ``results``; the indexes of the ops
        to send again."""
        again = []
        self.slots_moved = False
        for i, failure in failures.items():
            exc = failure.exc
            if isinstance(exc, redis.exceptions.ResponseError):
                if code(exc) not in NOT_RUN:
                    results[i] = translate(exc)
                    continue
                self.slots_moved |= code(exc) in SLOTS_MOVED
            elif failure.maybe_ran:
                op = self.ops[i]
                if op.policy is not Policy.RESEND:
                    results[i] = OutcomeUnknown(
                        f"the connection to Redis broke after {op.name} was sent "
                        f"({exc}): Redis may or may not have run it"
                    )
                    continue
                self.resent.add(i)
            again.append(i)
        return again

    def give_up(self, again: list[int], failures: dict[int, Failure], results: list[Any]) -> bool:
        """When no round fits in the budget any more: the last answers of ``again`` put in
        ``results``, and True."""
        if time.monotonic() + self.pause <= self.deadline:
            return False
        for i in again:
            results[i] = (
                OutcomeUnknown(
                    f"{self.ops[i].name} was sent, its reply was lost, and Redis could not "
                    f"be reached again ({failures[i].exc}): Redis may or may not have "
                    "run it"
                )
                if i in self.resent
                else unavailable(failures[i].exc)
            )
        return True

    def wait(self, again: list[int], failures: dict[int, Failure]) -> None:
        """Pause before the next round, unless only scripts were missing (they are loaded)."""
        pause = self.next_pause(again, failures)
        if pause:
            time.sleep(pause)

    def next_pause(self, again: list[int], failures: dict[int, Failure]) -> float:
        """Seconds to pause before the next round (0: only scripts were missing), the pause
        after it doubled (the asyncio transport awaits it instead of sleeping)."""
        if {code(failures[i].exc) for i in again} == {"NOSCRIPT"}:
            return 0.0
        pause, self.pause = self.pause, min(self.pause * 2, MAX_PAUSE)
        return pause
