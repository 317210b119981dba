"""The storage layer: the only module that builds key names or chooses a script to run.

It deals in queue names, job ids, record bytes and float epoch scores, never in callables,
models or signals. Every multi-step state change is one Lua script in ``lua/`` (each file's
header documents its KEYS, ARGV, reply and how it answers when sent twice); all keys of a
queue share the Redis Cluster hash tag ``{queue}``, so each script touches one slot.

Operations are built as :class:`~django_delayq.transport.Op` objects, so the worker can send
several (failures, acks and the next claim) in one round trip; :mod:`.transport` sends them
and re-sends what each op's policy allows. Reads for the admin, ``get_job()`` and the
django.tasks backend are in :mod:`.reads`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .exceptions import ConnectionError as DelayQConnectionError
from .old_layout import OldLayout
from .reads import Reads
from .replies import (  # the reply types are part of the store's interface
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
    parse_schedule,
    text,
)
from .roster import Roster
from .scripts import lib_constant, script
from .transport import Marker, Op, Policy, Transport, pack

KEY_KINDS = (
    "pending",
    "running",
    "dead",
    "jobs",
    "state",
    "keys",
    "wake",
    "stats",
    "errors",
    "done",
    "claims",
    "meta",  # layout 1 (0.1) only: upgrade.lua converts and deletes it (see upgrade.py)
    "relayed",  # outbox rows stored by a relay whose DELETE has not committed (outbox.py)
)
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
RECOVER_LIMIT = 100
PURGE_CHUNK = 500
# Seconds an API call (schedule, cancel...) keeps re-sending what may be re-sent; the
# worker's calls use WORKER_BUDGET and keep their results for the next round trip after it.
API_BUDGET = 2.0
WORKER_BUDGET = 1.0
# How long (seconds) a finished job's tombstone is kept (lua/_lib.lua, in milliseconds): a
# schedule() re-sent within it never stores a finished job again. It must exceed API_BUDGET.
DONE_TTL = lib_constant("DONE_TTL") / 1000
assert DONE_TTL > 10 * API_BUDGET


def check_queue_name(queue: Any) -> str:
    """``queue`` if it is a valid queue name, else ValueError naming it."""
    if type(queue) is not str or not QUEUE_NAME.fullmatch(queue):
        raise ValueError(f"invalid queue name {queue!r}: use 1-64 letters, digits, '_', '-' or '.'")
    return queue


# The store speaks epoch seconds (floats); scripts and sorted-set scores use integer epoch
# milliseconds (lua/_lib.lua says why). These two convert.


def _ms(seconds: float) -> int:
    """Seconds as whole milliseconds (what scripts take). What no time can be (inf, nan)
    becomes a number beyond every script's range, which they refuse (DELAYQ_BAD_DUE)."""
    if not math.isfinite(seconds):
        return -(10**16) if seconds < 0 else 10**16
    return round(seconds * 1000)


def _is_one(reply: Any) -> bool:
    return int(reply) == 1


def _now_arg(now: float | None) -> str | int:
    return "" if now is None else _ms(now)


