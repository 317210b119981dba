"""The storage layer: the only module that builds key names or runs a script.

It deals in queue names, job ids, record bytes and float epoch scores, never in
callables, models or signals. Every multi-step state change is one Lua script in
``lua/`` (see each file's header for its KEYS, ARGV and return value); all keys of
a queue share the Redis Cluster hash tag ``{queue}`` so each script touches one slot.

Operations are built as :class:`Op` objects so the worker can send several (acks,
failures and the next claim) in one pipelined round trip with :meth:`Store.run`.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import redis

from .exceptions import ConnectionError as DelayQConnectionError
from .exceptions import DelayQError, JobNotFound

SCRIPTS = (
    "schedule",
    "schedule_many",
    "claim",
    "ack",
    "fail",
    "extend",
    "recover",
    "release",
    "cancel",
    "requeue",
    "run_now",
    "delete",
)
KEY_KINDS = ("pending", "running", "dead", "jobs", "meta", "keys", "wake", "stats")
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
RECOVER_LIMIT = 100
PURGE_CHUNK = 500
# Seconds between re-sends of a schedule whose connection broke (see resend()).
RESEND_PAUSES = (0.05, 0.25)

# Connection failures of redis-py, re-raised as django_delayq.exceptions.ConnectionError.
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


_LUA_FUNCTION = re.compile(r"^local function (\w+)\(")


def _lib_parts(text: str) -> tuple[str, list[tuple[str, str]]]:
    """_lib.lua as (its top-level statements and comments, [(helper name, its text)]).

    A helper is a top-level ``local function`` with the comments above it, ending at a
    line ``end`` (or on its own line when that line ends with `` end``)."""
    preamble: list[str] = []
    parts: list[tuple[str, str]] = []
    current: list[str] = []  # comments and blank lines go with the helper below them
    name: str | None = None
    for line in text.splitlines(keepends=True):
        current.append(line)
        if name is None:
            match = _LUA_FUNCTION.match(line)
            if match:
                name = match.group(1)
                ended = line.rstrip().endswith(" end")  # a one-line helper
            elif line.strip() and not line.startswith("--"):  # a top-level statement
                preamble += current
                current = []
                continue
            else:
                continue
        else:
            ended = line.rstrip() == "end"
        if ended:
            parts.append((name, "".join(current)))
            current, name = [], None
    preamble += current
    return "".join(preamble), parts


@cache
def script_source(name: str) -> str:
    """The text sent to Redis: the helpers of _lib.lua the script uses, then the script.

    Only those: Lua creates every ``local function`` of the text on each call, and all
    nineteen helpers cost a schedule() about 6 us of Redis time (measured)."""
    lua = resources.files("django_delayq") / "lua"
    body = (lua / f"{name}.lua").read_text()
    preamble, parts = _lib_parts((lua / "_lib.lua").read_text())
    needed: set[str] = set()
    text = body
    while True:
        more = {h for h, _ in parts if h not in needed and re.search(rf"\b{h}\b", text)}
        if not more:
            break
        needed |= more
        text = body + "".join(t for h, t in parts if h in needed)
    return preamble + "".join(t for h, t in parts if h in needed) + "\n" + body


_VALID_QUEUES: set[str] = set()  # names already checked (schedule() checks on every call)


def check_queue_name(queue: str) -> str:
    if type(queue) is str and queue in _VALID_QUEUES:
        return queue
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise ValueError(f"invalid queue name {queue!r}: use 1-64 letters, digits, '_', '-' or '.'")
    if len(_VALID_QUEUES) < 1000:
        _VALID_QUEUES.add(queue)
    return queue


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _num(value: Any) -> float | None:
    return None if value in (None, b"", "") else float(value)


def translate_errors(exc: Exception) -> Exception:
    """Map a redis-py exception to django-delayq's (one place for every call)."""
    if isinstance(exc, REDIS_DOWN):
        return DelayQConnectionError(f"Redis is unreachable or the connection broke: {exc}")
    if isinstance(exc, redis.exceptions.ResponseError) and "DELAYQ_" in str(exc):
        code = str(exc).split("DELAYQ_", 1)[1]
        return DelayQError(f"django-delayq script refused the operation: {code}")
    return exc


