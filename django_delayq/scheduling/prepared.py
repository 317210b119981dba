"""A validated schedule() call encoded for where it goes (:class:`Prepared`): the record
(with the open batch's link, if any: membership.py), its id, and what the batch of bulk
stores and the outbox need of it. Its :class:`~.plan.Plan` decided the rest."""

from __future__ import annotations

import copy
import time

from django_delayq.conf import delayq_settings
from django_delayq.jobs.finished import SUCCEEDED
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import (
    DEFERRED,
    PENDING,
    RUNNING,
    THROTTLED,
    WAITING,
    Job,
    decode_fields,
    job_alike,
    make_job,
)
from django_delayq.jobs.record import Fields, JobSpec, encode_job, encode_record
from django_delayq.scheduling import membership
from django_delayq.scheduling.expiry import expires_ms
from django_delayq.scheduling.options import (
    unique_for_in_outbox,
)
from django_delayq.scheduling.plan import Plan
from django_delayq.scheduling.registry import Task
from django_delayq.storage.bulk import Entry
from django_delayq.storage.store import Scheduled


class Prepared:
    """A validated schedule() call, encoded for where it goes: Redis now, or the outbox
    (``outbox``: its record has flag 'i', see :meth:`for_outbox`)."""

    __slots__ = (
        "args",
        "encoded",
        "expires_ms",
        "id",
        "kwargs",
        "link",
        "outbox",
        "plan",
        "record",
        "trace",
    )

    def __init__(
        self,
        plan: Plan,
        args: tuple | list,
        kwargs: dict,
        outbox: bool = False,
        link: str | None = None,
        job_id: str | None = None,
        trace: str = "",
        now: float | None = None,
    ) -> None:
        """``now``: the moment a relative ``expires`` counts from (this call's, by default)."""
        if plan.task is not None:
            plan.task.check_call(args, kwargs)
        self.plan = plan
        self.args, self.kwargs = list(args), kwargs
        self.outbox = outbox
        if link is None:  # the open batch's, if any (membership.py)
            member_of = membership.current()
            link = "" if member_of is None else member_of.link
        self.link = link
        # The context of the span that scheduled it (monitoring/tracing.py): never in the
        # outbox (a row has no place for it).
        self.trace = "" if outbox else trace
        # expires=: absolute from this call on (a retry, the outbox, a relay keep it)
        if plan.expires is None:
            self.expires_ms = None
        else:
            self.expires_ms = expires_ms(plan.expires, time.time() if now is None else now)
        self.record = self._encode()
        self.id = new_job_id() if job_id is None else job_id

    def _encode(self) -> bytes:
        plan = self.plan
        # The calls of a plan of one shape (place, link, trace) share what encode_job
        # decided from the spec (the flags, the plain paths, the checks below passed): the
        # first call's encoding, kept on the plan; the others encode their arguments only.
        shape = (self.outbox, bool(self.link), bool(self.trace))
        known = plan.encodings.get(shape)
        if known is not None:
            self.encoded = known
            return self._record(known.flags)
        if plan.held and self.link:
            raise ValueError(
                f"unique_until='end' (task {plan.name}) cannot be used in a batch or chain: "
                "a member's end is its batch's, and a follower waiting for another job has "
                "none yet; schedule it outside the batch"
            )
        if self.outbox and plan.window_ms is not None:
            raise ValueError(unique_for_in_outbox(plan.name, plan.window_ms))
        # A record bound for the outbox may be relayed twice: flag 'i' makes a finished job
        # leave a tombstone, so the second relay never stores it again.
        self.encoded = encode_job(
            JobSpec(
                plan.name,
                self.args,
                self.kwargs,
                plan.key,
                plan.max_retries,
                plan.priority,
                undecided=plan.undecided,
                tombstone=plan.soon,
                outbox=self.outbox,
                linked=bool(self.link),
                grouped=plan.group is not None,
                traced=bool(self.trace),
                expires_ms=self.expires_ms,
                debounced=plan.max_wait is not None,
                window_ms=plan.window_ms,
                held=plan.held,
            )
        )
        plan.encodings[shape] = self.encoded
        return self.encoded.data

    def _record(self, flags: str) -> bytes:
        """This call's record with the ``flags`` encode_job decided for a call of its plan
        and shape: the record encode_job makes of this call's spec."""
        plan = self.plan
        return encode_record(
            plan.name,
            self.args,
            self.kwargs,
            plan.key,
            plan.max_retries,
            flags,
            plan.priority,
            self.expires_ms,
            plan.window_ms,
        )

    def alike(self, args: tuple | list) -> Prepared:
        """Another call of this one's plan, place, link and trace with other positional
        arguments (and none by keyword): schedule_many()'s calls, checked and encoded with
        the flags encode_job decided for this one (they depend on none of the arguments)."""
        plan = self.plan
        if plan.task is not None:
            plan.task.check_call(args, {})
        other = Prepared.__new__(Prepared)
        other.plan, other.outbox, other.link, other.trace = plan, self.outbox, self.link, self.trace
        other.args, other.kwargs, other.encoded = list(args), {}, self.encoded
        other.expires_ms = self.expires_ms
        other.record = other._record(self.encoded.flags)
        other.id = new_job_id()
        return other

    @property
    def plain(self) -> bool:
        """Whether schedule_plain.lua may store it (storage/plain.py)."""
        return self.encoded.plain_schedule

    def for_outbox(self) -> Prepared:
        """This call encoded for the outbox, under the same id: itself when it was (as
        schedule() prepares it, knowing its place); schedule_many() prepares its calls before
        the place of a keyed one is known (an earlier call may take the key)."""
        if self.outbox:
            return self
        bound = copy.copy(self)
        bound.outbox, bound.trace = True, ""
        bound.record = bound._encode()
        return bound

    @property
    def sender(self) -> Task | str:
        """The sender of the job's signals."""
        return self.plan.task or self.plan.name

    def entry(self) -> Entry:
        """The job as one entry of a batch for Redis (batch.py)."""
        plan = self.plan
        return Entry(
            self.id,
            plan.queue,
            self.record,
            plan.when,
            plan.key,
            plan.options["on_conflict"],
            self.link,
            plan.group,
            self.trace,
            plan.max_wait,
        )

    def job(self, result: Scheduled | None) -> Job:
        """The Job this call stored (or kept)."""
        plan = self.plan
        # Created, as most calls are: like the plan's first created Job (the fields of the
        # Job make_job made, but its id, arguments and times), when no expiry differs.
        created = (
            result is not None
            and result.outcome == "created"
            and not result.record
            and result.waits_for is None
            and self.expires_ms is None
        )
        if created and plan.created is not None:
            return job_alike(plan.created, result.id, self.args, self.kwargs, result.due_at)
        fields = Fields(
            plan.name,
            self.args,
            self.kwargs,
            plan.key,
            plan.max_retries,
            priority=plan.priority,
            flags="h" if plan.held else "",
            expires_at=self.expires_ms,
        )
        if result is not None and result.record:  # kept: describe the existing job
            fields = decode_fields(result.record)
        if result is not None and result.outcome == THROTTLED:  # the finished job's id
            return make_job(result.id, plan.queue, SUCCEEDED, fields, 0, outcome=THROTTLED)
        status = PENDING if result is None or result.outcome != "done" else "done"
        if result is not None and result.waits_for is not None:
            status = WAITING  # a follower (unique_until="end")
        elif result is not None and result.record and result.due_at is None:
            status = RUNNING  # kept: the key's job runs (unique_until="end")
        job = make_job(
            result.id if result else self.id,
            plan.queue,
            status,
            fields,
            delayq_settings.MAX_RETRIES,
            score=result.due_at if result else None,
            outcome=DEFERRED
            if result is None
            else "created"
            if status == "done"
            else result.outcome,
            waits_for=result.waits_for if result else None,
        )
        if created:
            plan.created = dict(job.__dict__)  # before anyone reads a cached property of it
        return job


def jobs_of(chunk: list[Prepared], results: dict[str, Scheduled]) -> list[Job]:
    """The Job of each call of ``chunk`` (:meth:`Prepared.job` of its result); a call of the
    plan of the chunk's first created job, created too, is copied from that job's fields."""
    jobs: list[Job] = []
    plan, template = None, None
    for p in chunk:
        result = results[p.id]
        alike = result.outcome == "created" and not result.record and not result.waits_for
        if p.plan is plan and alike:
            jobs.append(job_alike(template, result.id, p.args, p.kwargs, result.due_at))
            continue
        job = p.job(result)
        if plan is None and alike:
            plan, template = p.plan, dict(job.__dict__)
        jobs.append(job)
    return jobs
