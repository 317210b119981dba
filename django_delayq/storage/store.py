"""The Store: the state transitions of jobs (schedule, claim, ack, fail, cancel...).

It deals in queue names, job ids, record bytes and float epoch scores, never in callables,
models or signals. Every multi-step state change is one Lua script in ``lua/`` (each file's
header documents its KEYS, ARGV, reply and how it answers when sent twice; the script's
contract is beside each method here). Transitions are built as :class:`~.ops.Op` objects
(:mod:`.calls`), so the worker can send several (failures, acks and the next claim) in one
round trip. Its public surface is listed in ``storage/__init__.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import Any

from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.storage.batches import BatchStore
from django_delayq.storage.calls import API_BUDGET, WORKER_BUDGET
from django_delayq.storage.control import ControlStore
from django_delayq.storage.finished import FinishedStore, Keep, keep_setting
from django_delayq.storage.followers import FollowerStore
from django_delayq.storage.history import HistoryStore
from django_delayq.storage.manual import PURGE_CHUNK, ManualOps  # noqa: F401 (PURGE_CHUNK: its 0.6 path)
from django_delayq.storage.marks import StartMarks
from django_delayq.storage.milliseconds import ms, now_arg
from django_delayq.storage.old_layout import OldLayoutStore
from django_delayq.storage.ops import Op, Policy, pack_jobs
from django_delayq.storage.plain import PlainSchedule
from django_delayq.storage.reads import Reads
from django_delayq.storage.recurring import RecurringStore
from django_delayq.storage.replies import (  # the reply types are part of the store's interface
    Claim,
    Recovered,
    Scheduled,
    parse_cancel,
    parse_claim,
    parse_flags,
    parse_ints,
    parse_many,
    parse_outcome,
    parse_recovered,
    parse_resent_claim,
    parse_schedule,
)
from django_delayq.storage.reschedule import Reschedule
from django_delayq.storage.roster import Roster
from django_delayq.storage.scripts import lib_constant
from django_delayq.storage.traces import TraceStore

RECOVER_LIMIT = 100
# How long (seconds) a finished job's tombstone is kept (lua/include/base.lua, in milliseconds): a
# schedule() re-sent within it never stores a finished job again. It must exceed API_BUDGET.
DONE_TTL = lib_constant("DONE_TTL") / 1000
assert DONE_TTL > 10 * API_BUDGET


def _quadruples(entries: Iterable[tuple[str, ...]]) -> list[str]:
    """Ack entries as the scripts take them: (id, token, info, attempt), attempt '' when
    the entry has none."""
    return [part for entry in entries for part in (entry if len(entry) == 4 else (*entry, ""))]


class Store(PlainSchedule, Reschedule, Reads, ManualOps):
    """Byte-level access to one Redis (or Redis Cluster) for one key prefix."""

    # -- subject stores, each built on first use and sending through this Store ----------
    batches = cached_property(BatchStore)  # batches, forward entries, chains (batches.py)
    control = cached_property(ControlStore)  # pause, ranked set, published limits (control.py)
    roster = cached_property(Roster)  # the live workers (roster.py)
    finished = cached_property(FinishedStore)  # finished jobs kept (finished.py)
    followers = cached_property(FollowerStore)  # followers left waiting (followers.py)
    recurring = cached_property(RecurringStore)  # occurrences, schedule versions (recurring.py)
    traces = cached_property(TraceStore)  # trace contexts beside traced jobs (traces.py)
    history = cached_property(HistoryStore)  # per-minute counts, kept 72 h (history.py)
    old_layout = cached_property(OldLayoutStore)  # the 0.1 layout, for the upgrade

    def marker(self) -> StartMarks:
        """Start marks for one worker (a connection of their own; see mark_op)."""
        return StartMarks(self.transport, self)

    # -- operations (see lua/<name>.lua for each contract) --------------------

    def schedule_op(
        self,
        queue: str,
        job_id: str,
        record: bytes,
        *,
        delay: float | None = None,
        at: float | None = None,
        key: str | None = None,
        on_conflict: str = "replace",
        now: float | None = None,
        relay: bool = False,
        adopt: bool = False,
        remember: bool = False,
        link: str = "",
        group: str | None = None,
        trace: str = "",
        max_wait: float | None = None,
        first_due: float | None = None,
    ) -> Op:
        """``remember``: the script adds the queue to ``{prefix}:queues`` (one Redis only).
        ``relay``: the job may have reached Redis before (a row relayed again after a crash between
        the Redis write and the row's delete), so even the first send is marked as sent again: a
        stored or finished job (tombstone: flag 'i') is not stored again. ``adopt``: the relay of an
        outbox row: an id marked relayed is never stored again (the id is marked), and a pending job
        of another id holding ``key`` is removed, this one taking the key under ``job_id`` (the row
        took the key in the database). ``link``: the job's link (batches/links.py; flag 'l'), stored
        beside it in the same script; ``group``: its group (flag 'g', lua/claim.lua), and ``trace``
        its creation context (flag 't', storage/traces.py): the same. ``max_wait`` (s, with ``key``,
        flag 'd'): a replace caps the key's job at its first due time plus this (ARGV[14], Redis's
        clock); ``first_due``: a relayed row's first due time (ARGV[15])."""
        mode, value = ("delay", delay or 0.0) if at is None else ("at", at)
        argv = (job_id, record, mode, ms(value), key or "", on_conflict, now_arg(now))
        first, last, more = "1" if relay else "", "1" if adopt else "", link or group or trace
        tail = (last, queue, link) if remember else (last, "", link) if more else (last,)
        tail = (*tail, group or "", trace) if trace else (*tail, group) if group else tail
        if max_wait is not None:
            tail = (last, queue if remember else "", link, group or "", trace, ms(max_wait))
            tail = tail if first_due is None else (*tail, ms(first_due))
        return self.op(
            "schedule",
            queue,
            (*argv, first, *tail),
            parse_schedule,
            Policy.RESEND,
            (*argv, "1", *tail),
            extra_key=self.queues_key if remember else "",
        )

    def schedule(
        self, queue: str, job_id: str, record: bytes, plain: bool = False, **options: Any
    ) -> Scheduled:
        """Store a job and add its queue to ``{prefix}:queues`` (every call: nothing caches
        what Redis holds): on one Redis the script adds it, one reply; on a cluster (another
        slot) a SADD goes beside it. Both may be re-sent. ``plain``: by schedule_plain.lua
        (plain.py)."""
        if not self.cluster:
            return self.call(self.job_op(queue, job_id, record, plain, True, **options))
        op = self.job_op(queue, job_id, record, plain, False, **options)
        registered, result = self.run([self.remember_queue_op(queue), op], API_BUDGET)
        if isinstance(result, Exception):
            raise result
        if isinstance(registered, Exception):
            raise registered
        return result

    def schedule_with_result(
        self,
        queue: str,
        job_id: str,
        record: bytes,
        result: bytes,
        ttl: float | None,
        plain: bool = False,
        **options: Any,
    ) -> Scheduled:
        """SET the job's django.tasks result (expiring after ``ttl`` seconds, None: never),
        then schedule the job, so no worker claims it before its result exists (on a
        cluster, where the result lives on another node, one round trip after the other).
        Both may be re-sent; the result is deleted again if the script refuses the job."""
        result_op = self.result_op(job_id, result, ttl)
        if self.cluster:
            self.call(result_op)
            op = self.job_op(queue, job_id, record, plain, False, **options)
            registered, scheduled = self.run([self.remember_queue_op(queue), op], API_BUDGET)
        else:
            registered = None  # the script remembers the queue (as in schedule())
            op = self.job_op(queue, job_id, record, plain, True, **options)
            _, scheduled = self.run([result_op, op], API_BUDGET)
        if isinstance(scheduled, Exception):
            if not isinstance(scheduled, DelayQConnectionError):
                key = self.result_key(job_id)
                self.run([self.command(b"DEL", key, route=key)], API_BUDGET)
            raise scheduled
        if isinstance(registered, Exception):
            raise registered
        return scheduled

    def schedule_many_op(
        self,
        queue: str,
        jobs: Sequence[tuple[Any, ...]],
        now: float | None = None,
        relay: bool = False,
    ) -> Op:
        """One schedule_many.lua call for jobs without unique keys: (id, record, when) or
        (id, record, when, link), ``when`` being ``{"delay": seconds}`` or ``{"at": epoch}``,
        ``link`` the job's link (batches/links.py) or "". Parses to one
        Scheduled per job, in order. ``relay``: the relay of outbox rows (as for
        :meth:`schedule_op`: a job is never stored twice, the ids are marked relayed)."""
        packed, count, plan = pack_jobs(jobs)
        now_value = now_arg(now)
        return self.op(
            "schedule_many",
            queue,
            (now_value, "relay" if relay else ""),
            lambda reply: parse_many(reply, plan),
            Policy.RESEND,
            (now_value, "relay" if relay else "1"),
            packed_tail=(packed, count),
        )

    def unmark_relayed_op(self, queue: str, ids: Sequence[str]) -> Op:
        """ZREM the relayed marks of ``ids`` (their outbox rows' DELETE committed)."""
        key = self.key(queue, "relayed")
        return self.command(b"ZREM", key, *ids, route=key)

    def claim_op(
        self,
        queue: str,
        limit: int,
        *,
        lease: float,
        token: str,
        instance: str = "",
        acks: Iterable[tuple[str, ...]] = (),
        keep: Keep | None = None,
        now: float | None = None,
        plain: bool = False,
    ) -> Op:
        """``acks``: (id, token, info[, attempt]) of finished jobs, acknowledged in the same
        call before claiming; their flags come back in ``Claim.acked``. ``keep``: (max age
        ms, max count) of finished jobs kept (None: the settings'). ``plain``: sent as
        claim_plain.lua (every ack's info ''), which answers ``Claim.features`` and leases
        nothing on a queue using features."""
        argv: list[Any] = [now_arg(now), int(limit), ms(lease), token, instance]
        argv += keep or keep_setting(queue)
        argv += _quadruples(acks)
        name = "claim_plain" if plain else "claim"
        return self.op(name, queue, argv, parse_claim, parse_resent=parse_resent_claim)

    def claim(self, queue: str, limit: int, **options: Any) -> Claim:
        return self.call(self.claim_op(queue, limit, **options), WORKER_BUDGET)

    def ack_op(
        self,
        queue: str,
        entries: Iterable[tuple[str, ...]],
        now: float | None = None,
        keep: Keep | None = None,
    ) -> Op:
        """``entries``: (id, token, info[, attempt]), as :meth:`claim_op`'s acks."""
        argv: list[Any] = [now_arg(now), *(keep or keep_setting(queue)), *_quadruples(entries)]
        return self.op("ack", queue, argv, parse_ints)

    def ack(self, queue: str, entries: Iterable[tuple[str, ...]], **kw: Any) -> list[int]:
        return self.call(self.ack_op(queue, entries, **kw), WORKER_BUDGET)

    def fail_op(
        self,
        queue: str,
        job_id: str,
        token: str,
        error: dict[str, Any],
        *,
        delay: float,
        default_max_retries: int,
        dead_max_age: float,
        dead_max_count: int,
        max_errors: int,
        now: float | None = None,
    ) -> Op:
        argv = (
            now_arg(now),
            job_id,
            token,
            json.dumps(error, ensure_ascii=False, default=str),
            ms(delay) if delay >= 0 else -1,
            int(default_max_retries),
            ms(dead_max_age),
            int(dead_max_count),
            int(max_errors),
        )
        return self.op("fail", queue, argv, parse_outcome)

    def fail(self, queue: str, job_id: str, token: str, error: dict, **kw: Any) -> tuple:
        return self.call(self.fail_op(queue, job_id, token, error, **kw), WORKER_BUDGET)

    def mark_op(self, queue: str, job_id: str, lease_until: float) -> Op:
        """Mark a claimed job started (its runner is about to run it): a plain ZADD XX GT, so
        it changes only a not-started score of a job still leased, never a later lease."""
        running = self.key(queue, "running")
        return self.command(b"ZADD", running, b"XX", b"GT", ms(lease_until), job_id, route=running)

    def settle(
        self, queue: str, job_id: str, token: str, max_retries: int, lease_until: float
    ) -> bool:
        """Write the task's ``max_retries`` into an undecided record (flag 'u') and mark the
        job started (lua/settle.lua); False when the token no longer holds the job."""
        argv = (job_id, token, int(max_retries), ms(lease_until))
        return self.call(self.op("settle", queue, argv, lambda one: int(one) == 1), WORKER_BUDGET)

    def extend(
        self,
        queue: str,
        entries: Iterable[tuple[str, str]],
        lease: float,
        now: float | None = None,
    ) -> list[bool]:
        argv: list[Any] = [now_arg(now), ms(lease)]
        for job_id, token in entries:
            argv += [job_id, token]
        return self.call(self.op("extend", queue, argv, parse_flags), WORKER_BUDGET)

    def recover(
        self,
        queue: str,
        *,
        token: str,
        instance: str,
        default_max_retries: int,
        dead_max_age: float,
        dead_max_count: int,
        max_errors: int,
        limit: int = RECOVER_LIMIT,
        now: float | None = None,
    ) -> list[Recovered]:
        argv = (
            now_arg(now),
            int(limit),
            token,
            instance,
            int(default_max_retries),
            ms(dead_max_age),
            int(dead_max_count),
            int(max_errors),
        )
        return self.call(self.op("recover", queue, argv, parse_recovered), WORKER_BUDGET)

    def release(
        self,
        queue: str,
        entries: Iterable[tuple[str, str]],
        *,
        instance: str = "",
        now: float | None = None,
        budget: float = WORKER_BUDGET,
    ) -> list[int]:
        """Hand leases back: 1 back in pending, 2 dead-lettered (key held), 0 not ours."""
        argv: list[Any] = [now_arg(now), instance]
        for job_id, token in entries:
            argv += [job_id, token]
        return self.call(self.op("release", queue, argv, parse_ints), budget)

    def forget_worker(self, queues: Iterable[str], instance: str, budget: float) -> None:
        """Drop a stopping worker's entries in the queues' ``claims`` (one round trip)."""
        ops = [self.op("release", q, (b"", instance), parse_ints) for q in queues]
        for result in self.run(ops, budget):
            if isinstance(result, Exception):
                raise result

    def cancel(
        self,
        queue: str,
        job_id: str | None = None,
        key: str | None = None,
        now: float | None = None,
    ) -> tuple[str, bytes] | None:
        """Delete a pending job by id or unique key; its (id, record), or None. Sent once: a
        lost reply raises OutcomeUnknown (the signal could not be sent for it otherwise)."""
        return self.call(self.cancel_op(queue, job_id, key, now))

    def cancel_op(
        self, queue: str, job_id: str | None, key: str | None, now: float | None = None
    ) -> Op:
        """:meth:`cancel` as an op (acancel() sends it on the asyncio client)."""
        if not job_id and not key:
            raise ValueError("cancel() needs a job id or a key")
        argv = (job_id or "", key or "", now_arg(now), *keep_setting(queue))
        return self.op("cancel", queue, argv, parse_cancel, Policy.ONCE)

    # -- waking sleeping workers ---------------------------------------------------

    def wait_for_wake(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a wake token arrives on one of the queues (BLPOP); True if one did.

        ``timeout`` is cut below the connections' read timeout (see read_timeout()), so an
        idle wait never looks like a broken connection.
        """
        limit = self.read_timeout()
        if limit:
            timeout = min(timeout, max(limit - 0.5, limit / 2))
        wakes = [self.key(q, "wake") for q in queues]
        op = self.command(b"BLPOP", *wakes, repr(round(max(timeout, 0.01), 3)), route=wakes[0])
        return self.call(op, budget=0) is not None

    def give_back_wake(self, queue: str) -> None:
        wake = self.key(queue, "wake")
        self.call(self.command(b"RPUSH", wake, b"1", route=wake), budget=0)