def resend(send: Callable[[], Any], pauses: Sequence[float] = RESEND_PAUSES) -> Any:
    """Call ``send`` again after a broken connection, for idempotent writes (schedule).

    Redis may have executed a command whose reply was lost: sending the same schedule
    (same job id and record) again returns the stored job instead of storing a second
    one, so the caller learns the truth whenever Redis answers again within ``pauses``.
    """
    for pause in pauses:
        try:
            return send()
        except DelayQConnectionError:
            time.sleep(pause)
    return send()


@dataclass(frozen=True)
class Op:
    """One script call, and the function that turns its reply into a Python value."""

    script: str
    queue: str
    argv: tuple
    parse: Callable[[Any], Any]


@dataclass(frozen=True)
class Scheduled:
    outcome: str  # created | replaced | kept
    id: str
    due_at: float
    record: bytes | None  # the existing record when kept


@dataclass(frozen=True)
class Claimed:
    id: str
    record: bytes
    attempts: int


@dataclass(frozen=True)
class Claim:
    now: float
    next_due: float | None
    jobs: list[Claimed]
    acked: Sequence[bool] = ()  # one flag per ack sent with the claim (claim_op's acks)


@dataclass(frozen=True)
class RawJob:
    """A job as read from Redis, undecoded (job.py decodes)."""

    id: str
    queue: str
    status: str | None  # pending | running | dead | None (record without a set)
    score: float | None  # due_at, lease_until or died_at, by status
    record: bytes | None
    meta: bytes | None


def _parse_schedule(reply: list) -> Scheduled:
    outcome, job_id, due, record = reply
    return Scheduled(_text(outcome), _text(job_id), float(due), record or None)


def _parse_many(reply: list, plan: list[tuple[str, str, float]]) -> list[Scheduled]:
    now = float(reply[0])
    stored = {int(reply[i]) - 1: float(reply[i + 1]) for i in range(1, len(reply), 2)}
    return [
        Scheduled(
            "created",
            job_id,
            stored.get(i, now + max(value, 0.0) if mode == "delay" else max(value, now)),
            None,
        )
        for i, (job_id, mode, value) in enumerate(plan)
    ]


def _parse_claim(reply: list, acks: int = 0) -> Claim:
    end = len(reply) - acks
    jobs = [Claimed(_text(reply[i]), reply[i + 1], int(reply[i + 2])) for i in range(2, end, 3)]
    return Claim(float(reply[0]), _num(reply[1]), jobs, [bool(int(f)) for f in reply[end:]])


def _parse_flags(reply: list) -> list[bool]:
    return [bool(int(flag)) for flag in reply]


def _parse_outcome(reply: list) -> tuple[str, float | None]:
    return _text(reply[0]), _num(reply[1])


def _parse_pairs(reply: list) -> list[tuple[str, str]]:
    return [(_text(reply[i]), _text(reply[i + 1])) for i in range(0, len(reply), 2)]


def _parse_cancel(reply: list) -> tuple[str, bytes] | None:
    return (_text(reply[0]), reply[1]) if reply else None


def _arg_bytes(arg: Any) -> bytes:
    """A command argument as Redis receives it (what redis-py's encoder does for these)."""
    kind = type(arg)
    if kind is bytes:
        return arg
    if kind is str:
        return arg.encode()
    if kind is int or kind is float:
        return repr(arg).encode()
    raise TypeError(f"cannot send {arg!r} to Redis")


def _now_arg(now: float | None) -> str:
    return "" if now is None else repr(float(now))


def _ms(ttl: float | None) -> int | None:
    """An expiry for SET's PX: whole milliseconds, at least 1; None (never) stays None."""
    return None if ttl is None else max(int(ttl * 1000), 1)


