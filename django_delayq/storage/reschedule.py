"""The reschedule transition (lua/reschedule.lua): a pending job's due time moved, the job
found by id or by unique key, wherever a pending job waits (``pending``, ``ranked``,
``parked``). A base of the Store.

Each call carries an id of its own, marked in ``done`` by the call that moved the job, so
the call is re-sent after a lost reply (:attr:`.ops.Policy.RESEND`) and the re-send answers
what the first send did, moving nothing again (a ``delay=`` counted twice would move the job
twice)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_delayq.jobs.ids import new_job_id
from django_delayq.storage.calls import API_BUDGET, Calls
from django_delayq.storage.milliseconds import ms, now_arg
from django_delayq.storage.ops import Op, Policy
from django_delayq.storage.replies import seconds_of, text


@dataclass(frozen=True)
class Rescheduled:
    id: str
    due_at: float  # epoch seconds
    record: bytes  # b"" when a re-send found the job gone since the first send moved it


def parse_reschedule(reply: list) -> Rescheduled | None:
    if not reply:
        return None
    return Rescheduled(text(reply[0]), seconds_of(reply[1]) or 0.0, reply[2] or b"")


class Reschedule(Calls):
    def reschedule_op(
        self,
        queue: str,
        job_id: str | None = None,
        key: str | None = None,
        *,
        delay: float | None = None,
        at: float | None = None,
        now: float | None = None,
        call_id: str | None = None,
    ) -> Op:
        """``delay`` (seconds from Redis's now) or ``at`` (epoch seconds), exactly one;
        ``job_id`` or ``key``, exactly one. ``call_id``: the call's own id (default: a new
        one), what a re-send is known by."""
        if (not job_id) == (not key):
            raise ValueError("reschedule() needs a job id or a key, exactly one of them")
        if (delay is None) == (at is None):
            raise ValueError("reschedule() needs delay or at, exactly one of them")
        mode, value = ("delay", delay) if at is None else ("at", at)
        argv = (job_id or "", key or "", mode, ms(value), now_arg(now), call_id or new_job_id())
        return self.op(
            "reschedule", queue, (*argv, ""), parse_reschedule, Policy.RESEND, (*argv, "1")
        )

    def reschedule(
        self, queue: str, job_id: str | None = None, key: str | None = None, **options: Any
    ) -> Rescheduled | None:
        """Move a pending job's due time (see :meth:`reschedule_op`): the job as it is now,
        or None when it was not pending (nothing changed)."""
        return self.call(self.reschedule_op(queue, job_id, key, **options), API_BUDGET)