class Store(Reads, Roster, OldLayout):
    """Byte-level access to one Redis (or Redis Cluster) for one key prefix."""

    def __init__(self, client: Any, prefix: str = "delayq") -> None:
        self.client = client
        self.prefix = prefix
        self.transport = Transport(client)
        self.cluster = self.transport.cluster
        self._keys: dict[str, list[str]] = {}
        # EVALSHA, SHA and keys of a (script, queue), encoded and packed once.
        self._heads: dict[tuple[str, str], tuple[tuple[bytes, ...], bytes]] = {}
        self._registrations: dict[str, Op] = {}

    # -- keys -----------------------------------------------------------------

    def keys(self, queue: str) -> list[str]:
        """The queue's keys, in the order of KEY_KINDS."""
        keys = self._keys.get(queue) if type(queue) is str else None
        if keys is None:
            check_queue_name(queue)
            keys = [f"{self.prefix}:{{{queue}}}:{kind}" for kind in KEY_KINDS]
            if len(self._keys) < 1000:
                self._keys[queue] = keys
        return keys

    def key(self, queue: str, kind: str) -> str:
        return self.keys(queue)[KEY_KINDS.index(kind)]

    def _head(self, name: str, queue: str) -> tuple[tuple[bytes, ...], bytes]:
        """``EVALSHA <sha> <n> <keys...>`` of script ``name`` on ``queue`` (the keys it
        declares), and the same packed."""
        head = self._heads.get((name, queue))
        if head is None:
            lua = script(name)
            keys = [self.key(queue, kind).encode() for kind in lua.keys]
            args = (b"EVALSHA", lua.sha_bytes, b"%d" % len(keys), *keys)
            head = (args, pack(args)[len(b"*%d\r\n" % len(args)) :])
            if len(self._heads) < 10_000:
                self._heads[name, queue] = head
        return head

    @property
    def queues_key(self) -> str:
        return f"{self.prefix}:queues"

    def result_key(self, result_id: str) -> str:
        """``{prefix}:result:<id>``: a django.tasks result, found by id alone."""
        return f"{self.prefix}:result:{result_id}"

    @property
    def workers_key(self) -> str:
        """``{prefix}:workers``: the instances of live workers (roster.py)."""
        return f"{self.prefix}:workers"

    def worker_key(self, instance: str) -> str:
        """``{prefix}:worker:<instance>``: one live worker's description (roster.py)."""
        return f"{self.prefix}:worker:{instance}"

    # -- building and running ops -----------------------------------------------

    def op(
        self,
        name: str,
        queue: str,
        argv: Sequence[Any],
        parse: Any,
        policy: Policy = Policy.RESEND,
        resend_argv: Sequence[Any] | None = None,
    ) -> Op:
        """An EVALSHA of script ``name`` on the keys of ``queue`` it declares."""
        lua = script(name)
        head, packed = self._head(name, queue)
        return Op(
            (*head, *argv),
            parse,
            policy,
            route=head[3],
            script=lua,
            resend_args=None if resend_argv is None else (*head, *resend_argv),
            packed_head=packed,
            head_len=len(head),
        )

    def command(self, *args: Any, route: str | None = None, policy: Policy = Policy.RESEND) -> Op:
        """A plain command (``route``: a key it touches, for a cluster)."""
        return Op(args, None, policy, route=route.encode() if route else None)

    def run(self, ops: Sequence[Op], budget: float = WORKER_BUDGET) -> list[Any]:
        """Run ops in one round trip per node; each result is a value or an exception."""
        return self.transport.run(ops, budget)

    def call(self, op: Op, budget: float = API_BUDGET) -> Any:
        return self.transport.call(op, budget)

    def marker(self) -> StartMarks:
        """Start marks for one worker (a connection of their own; see mark_op)."""
        return StartMarks(self)

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
    ) -> Op:
        """``relay``: the job may have reached Redis before (a row of the outbox, relayed
        again after a crash between the Redis write and the row's delete), so even the first
        send is marked as sent again: a stored or finished job of that id is not stored
        again (its record carries flag 'i', so a finished one leaves a tombstone).
        ``adopt``: the relay of an outbox row: an id marked relayed is never stored again
        (the id is marked), and a pending job of another id holding ``key`` is removed, this
        one taking the key under ``job_id`` (the row took the key in the database)."""
        mode, value = ("delay", delay or 0.0) if at is None else ("at", at)
        argv = (job_id, record, mode, _ms(value), key or "", on_conflict, _now_arg(now))
        first = "1" if relay else ""
        last = "1" if adopt else ""
        return self.op(
            "schedule",
            queue,
            (*argv, first, last),
            parse_schedule,
            Policy.RESEND,
            (*argv, "1", last),
        )

    def remember_queue_op(self, queue: str) -> Op:
        """SADD the queue to the registry of queues (sent with every schedule, so a lost
        registry heals with the next job; nothing here caches what Redis holds)."""
        return self.command(
            b"SADD", self.queues_key, check_queue_name(queue), route=self.queues_key
        )

    def schedule(self, queue: str, job_id: str, record: bytes, **options: Any) -> Scheduled:
        op = self.schedule_op(queue, job_id, record, **options)
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
        **options: Any,
    ) -> Scheduled:
        """SET the job's django.tasks result (expiring after ``ttl`` seconds, None: never),
        then schedule the job, so no worker claims it before its result exists (on a
        cluster, where the result lives on another node, one round trip after the other).
        Both may be re-sent; the result is deleted again if the script refuses the job."""
        result_op = self.result_op(job_id, result, ttl)
        ops = [self.remember_queue_op(queue), self.schedule_op(queue, job_id, record, **options)]
        if self.cluster:
            self.call(result_op)
            registered, scheduled = self.run(ops, API_BUDGET)
        else:
            _, registered, scheduled = self.run([result_op, *ops], API_BUDGET)
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
        jobs: Sequence[tuple[str, bytes, dict[str, float]]],
        now: float | None = None,
        relay: bool = False,
    ) -> Op:
        """One schedule_many.lua call for jobs without unique keys: (id, record, when),
        ``when`` being ``{"delay": seconds}`` or ``{"at": epoch}``. Parses to one
        Scheduled per job, in order. ``relay``: the relay of outbox rows (as for
        :meth:`schedule_op`: a job is never stored twice, the ids are marked relayed)."""
        argv: list[Any] = []
        plan: list[tuple[str, str, int]] = []
        encoded: dict[tuple[str, float], tuple[bytes, bytes]] = {}  # jobs share a `when`
        for job_id, record, when in jobs:
            mode, seconds = ("at", when["at"]) if "at" in when else ("delay", when["delay"])
            value = _ms(float(seconds or 0.0))
            when_args = encoded.get((mode, value))
            if when_args is None:
                when_args = encoded[mode, value] = (mode.encode(), b"%d" % value)
            argv += (job_id.encode(), record, *when_args)
            plan.append((job_id, mode, value))
        now_arg = _now_arg(now)
        return self.op(
            "schedule_many",
            queue,
            (now_arg, "relay" if relay else "", *argv),
            lambda reply: parse_many(reply, plan),
            Policy.RESEND,
            (now_arg, "relay" if relay else "1", *argv),
        )

    def unmark_relayed_op(self, queue: str, ids: Sequence[str]) -> Op:
        """ZREM the relayed marks of ``ids`` (their outbox rows' DELETE committed)."""
        key = self.key(queue, "relayed")
        return self.command(b"ZREM", key, *ids, route=key)

    def relayed(self, queue: str, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` marked relayed: their outbox rows are leftovers of a relay whose
        DELETE has not committed, not pending jobs (the job is in Redis, or ran)."""
        if not ids:
            return set()
        key = self.key(queue, "relayed")
        scores = self.call(self.command(b"ZMSCORE", key, *ids, route=key))
        return {i for i, score in zip(ids, scores, strict=True) if score is not None}

    def old_relayed(self, queue: str, before: float, limit: int) -> list[str]:
        """Up to ``limit`` ids whose relayed mark is older than ``before`` (epoch seconds)."""
        key = self.key(queue, "relayed")
        op = self.command(
            b"ZRANGEBYSCORE", key, b"-inf", b"(%d" % _ms(before), b"LIMIT", 0, limit, route=key
        )
        return [i.decode() if isinstance(i, bytes) else i for i in self.call(op)]

    def stream(self, chunks: Iterable[Sequence[Op]], budget: float = API_BUDGET) -> Iterator[list]:
        """:meth:`run` for each chunk of re-sendable ops, in order, the next chunk sent before
        this one's replies are read (schedule_many; see Transport.stream)."""
        return self.transport.stream(chunks, budget)

    def claim_op(
        self,
        queue: str,
        limit: int,
        *,
        lease: float,
        token: str,
        instance: str = "",
        acks: Iterable[tuple[str, str, str]] = (),
        now: float | None = None,
    ) -> Op:
        """``acks``: (id, token, info) of finished jobs, acknowledged in the same call before
        claiming; their flags come back in ``Claim.acked``."""
        argv: list[Any] = [_now_arg(now), int(limit), _ms(lease), token, instance]
        for entry in acks:
            argv += entry
        return self.op("claim", queue, argv, parse_claim)

    def claim(self, queue: str, limit: int, **options: Any) -> Claim:
        return self.call(self.claim_op(queue, limit, **options), WORKER_BUDGET)

    def ack_op(
        self, queue: str, entries: Iterable[tuple[str, str, str]], now: float | None = None
    ) -> Op:
        argv: list[Any] = [_now_arg(now)]
        for entry in entries:
            argv += entry
        return self.op("ack", queue, argv, parse_ints)

    def ack(self, queue: str, entries: Iterable[tuple[str, str, str]], **kw: Any) -> list[int]:
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
            _now_arg(now),
            job_id,
            token,
            json.dumps(error, ensure_ascii=False, default=str),
            _ms(delay) if delay >= 0 else -1,
            int(default_max_retries),
            _ms(dead_max_age),
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
        return self.command(b"ZADD", running, b"XX", b"GT", _ms(lease_until), job_id, route=running)

    def settle(
        self, queue: str, job_id: str, token: str, max_retries: int, lease_until: float
    ) -> bool:
        """Write the task's ``max_retries`` into an undecided record (flag 'u') and mark the
        job started (lua/settle.lua); False when the token no longer holds the job."""
        argv = (job_id, token, int(max_retries), _ms(lease_until))
        return self.call(self.op("settle", queue, argv, _is_one), WORKER_BUDGET)

    def extend(
        self,
        queue: str,
        entries: Iterable[tuple[str, str]],
        lease: float,
        now: float | None = None,
    ) -> list[bool]:
        argv: list[Any] = [_now_arg(now), _ms(lease)]
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
            _now_arg(now),
            int(limit),
            token,
            instance,
            int(default_max_retries),
            _ms(dead_max_age),
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
        argv: list[Any] = [_now_arg(now), instance]
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
        if not job_id and not key:
            raise ValueError("cancel() needs a job id or a key")
        argv = (job_id or "", key or "", _now_arg(now))
        return self.call(self.op("cancel", queue, argv, parse_cancel, Policy.ONCE))

    def requeue(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[int]:
        """Dead -> pending (due now, attempts reset): 1 requeued, 0 not dead, 2 its unique key
        is held by another pending job, 3 its record is missing."""
        if not ids:
            return []
        op = self.op("requeue", queue, (_now_arg(now), *ids), parse_ints, Policy.ONCE)
        return self.call(op)

    def run_now(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[bool]:
        """Pending -> due now; a flag per id."""
        if not ids:
            return []
        return self.call(self.op("run_now", queue, (_now_arg(now), *ids), parse_flags))

    def delete_dead(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[bool]:
        if not ids:
            return []
        op = self.op("delete", queue, (_now_arg(now), *ids), parse_flags, Policy.ONCE)
        return self.call(op)

    def purge_dead(self, queue: str, died_before: float | None = None) -> int:
        """Delete the dead jobs of a queue (those that died at or before ``died_before``,
        if given: what a confirmation page showed), a bounded chunk per script call."""
        dead = self.key(queue, "dead")
        deleted = 0
        while True:
            if died_before is None:
                read = self.command(b"ZRANGE", dead, 0, PURGE_CHUNK - 1, route=dead)
            else:
                high = _ms(died_before)
                read = self.command(
                    b"ZRANGEBYSCORE", dead, b"-inf", high, b"LIMIT", 0, PURGE_CHUNK, route=dead
                )
            ids = [text(i) for i in self.call(read)]
            if not ids:
                return deleted
            deleted += sum(self.delete_dead(queue, ids))

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


class StartMarks:
    """A runner's start marks (``mark_op``), written with no reply awaited (transport.Marker):
    a job marked started counts its attempt if its worker dies. Per mark: one preformatted
    write, no Op built (a runner pays this before every job)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.marker = Marker(store.transport)
        self._heads: dict[str, tuple[bytes, bytes]] = {}  # queue -> (route, packed prefix)

    def mark(self, queue: str, job_id: str, lease_until: float) -> bool:
        head = self._heads.get(queue)
        if head is None:
            running = self.store.key(queue, "running").encode()
            prefix = b"*6\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n$2\r\nXX\r\n$2\r\nGT\r\n" % (
                len(running),
                running,
            )
            head = self._heads[queue] = (running, prefix)
        score, member = b"%d" % _ms(lease_until), job_id.encode()
        data = b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
            head[1],
            len(score),
            score,
            len(member),
            member,
        )
        return self.marker.write(head[0], data)

    def close(self) -> None:
        self.marker.close()