class Store:
    """Byte-level access to one Redis (or Redis Cluster) for one key prefix."""

    def __init__(self, client: redis.Redis, prefix: str = "delayq") -> None:
        self.client = client
        self.prefix = prefix
        self.cluster = isinstance(client, redis.RedisCluster)
        self._scripts = {name: client.register_script(script_source(name)) for name in SCRIPTS}
        self._keys: dict[str, list[str]] = {}
        # The same, encoded once: redis-py spends more time encoding eight str keys than
        # on the rest of a script call's arguments (measured: 22 us vs 11 us per pack).
        self._script_keys: dict[str, list[bytes]] = {}
        self._seen_queues: set[str] = set()
        self._scripts_loaded = False

    # -- keys -----------------------------------------------------------------

    def keys(self, queue: str) -> list[str]:
        """The queue's eight keys, in the order every script expects them."""
        keys = self._keys.get(queue)
        if keys is None:
            check_queue_name(queue)
            keys = [f"{self.prefix}:{{{queue}}}:{kind}" for kind in KEY_KINDS]
            self._keys[queue] = keys
        return keys

    def script_keys(self, queue: str) -> list[bytes]:
        """:meth:`keys`, as bytes (what script calls send)."""
        keys = self._script_keys.get(queue)
        if keys is None:
            keys = [key.encode() for key in self.keys(queue)]
            self._script_keys[queue] = keys
        return keys

    def key(self, queue: str, kind: str) -> str:
        return self.keys(queue)[KEY_KINDS.index(kind)]

    @property
    def queues_key(self) -> str:
        return f"{self.prefix}:queues"

    # -- running operations ---------------------------------------------------

    def call(self, op: Op) -> Any:
        """Run one operation: its parsed reply, or the exception its script raised."""
        if not self._scripts_loaded:
            self.load_scripts()
        if self.cluster:
            try:
                reply = self._scripts[op.script](keys=self.script_keys(op.queue), args=op.argv)
            except redis.exceptions.RedisError as exc:
                raise translate_errors(exc) from exc
            return op.parse(reply)
        # EVALSHA on a pooled connection, packed by _send (a third of redis-py's packing
        # cost for a schedule(), measured by the benchmarks), under the client's own retry
        # policy exactly as redis-py's execute_command runs a command.
        ops = (op,)
        pool = self.client.connection_pool
        conn = self._connection()

        def send_and_read() -> list[Any]:
            self._send(conn, ops)
            return self._read_replies(conn, ops)

        try:
            replies = conn.retry.call_with_retry(send_and_read, lambda _: conn.disconnect())
        except redis.exceptions.RedisError as exc:
            conn.disconnect()
            raise translate_errors(exc) from exc
        finally:
            pool.release(conn)
        (result,) = self._parsed(ops, replies)
        if isinstance(result, Exception):
            raise result
        return result

    def run(self, ops: Sequence[Op]) -> list[Any]:
        """Run several operations in one round trip (non-transactional pipeline).

        Each reply is parsed, or is the exception its script raised.
        """
        if not ops:
            return []
        if len(ops) == 1 or self.cluster:
            # On a cluster, one call per op: redis-py's ClusterPipeline refuses EVALSHA
            # ("blocked when running redis in cluster mode"), and each op is one slot.
            results = []
            for op in ops:
                try:
                    results.append(self.call(op))
                except DelayQError as exc:
                    if isinstance(exc, DelayQConnectionError):
                        raise
                    results.append(exc)
            return results
        return self._translated(ops, self._pipelined(ops))

    def stream(self, chunks: Iterable[Sequence[Op]]) -> Iterator[list[Any]]:
        """:meth:`run` for each chunk of ops, in order, one round trip each, but with the
        next chunk sent before the replies of this one are read: building the next chunk
        (when ``chunks`` is lazy) and handling this one's results overlap Redis running
        the scripts. For bulk writes that are safe to send twice (schedule ops): after an
        error reply, the chunk sent behind it has run too; a broken connection raises
        ConnectionError and the chunks whose results were not yielded may have run.
        """
        if self.cluster:  # no pipelines there: chunk after chunk
            for ops in chunks:
                yield self.run(ops)
            return
        if not self._scripts_loaded:
            self.load_scripts()
        pool = self.client.connection_pool
        conn = self._connection()
        in_flight: deque[Sequence[Op]] = deque()
        try:
            for ops in chunks:
                self._send(conn, ops)
                in_flight.append(ops)
                if len(in_flight) > 1:
                    yield self._receive(conn, in_flight.popleft())
            while in_flight:
                yield self._receive(conn, in_flight.popleft())
        except redis.exceptions.RedisError as exc:
            conn.disconnect()
            raise translate_errors(exc) from exc
        finally:
            if in_flight:  # abandoned (an exception, or the caller stopped): replies unread
                conn.disconnect()
            pool.release(conn)

    def _connection(self) -> Any:
        """A connection from the client's pool (connected: redis-py connects here)."""
        try:
            return self.client.connection_pool.get_connection()
        except redis.exceptions.RedisError as exc:
            raise translate_errors(exc) from exc

    def _send(self, conn: Any, ops: Sequence[Op]) -> None:
        # Packed here rather than by redis-py, whose per-argument encoder was 40% of a
        # bulk schedule's time (four arguments per job).
        out: list[bytes] = []
        for op in ops:
            keys = self.script_keys(op.queue)
            args = (b"EVALSHA", self._scripts[op.script].sha, len(keys), *keys, *op.argv)
            out.append(b"*%d\r\n" % len(args))
            for arg in args:
                data = _arg_bytes(arg)
                out += (b"$%d\r\n" % len(data), data, b"\r\n")
        conn.send_packed_command([b"".join(out)])

    def _receive(self, conn: Any, ops: Sequence[Op]) -> list[Any]:
        return self._parsed(ops, self._read_replies(conn, ops))

    @staticmethod
    def _read_replies(conn: Any, ops: Sequence[Op]) -> list[Any]:
        replies: list[Any] = []
        for _ in ops:
            try:
                replies.append(conn.read_response())
            except redis.exceptions.ResponseError as exc:
                replies.append(exc)
        return replies

    def _parsed(self, ops: Sequence[Op], replies: list[Any]) -> list[Any]:
        """Each op's parsed reply or translated error."""
        noscript = redis.exceptions.NoScriptError
        missing = [i for i, r in enumerate(replies) if isinstance(r, noscript)]
        if missing:
            # Redis lost its scripts (restart, SCRIPT FLUSH), so those ops did not run:
            # _pipelined loads the scripts and sends them (only them) again.
            again = self._pipelined([ops[i] for i in missing])
            replies = list(replies)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return self._translated(ops, replies)

    @staticmethod
    def _translated(ops: Sequence[Op], replies: Sequence[Any]) -> list[Any]:
        """Each op's parsed reply, or its error as a django-delayq exception; a broken
        connection raises (the ops after it may or may not have run)."""
        results: list[Any] = []
        for op, reply in zip(ops, replies, strict=True):
            if isinstance(reply, Exception):
                if isinstance(reply, REDIS_DOWN):
                    raise translate_errors(reply) from reply
                results.append(translate_errors(reply))
            else:
                results.append(op.parse(reply))
        return results

    def load_scripts(self) -> None:
        """SCRIPT LOAD every script (one round trip; one call per script on a cluster,
        where redis-py sends each to every primary).

        Done once per Store before its first script call, so EVALSHA never meets NOSCRIPT
        unless Redis restarted or flushed its scripts (redis-py then loads the script
        again). Some Redis-protocol servers, like fakeredis's TCP server used by the demo,
        drop the connection on an error reply, so that fallback never works there.
        """
        try:
            if self.cluster:
                shas = [self.client.script_load(s.script) for s in self._scripts.values()]
            else:
                pipe = self.client.pipeline(transaction=False)
                for script in self._scripts.values():
                    pipe.script_load(script.script)
                shas = pipe.execute()
        except redis.exceptions.RedisError as exc:
            raise translate_errors(exc) from exc
        for script, sha in zip(self._scripts.values(), shas, strict=True):
            script.sha = sha.decode() if isinstance(sha, bytes) else sha
        self._scripts_loaded = True

    def _pipelined(self, ops: Sequence[Op]) -> list[Any]:
        """The raw replies of ``ops``, sent as plain EVALSHAs in one pipeline.

        redis-py's ``Script`` objects in a pipeline send ``SCRIPT EXISTS`` before every
        execute: a second round trip each time. Here a script Redis does not know (it was
        restarted or flushed) answers NOSCRIPT without running, so only those ops are
        sent again after ``SCRIPT LOAD``: nothing runs twice.
        """
        if not self._scripts_loaded:
            # Load every script up front: an op answered NOSCRIPT is re-sent after the ops
            # behind it already ran, so a claim's "next due" could predate a retry it
            # did not see. Now that can only follow a Redis restart or SCRIPT FLUSH.
            self.load_scripts()
        replies: list[Any] = [None] * len(ops)
        todo = list(range(len(ops)))
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for i in todo:
                keys = self.script_keys(ops[i].queue)
                pipe.evalsha(self._scripts[ops[i].script].sha, len(keys), *keys, *ops[i].argv)
            try:
                answers = pipe.execute(raise_on_error=False)
                missing = []
                for i, reply in zip(todo, answers, strict=True):
                    if attempt == 0 and isinstance(reply, redis.exceptions.NoScriptError):
                        missing.append(i)
                    else:
                        replies[i] = reply
                if not missing:
                    return replies
                for name in {ops[i].script for i in missing}:
                    script = self._scripts[name]
                    script.sha = self.client.script_load(script.script)
            except redis.exceptions.RedisError as exc:
                raise translate_errors(exc) from exc
            todo = missing
        return replies

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
    ) -> Op:
        mode, value = ("delay", delay or 0.0) if at is None else ("at", at)
        argv = (job_id, record, mode, repr(float(value)), key or "", on_conflict, _now_arg(now))
        return Op("schedule", queue, argv, _parse_schedule)

    def schedule(self, queue: str, job_id: str, record: bytes, **options: Any) -> Scheduled:
        self.remember_queue(queue)
        op = self.schedule_op(queue, job_id, record, **options)
        return resend(lambda: self.call(op))

    def schedule_many_op(
        self,
        queue: str,
        jobs: Sequence[tuple[str, bytes, dict[str, float]]],
        now: float | None = None,
    ) -> Op:
        """One schedule_many.lua call for jobs without unique keys: (id, record, when),
        ``when`` being ``{"delay": seconds}`` or ``{"at": epoch}``. Parses to one
        Scheduled per job, in order."""
        argv: list[Any] = [_now_arg(now)]
        plan: list[tuple[str, str, float]] = []
        encoded: dict[tuple[str, float], tuple[bytes, bytes]] = {}  # jobs share a `when`
        for job_id, record, when in jobs:
            mode, value = ("at", float(when["at"])) if "at" in when else ("delay", when["delay"])
            value = float(value or 0.0)
            when_args = encoded.get((mode, value))
            if when_args is None:
                when_args = encoded[mode, value] = (mode.encode(), repr(value).encode())
            argv += (job_id.encode(), record, *when_args)
            plan.append((job_id, mode, value))
        return Op("schedule_many", queue, tuple(argv), lambda reply: _parse_many(reply, plan))

    def claim_op(
        self,
        queue: str,
        limit: int,
        *,
        lease: float,
        token: str,
        worker: str = "",
        now: float | None = None,
        acks: Iterable[tuple[str, str, str | None]] = (),
    ) -> Op:
        """``acks``: (id, token, unique key) of finished jobs, acknowledged in the same
        call before claiming; their flags come back in ``Claim.acked``."""
        argv: list[Any] = [int(limit), repr(float(lease)), token, worker, _now_arg(now)]
        for job_id, ack_token, ukey in acks:
            argv += (job_id, ack_token, ukey or "")
        count = (len(argv) - 5) // 3
        parse = _parse_claim if not count else lambda reply: _parse_claim(reply, count)
        return Op("claim", queue, tuple(argv), parse)

    def claim(self, queue: str, limit: int, **options: Any) -> Claim:
        return self.call(self.claim_op(queue, limit, **options))

    def ack_op(
        self, queue: str, entries: Iterable[tuple[str, str, str | None]], now: float | None = None
    ) -> Op:
        argv: list[Any] = [_now_arg(now)]
        for job_id, token, ukey in entries:
            argv += [job_id, token, ukey or ""]
        return Op("ack", queue, tuple(argv), _parse_flags)

    def ack(self, queue: str, entries: Iterable[tuple[str, str, str | None]], **kw: Any) -> list:
        return self.call(self.ack_op(queue, entries, **kw))

    def fail_op(
        self,
        queue: str,
        job_id: str,
        token: str,
        error: dict[str, Any],
        *,
        delay: float,
        max_retries: int,
        key: str | None,
        dead_max_age: float,
        dead_max_count: int,
        max_errors: int,
        now: float | None = None,
    ) -> Op:
        argv = (
            job_id,
            token,
            json.dumps(error, ensure_ascii=False, default=str),
            repr(float(delay)),
            int(max_retries),
            key or "",
            repr(float(dead_max_age)),
            int(dead_max_count),
            int(max_errors),
            _now_arg(now),
        )
        return Op("fail", queue, argv, _parse_outcome)

    def fail(self, queue: str, job_id: str, token: str, error: dict, **kw: Any) -> tuple:
        return self.call(self.fail_op(queue, job_id, token, error, **kw))

    def extend(
        self,
        queue: str,
        entries: Iterable[tuple[str, str]],
        lease: float,
        now: float | None = None,
    ) -> list[bool]:
        argv: list[Any] = [repr(float(lease)), _now_arg(now)]
        for job_id, token in entries:
            argv += [job_id, token]
        return self.call(Op("extend", queue, tuple(argv), _parse_flags))

    def recover(
        self,
        queue: str,
        *,
        default_max_retries: int,
        dead_max_age: float,
        dead_max_count: int,
        max_errors: int,
        limit: int = RECOVER_LIMIT,
        now: float | None = None,
    ) -> list[tuple[str, str]]:
        argv = (
            int(limit),
            int(default_max_retries),
            repr(float(dead_max_age)),
            int(dead_max_count),
            int(max_errors),
            _now_arg(now),
        )
        return self.call(Op("recover", queue, argv, _parse_pairs))

    def release(
        self, queue: str, entries: Iterable[tuple[str, str]], now: float | None = None
    ) -> list[bool]:
        argv: list[Any] = [_now_arg(now)]
        for job_id, token in entries:
            argv += [job_id, token]
        return self.call(Op("release", queue, tuple(argv), _parse_flags))

    def cancel(
        self, queue: str, job_id: str | None = None, key: str | None = None
    ) -> tuple[str, bytes] | None:
        """Delete a pending job by id or unique key; its (id, record), or None."""
        if not job_id and not key:
            raise ValueError("cancel() needs a job id or a key")
        return self.call(Op("cancel", queue, (job_id or "", key or ""), _parse_cancel))

    def _per_id(self, script: str, queue: str, ids: Sequence[str], now: float | None) -> list:
        if not ids:
            return []
        prefix = () if script == "delete" else (_now_arg(now),)
        return self.call(Op(script, queue, (*prefix, *ids), _parse_flags))

    def requeue(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[bool]:
        """Dead -> pending (due now, attempts reset); a flag per id."""
        return self._per_id("requeue", queue, ids, now)

    def run_now(self, queue: str, ids: Sequence[str], now: float | None = None) -> list[bool]:
        """Pending -> due now; a flag per id."""
        return self._per_id("run_now", queue, ids, now)

    def delete_dead(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return self._per_id("delete", queue, ids, None)

    def purge_dead(self, queue: str, died_before: float | None = None) -> int:
        """Delete the dead jobs of a queue (those that died at or before ``died_before``,
        if given: what a confirmation page showed), a bounded chunk per script call."""
        dead = self.key(queue, "dead")

        def chunk(c: Any) -> list:
            if died_before is None:
                return c.zrange(dead, 0, PURGE_CHUNK - 1)
            return c.zrangebyscore(dead, "-inf", repr(float(died_before)), 0, PURGE_CHUNK)

        deleted = 0
        while True:
            ids = [_text(i) for i in self._read(chunk)]
            if not ids:
                return deleted
            deleted += sum(self.delete_dead(queue, ids))

    # -- reads ------------------------------------------------------------------

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        try:
            return fn(self.client)
        except redis.exceptions.RedisError as exc:
            raise translate_errors(exc) from exc

    def fetch(self, queue: str, job_id: str) -> RawJob | None:
        """One job's record, state and score, read atomically (MULTI on one slot)."""
        pending, running, dead, jobs, meta = self.keys(queue)[:5]

        def read(client: Any) -> list:
            pipe = client.pipeline(transaction=True)
            pipe.hget(jobs, job_id).hget(meta, job_id)
            pipe.zscore(pending, job_id).zscore(running, job_id).zscore(dead, job_id)
            return pipe.execute()

        record, meta_raw, *scores = self._read(read)
        if record is None and meta_raw is None and all(s is None for s in scores):
            return None
        status, score = None, None
        for name, value in zip(("pending", "running", "dead"), scores, strict=True):
            if value is not None:
                status, score = name, float(value)
                break
        return RawJob(job_id, queue, status, score, record, meta_raw)

    def fetch_many(self, queue: str, status: str, ids_scores: Sequence[tuple]) -> list[RawJob]:
        if not ids_scores:
            return []
        ids = [_text(i) for i, _ in ids_scores]
        records, metas = self._read(
            lambda c: (
                c.pipeline(transaction=False)
                .hmget(self.key(queue, "jobs"), ids)
                .hmget(self.key(queue, "meta"), ids)
                .execute()
            )
        )
        return [
            RawJob(job_id, queue, status, float(score), record, meta)
            for (job_id, (_, score), record, meta) in zip(
                ids, ids_scores, records, metas, strict=True
            )
        ]

    def page(self, queue: str, status: str, offset: int, limit: int) -> list[RawJob]:
        """Jobs of one set in score order, straight from ZRANGE (O(log N + limit))."""
        if status not in ("pending", "running", "dead"):
            raise ValueError(f"unknown job status {status!r}")
        if limit < 1 or offset < 0:
            return []  # ZRANGE 0 -1 would read the whole set
        entries = self._read(
            lambda c: c.zrange(self.key(queue, status), offset, offset + limit - 1, withscores=True)
        )
        return self.fetch_many(queue, status, entries)

    def counts(self, queue: str, now: float) -> dict[str, Any]:
        """Set sizes, the due-now backlog and the oldest due time: O(log N) each."""
        pending, running, dead = self.keys(queue)[:3]
        sizes = self._read(
            lambda c: (
                c.pipeline(transaction=False)
                .zcard(pending)
                .zcount(pending, "-inf", now)
                .zcard(running)
                .zcard(dead)
                .zrange(pending, 0, 0, withscores=True)
                .execute()
            )
        )
        head = sizes[4]
        return {
            "pending": sizes[0],
            "due": sizes[1],
            "running": sizes[2],
            "dead": sizes[3],
            "oldest_due_at": float(head[0][1]) if head else None,
        }

    def throughput(self, queue: str, now: float, minutes: int = 60) -> dict[str, list[int]]:
        """Jobs done ("d") and failed attempts ("f") per minute, oldest first."""
        raw = self._read(lambda c: c.hgetall(self.key(queue, "stats")))
        current = int(now // 60)
        series = {"d": [0] * minutes, "f": [0] * minutes}
        for field, value in raw.items():
            kind = _text(field).split(":", 1)[0]
            minute, count = (int(x) for x in _text(value).split(":"))
            age = current - minute
            if kind in series and 0 <= age < minutes:
                series[kind][minutes - 1 - age] = count
        return series

    def server_time(self) -> float:
        seconds, micros = self._read(lambda c: c.time())
        return seconds + micros / 1_000_000

    def wake_keys(self, queues: Iterable[str]) -> list[str]:
        return [self.key(q, "wake") for q in queues]

    def wait_for_wake(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a wake token arrives on one of the queues (BLPOP); True if one did.

        ``timeout`` is cut below the connections' read timeout (see read_timeout()), so an
        idle wait never looks like a broken connection.
        """
        limit = self.read_timeout()
        if limit:
            timeout = min(timeout, max(limit - 0.5, limit / 2))
        return self._read(lambda c: c.blpop(self.wake_keys(queues), timeout=timeout)) is not None

    def read_timeout(self) -> float | None:
        """The socket read timeout of this client's connections, in seconds (None: none).

        redis-py 8 gives connections a 5 s default that ``connection_kwargs`` does not
        show: it is the default of the connection class's ``socket_timeout`` parameter.
        """
        pool = getattr(self.client, "connection_pool", None)
        if pool is None:  # RedisCluster: its nodes' pools are built from the same kwargs
            return None
        kwargs = getattr(pool, "connection_kwargs", {})
        for name in ("socket_timeout", "orig_socket_timeout"):
            if name in kwargs:
                return kwargs[name]
        for cls in getattr(pool, "connection_class", type(None)).__mro__:
            try:
                param = inspect.signature(cls.__init__).parameters.get("socket_timeout")
            except (TypeError, ValueError):
                continue
            if param is not None and param.default is not inspect.Parameter.empty:
                return param.default
        return None

    def give_back_wake(self, queue: str) -> None:
        self._read(lambda c: c.rpush(self.key(queue, "wake"), "1"))

    # -- queues registry (outside any queue's slot; plain commands) --------------

    def remember_queue(self, queue: str) -> None:
        if queue not in self._seen_queues:
            self._read(lambda c: c.sadd(self.queues_key, check_queue_name(queue)))
            self._seen_queues.add(queue)

    def queues(self) -> list[str]:
        return sorted(_text(q) for q in self._read(lambda c: c.smembers(self.queues_key)))

    def find(self, job_id: str, queues: Iterable[str]) -> RawJob | None:
        for queue in queues:
            raw = self.fetch(queue, job_id)
            if raw is not None:
                return raw
        return None

    def require(self, queue: str, job_id: str) -> RawJob:
        raw = self.fetch(queue, job_id)
        if raw is None:
            raise JobNotFound(f"no job {job_id!r} in queue {queue!r}")
        return raw

    # -- admin reads (the dashboard's read-only queries; each O(log N + page)) -----

    def size(self, queue: str, status: str) -> int:
        """ZCARD of one set (O(1))."""
        if status not in ("pending", "running", "dead"):
            raise ValueError(f"unknown job status {status!r}")
        return int(self._read(lambda c: c.zcard(self.key(queue, status))))

    def page_ids(self, queue: str, status: str, offset: int, limit: int) -> list[str]:
        """Ids only, in score order (ZRANGE by rank: O(log N + limit)); [] for limit < 1."""
        if status not in ("pending", "running", "dead"):
            raise ValueError(f"unknown job status {status!r}")
        if limit < 1 or offset < 0:
            return []
        ids = self._read(lambda c: c.zrange(self.key(queue, status), offset, offset + limit - 1))
        return [_text(i) for i in ids]

    def id_for_key(self, queue: str, key: str) -> str | None:
        """The job id holding a unique key in a queue (HGET on the keys hash), or None."""
        return _text(self._read(lambda c: c.hget(self.key(queue, "keys"), key)))

    # -- django.tasks results (backends.py): one string per result, in the queue's slot --------

    def result_key(self, queue: str, result_id: str) -> str:
        """``{prefix}:{<queue>}:result:<id>``: shares the queue's hash tag (cluster safe)."""
        self.keys(queue)  # validates the queue name
        return f"{self.prefix}:{{{queue}}}:result:{result_id}"

    def schedule_with_result(
        self,
        queue: str,
        job_id: str,
        record: bytes,
        result: bytes,
        ttl: float | None,
        **options: Any,
    ) -> Scheduled:
        """SET the job's result (expiring after ``ttl`` seconds, None: never), then run
        schedule.lua, pipelined in that order so no worker claims the job before its result
        exists. The result is deleted again if the script refuses."""
        self.remember_queue(queue)
        op = self.schedule_op(queue, job_id, record, **options)
        key = self.result_key(queue, job_id)
        if self.cluster:  # redis-py's ClusterPipeline refuses EVALSHA: SET, then the script
            self._read(lambda c: c.set(key, result, px=_ms(ttl)))
            try:
                return self.call(op)
            except DelayQConnectionError:
                raise
            except (DelayQError, redis.exceptions.RedisError):
                self._read(lambda c: c.delete(key))
                raise
        pipe = self.client.pipeline(transaction=False)
        pipe.set(key, result, px=_ms(ttl))
        self._scripts[op.script](keys=self.script_keys(queue), args=op.argv, client=pipe)
        try:
            reply = pipe.execute(raise_on_error=False)[-1]
        except redis.exceptions.RedisError as exc:
            raise translate_errors(exc) from exc
        if isinstance(reply, Exception):
            self._read(lambda c: c.delete(key))
            raise translate_errors(reply)
        return op.parse(reply)

    def save_result(self, queue: str, result_id: str, result: bytes, ttl: float | None) -> None:
        """SET a result, replacing it whole; it expires after ``ttl`` seconds (None: never)."""
        key = self.result_key(queue, result_id)
        self._read(lambda c: c.set(key, result, px=_ms(ttl)))

    def load_result(self, result_id: str, queues: Iterable[str]) -> tuple[str, bytes] | None:
        """(queue, result) of the first of ``queues`` holding the result: one pipelined GET each."""
        names = list(queues)
        if not names:
            return None
        keys = [self.result_key(queue, result_id) for queue in names]

        def read(client: Any) -> list:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.get(key)
            return pipe.execute()

        for queue, value in zip(names, self._read(read), strict=True):
            if value is not None:
                return queue, value
        return None
