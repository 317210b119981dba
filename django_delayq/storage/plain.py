"""The plain path of schedule (lua/schedule_plain.lua): a job whose record needs none of
schedule.lua's features (no unique key, priority, group, link or trace: the record says it,
jobs/record.py's ``Encoded.plain_schedule``), off the outbox and not relayed, is stored by a
script of a fraction of schedule.lua's Lua on four of its keys. The caller (scheduling)
chooses; :meth:`PlainSchedule.job_op` builds the op of either script."""

from __future__ import annotations

from functools import partial
from typing import Any

from django_delayq.storage.calls import Calls
from django_delayq.storage.milliseconds import ms, now_arg
from django_delayq.storage.ops import Op, Policy
from django_delayq.storage.replies import parse_schedule_plain


class PlainSchedule(Calls):
    """The op of schedule_plain.lua, and the choice between it and schedule.lua."""

    def schedule_plain_op(
        self,
        queue: str,
        job_id: str,
        record: bytes,
        *,
        delay: float | None = None,
        at: float | None = None,
        now: float | None = None,
        remember: bool = False,
    ) -> Op:
        """``remember``: the script adds the queue to ``{prefix}:queues`` (one Redis only).
        Re-sent after a lost reply with its 'sent again' flag: a job that finished since
        (its tombstone, flag 'i') answers 'done' and is not stored again."""
        mode, value = ("delay", delay or 0.0) if at is None else ("at", at)
        argv = (job_id, record, mode, ms(value), now_arg(now))
        tail = (queue,) if remember else ()
        return self.op(
            "schedule_plain",
            queue,
            (*argv, "", *tail),
            partial(parse_schedule_plain, job_id),
            Policy.RESEND,
            (*argv, "1", *tail),
            extra_key=self.queues_key if remember else "",
        )

    def job_op(
        self, queue: str, job_id: str, record: bytes, plain: bool, remember: bool, **options: Any
    ) -> Op:
        """schedule_plain.lua's op when ``plain`` (the caller's word: see the module), with
        the options a plain job has (``delay``/``at``, ``now``; a unique key, group, link or
        trace cannot be given with it), else schedule.lua's."""
        if not plain:  # store.py's
            return self.schedule_op(  # type: ignore[attr-defined]
                queue, job_id, record, remember=remember, **options
            )
        if options.get("key") or options.get("group") or options.get("link"):
            raise ValueError("a job with a unique key, group or link is not plain")
        if options.get("trace") or options.get("relay") or options.get("adopt"):
            raise ValueError("a traced or relayed job is not plain")
        return self.schedule_plain_op(
            queue,
            job_id,
            record,
            delay=options.get("delay"),
            at=options.get("at"),
            now=options.get("now"),
            remember=remember,
        )
