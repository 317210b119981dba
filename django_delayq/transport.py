"""The one way django-delayq talks to Redis: packing, pipelining, routing, retries.

Every call of the storage layer is an :class:`Op`: a command (most often ``EVALSHA`` of one
of the scripts in ``lua/``), how to parse its reply, and its retry policy. :meth:`Transport.run`
sends a list of ops in one round trip per Redis node (a pipeline) and re-sends what may be
re-sent, until a deadline:

- Redis did not run the command (no connection could be made; or it answered ``NOSCRIPT``,
  ``BUSY``, ``LOADING``, ``READONLY``, ``MASTERDOWN``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MOVED``,
  ``ASK``, ``NOREPLICAS`` or ``MISCONF``): every op is sent again, after loading the script
  for ``NOSCRIPT``, reconnecting for ``READONLY`` (a failover) and refreshing the cluster's
  slots for ``MOVED``/``ASK``.
- The connection broke after the command was written, so Redis may have run it (a lost
  reply): only ops with :attr:`Policy.RESEND` are sent again; they are idempotent by
  construction (each script's header says how). An op with :attr:`Policy.ONCE` answers
  :class:`~django_delayq.exceptions.OutcomeUnknown` instead, and so does a re-sent op whose
  budget ran out before Redis answered it.
- Any other error reply (``WRONGTYPE``, ``OOM``, a script's own ``DELAYQ_...`` code) is
  that op's final answer, as a django-delayq exception; the scripts check before they write,
  so such an op changed nothing.

Ops are packed here rather than by redis-py (its per-argument encoding cost a bulk schedule
40% of its time) and sent on connections of the client's own pool, so a django-redis,
Sentinel or plain client works as configured; on a cluster each op goes to the node serving
its queue's slot. This is the only retry layer: redis-py's own ``Retry`` never runs here.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .exceptions import ConnectionError as DelayQConnectionError
from .exceptions import DelayQError, OutcomeUnknown
from .scripts import Script

logger = logging.getLogger("django_delayq.transport")

# Error replies of commands Redis did not run and that may succeed when sent again.
NOT_RUN = (
    "BUSY",
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
    "MISCONF",
    "NOSCRIPT",
)
BROKEN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
FIRST_PAUSE = 0.05
MAX_PAUSE = 1.0


class Policy(enum.Enum):
    RESEND = "resend"  # idempotent: re-sent after a lost reply
    ONCE = "once"  # re-sent only when Redis certainly did not run it


@dataclass(frozen=True)
class Op:
    """One command, how to read its reply, and whether it may be re-sent.

    ``args`` are bytes, str, int or float; ``route`` is a key whose hash slot picks the node on
    a cluster; ``script`` is set for ``EVALSHA`` (to load it after ``NOSCRIPT``);
    ``resend_args``, when set, replace ``args`` when the op is re-sent after a lost reply.
    """

    args: tuple
    parse: Callable[[Any], Any] | None = None
    policy: Policy = Policy.RESEND
    route: bytes | None = None
    script: Script | None = None
    resend_args: tuple | None = None
    # The first args packed already (EVALSHA, sha, key count, keys: the same for every call
    # of a script on a queue), and how many args that is.
    packed_head: bytes = b""
    head_len: int = 0

    @property
    def name(self) -> str:
        if self.script is not None:
            return self.script.name
        first = self.args[0]
        return first.decode() if isinstance(first, bytes) else str(first)


def pack(args: Sequence[Any], packed_head: bytes = b"", head_len: int = 0) -> bytes:
    """A command in the Redis protocol (an array of bulk strings); the first ``head_len``
    args may come packed already (``packed_head``)."""
    out = [b"*%d\r\n" % len(args), packed_head]
    for arg in args[head_len:] if head_len else args:
        kind = type(arg)
        if kind is bytes:
            data = arg
        elif kind is str:
            data = arg.encode()
        elif kind is int or kind is float:
            data = repr(arg).encode()
        else:
            raise TypeError(f"cannot send {arg!r} to Redis")
        out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


# redis-py strips the code from the error replies it maps to a class of its own.
_CODES: tuple[tuple[type, str], ...] = (
    (redis.exceptions.NoScriptError, "NOSCRIPT"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.MovedError, "MOVED"),
    (redis.exceptions.AskError, "ASK"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
)


def _code(exc: BaseException) -> str:
    """The error code of a Redis error reply ("BUSY", "NOSCRIPT"...), or ""."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    status = getattr(exc, "status_code", None)
    if isinstance(status, str):
        return status.upper()
    text = str(exc)
    return text.split(" ", 1)[0].upper() if text else ""


def translate(exc: BaseException) -> Exception:
    """A redis-py exception as django-delayq's (one place for every call)."""
    if isinstance(exc, DelayQError):
        return exc
    if isinstance(exc, redis.exceptions.ResponseError):
        text = str(exc)
        if "DELAYQ_" in text:
            code = text.split("DELAYQ_", 1)[1]
            return DelayQError(f"django-delayq script refused the operation: {code}")
        if _code(exc) == "OOM":
            return DelayQError(
                f"Redis refused the write: it is out of memory ({text}); raise maxmemory "
                "and keep maxmemory-policy noeviction"
            )
        return DelayQError(f"Redis answered an error: {text}")
    if isinstance(exc, BROKEN):
        return DelayQConnectionError(f"Redis is unreachable or the connection broke: {exc}")
    return DelayQError(f"unexpected error talking to Redis: {exc!r}")


def unavailable(exc: BaseException) -> Exception:
    """The last error of an op whose budget ran out: one Redis answers while it cannot take
    commands (a failover's READONLY, LOADING, a NOSCRIPT from a new master, BUSY...) is a
    ConnectionError like a refused connection, the op not run; anything else as translate()."""
    if _code(exc) in NOT_RUN:
        return DelayQConnectionError(
            f"Redis did not take the command within its time budget (last answer: {exc}); "
            "it may be failing over, loading or busy"
        )
    return translate(exc)


class _Failure:
    """Why one op has no answer yet: the error, and whether Redis may have run it."""

    __slots__ = ("exc", "maybe_ran")

    def __init__(self, exc: BaseException, maybe_ran: bool) -> None:
        self.exc, self.maybe_ran = exc, maybe_ran


class Transport:
    """Sends ops to one Redis, a Sentinel-managed Redis, or a Redis Cluster."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.RedisCluster)
        self._loaded: dict[Any, set[str]] = {}  # pool -> SHAs known to be loaded there
        self._lock = threading.Lock()

    # -- routing ------------------------------------------------------------------

    def pool(self, route: bytes | None) -> Any:
        """The connection pool of the node that serves ``route`` (the only pool off a cluster)."""
        if not self.cluster:
            return self.client.connection_pool
        if route is None:
            node = self.client.get_default_node()
        else:
            node = self.client.get_node_from_key(route)
        if node.redis_connection is None:
            self.client.nodes_manager.initialize()
            node = self.client.get_node_from_key(route) if route else node
        return node.redis_connection.connection_pool

    def _refresh_slots(self) -> None:
        if self.cluster:
            try:
                self.client.nodes_manager.initialize()
            except redis.exceptions.RedisError as exc:
                logger.debug("refreshing the cluster's slots failed: %s", exc)

    # -- sending ------------------------------------------------------------------

    def call(self, op: Op, budget: float) -> Any:
        """Run one op: its parsed reply; raises its django-delayq error."""
        (result,) = self.run([op], budget)
        if isinstance(result, Exception):
            raise result
        return result

    def run(self, ops: Sequence[Op], budget: float, resent: bool = False) -> list[Any]:
        """Each op's parsed reply, or its error as a django-delayq exception.

        One round trip per node, then re-sends as each op's policy allows until ``budget``
        seconds have passed (pausing 50 ms, doubling, at most 1 s, between rounds).
        ``resent``: the ops were sent before and their replies lost (they go with their
        resend args from the start).
        """
        results: list[Any] = [None] * len(ops)
        if not ops:
            return results
        deadline = time.monotonic() + budget
        todo = list(range(len(ops)))
        resent_ops: set[int] = set(todo) if resent else set()
        pause = FIRST_PAUSE
        while True:
            failures = self._round(ops, todo, resent_ops, results)
            todo = []
            for i, failure in failures.items():
                exc = failure.exc
                if isinstance(exc, redis.exceptions.ResponseError):
                    code = _code(exc)
                    if code not in NOT_RUN:
                        results[i] = translate(exc)
                        continue
                    if code in ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN"):
                        self._refresh_slots()
                elif failure.maybe_ran:
                    if ops[i].policy is not Policy.RESEND:
                        results[i] = OutcomeUnknown(
                            f"the connection to Redis broke after {ops[i].name} was sent "
                            f"({exc}): Redis may or may not have run it"
                        )
                        continue
                    resent_ops.add(i)
                todo.append(i)
            if not todo:
                return results
            if time.monotonic() + pause > deadline:
                for i in todo:
                    results[i] = (
                        OutcomeUnknown(
                            f"{ops[i].name} was sent, its reply was lost, and Redis could not "
                            f"be reached again ({failures[i].exc}): Redis may or may not have "
                            "run it"
                        )
                        if i in resent_ops
                        else unavailable(failures[i].exc)
                    )
                return results
            retryable = {_code(failures[i].exc) for i in todo}
            if retryable != {"NOSCRIPT"}:  # a script load needs no pause
                time.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE)

    def _round(
        self, ops: Sequence[Op], todo: list[int], resent: set[int], results: list[Any]
    ) -> dict[int, _Failure]:
        """Send ``todo`` once, one pipeline per node; store answers in ``results``."""
        by_pool: dict[Any, list[int]] = {}
        failures: dict[int, _Failure] = {}
        for i in todo:
            try:
                pool = self.pool(ops[i].route)
            except redis.exceptions.RedisError as exc:
                failures[i] = _Failure(exc, maybe_ran=False)
                continue
            by_pool.setdefault(pool, []).append(i)
        for pool, indexes in by_pool.items():
            failures.update(self._pipeline(pool, ops, indexes, resent, results))
        return failures

    def _pipeline(
        self,
        pool: Any,
        ops: Sequence[Op],
        indexes: list[int],
        resent: set[int],
        results: list[Any],
    ) -> dict[int, _Failure]:
        failures: dict[int, _Failure] = {}
        try:
            conn = pool.get_connection()
        except redis.exceptions.RedisError as exc:
            return {i: _Failure(exc, maybe_ran=False) for i in indexes}
        broken = False
        try:
            try:
                self._ensure_scripts(pool, conn, [ops[i] for i in indexes])
            except redis.exceptions.RedisError as exc:  # nothing of ours was sent
                broken = True  # replies of the other SCRIPT LOADs may be left unread
                return {i: _Failure(exc, maybe_ran=False) for i in indexes}
            payload = []
            for i in indexes:
                op = ops[i]
                args = op.resend_args if i in resent and op.resend_args is not None else op.args
                payload.append(pack(args, op.packed_head, op.head_len))
            try:
                conn.send_packed_command([b"".join(payload)])
            except BROKEN as exc:
                broken = True
                return {i: _Failure(exc, maybe_ran=True) for i in indexes}
            for pos, i in enumerate(indexes):
                try:
                    reply = conn.read_response()
                except redis.exceptions.BusyLoadingError as exc:  # -LOADING: not run
                    failures[i] = _Failure(exc, maybe_ran=False)
                    continue
                except redis.exceptions.ResponseError as exc:
                    failures[i] = _Failure(exc, maybe_ran=False)
                    if _code(exc) == "NOSCRIPT":
                        self._forget_scripts(pool)
                    elif _code(exc) == "READONLY":
                        broken = True  # a failover: reconnect to find the new master
                    continue
                except (*BROKEN, redis.exceptions.InvalidResponse) as exc:
                    broken = True
                    for j in indexes[pos:]:
                        failures[j] = _Failure(exc, maybe_ran=True)
                    break
                parse = ops[i].parse
                try:
                    results[i] = parse(reply) if parse is not None else reply
                except Exception as exc:  # a reply we cannot read: final, not retried
                    results[i] = DelayQError(f"unreadable reply to {ops[i].name}: {exc!r}")
        finally:
            if broken:
                conn.disconnect()
            pool.release(conn)
        return failures

    def stream(self, chunks: Iterable[Sequence[Op]], budget: float) -> Iterator[list[Any]]:
        """:meth:`run` for each chunk of re-sendable ops, in order, one round trip each, with
        the next chunk sent before the replies of this one are read (building the next chunk
        overlaps Redis running this one). A chunk whose replies were lost with a broken
        connection is sent again (with its resend args); ops Redis answered without running
        them (NOSCRIPT, BUSY...) are sent again through :meth:`run`. On a cluster, chunk
        after chunk."""
        if self.cluster:
            for ops in chunks:
                yield self.run(ops, budget)
            return
        pool = self.client.connection_pool
        in_flight: deque[Sequence[Op]] = deque()  # sent, replies not read yet, in order
        conn: Any = None
        broken = False

        def read_until(left: int) -> Iterator[list[Any]]:
            while len(in_flight) > left:
                replies = self._chunk_replies(conn, pool, in_flight[0], budget)  # may raise
                in_flight.popleft()  # only once its replies are read
                yield replies

        try:
            for ops in chunks:
                if broken:
                    yield self.run(ops, budget)
                    continue
                queued = False
                try:
                    if conn is None:
                        conn = pool.get_connection()
                    if self._missing_scripts(pool, ops):
                        yield from read_until(0)  # SCRIPT LOAD's replies must not meet theirs
                        self._ensure_scripts(pool, conn, ops)
                    in_flight.append(ops)
                    queued = True
                    conn.send_packed_command(
                        [b"".join(pack(op.args, op.packed_head, op.head_len) for op in ops)]
                    )
                    yield from read_until(1)
                except (*BROKEN, redis.exceptions.RedisError):
                    broken = True
                    if conn is not None:
                        conn.disconnect()
                    while in_flight:  # may have run: sent again, idempotently, in order
                        yield self.run(in_flight.popleft(), budget, resent=True)
                    if not queued:  # nothing of it was sent
                        yield self.run(ops, budget)
            if not broken:
                try:
                    yield from read_until(0)
                except (*BROKEN, redis.exceptions.RedisError):
                    conn.disconnect()
                    while in_flight:
                        yield self.run(in_flight.popleft(), budget, resent=True)
        finally:
            if conn is not None:
                if in_flight:  # abandoned with replies unread
                    conn.disconnect()
                pool.release(conn)

    def _chunk_replies(self, conn: Any, pool: Any, ops: Sequence[Op], budget: float) -> list[Any]:
        """Read one sent chunk's replies. A broken connection raises (the caller re-sends);
        ops Redis did not run are sent again through run()."""
        results: list[Any] = [None] * len(ops)
        again: list[int] = []
        for i, op in enumerate(ops):
            try:
                reply = conn.read_response()
            except redis.exceptions.BusyLoadingError:
                again.append(i)
                continue
            except redis.exceptions.ResponseError as exc:
                if _code(exc) in NOT_RUN:
                    again.append(i)
                    if _code(exc) == "NOSCRIPT":
                        self._forget_scripts(pool)
                else:
                    results[i] = translate(exc)
                continue
            try:
                results[i] = op.parse(reply) if op.parse is not None else reply
            except Exception as exc:
                results[i] = DelayQError(f"unreadable reply to {op.name}: {exc!r}")
        if again:
            for i, result in zip(again, self.run([ops[i] for i in again], budget), strict=True):
                results[i] = result
        return results

    def _missing_scripts(self, pool: Any, ops: Sequence[Op]) -> bool:
        with self._lock:
            known = self._loaded.get(pool, set())
            return any(op.script is not None and op.script.sha not in known for op in ops)

    # -- scripts ----------------------------------------------------------------------

    def _ensure_scripts(self, pool: Any, conn: Any, ops: Sequence[Op]) -> None:
        """SCRIPT LOAD the scripts of ``ops`` not yet known to be on this node (once per
        node and process, or again after a NOSCRIPT: a restart or SCRIPT FLUSH)."""
        with self._lock:
            known = self._loaded.setdefault(pool, set())
            missing = {op.script.sha: op.script for op in ops if op.script} if ops else {}
            missing = {sha: s for sha, s in missing.items() if sha not in known}
        if not missing:
            return
        conn.send_packed_command(
            [b"".join(pack((b"SCRIPT", b"LOAD", s.source)) for s in missing.values())]
        )
        for script in missing.values():
            sha = conn.read_response()
            sha = sha.decode() if isinstance(sha, bytes) else sha
            if sha != script.sha:
                raise DelayQError(f"Redis loaded {script.name}.lua as {sha}, not {script.sha}")
        with self._lock:
            self._loaded.setdefault(pool, set()).update(missing)

    def _forget_scripts(self, pool: Any) -> None:
        with self._lock:
            self._loaded.pop(pool, None)


class Marker:
    """Fire-and-forget commands on a connection of their own with ``CLIENT REPLY OFF``.

    A worker's runner marks a job started just before running it; the mark must reach Redis
    even if the job then kills the process (os._exit, a segfault): bytes written to a socket
    are delivered when the kernel closes it, and with no replies coming back nothing unread
    makes it reset the connection instead. Nothing waits for Redis, so a mark costs one
    write. Clients whose connections are not sockets (fakeredis) are written synchronously.
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._conns: dict[Any, Any] = {}
        self._fake: dict[Any, bool] = {}
        self._lock = threading.Lock()

    def write(self, route: bytes, data: bytes) -> bool:
        """Write one packed command to the node of ``route``; False if it could not be
        written (the caller goes on regardless)."""
        pool = self.transport.pool(route)
        fake = self._fake.get(pool)
        if fake is None:
            kinds = f"{type(pool).__module__} {getattr(pool, 'connection_class', '')}"
            fake = self._fake[pool] = "fakeredis" in kinds
        if fake:
            return self._write_and_read(pool, data)
        with self._lock:
            for _ in range(2):
                conn = self._conns.get(pool)
                try:
                    if conn is None:
                        conn = pool.make_connection()
                        conn.connect()
                        conn.send_packed_command([pack((b"CLIENT", b"REPLY", b"OFF"))])
                        _coalesce(conn)
                        self._conns[pool] = conn
                    conn.send_packed_command([data], check_health=False)
                    return True
                except (*BROKEN, redis.exceptions.RedisError) as exc:
                    logger.debug("mark not written (%s); reconnecting", exc)
                    if conn is not None:
                        conn.disconnect()
                    self._conns.pop(pool, None)
        return False

    @staticmethod
    def _write_and_read(pool: Any, data: bytes) -> bool:
        try:
            conn = pool.get_connection()
        except redis.exceptions.RedisError:
            return False
        try:
            conn.send_packed_command([data])
            conn.read_response()
            return True
        except (*BROKEN, redis.exceptions.RedisError):
            conn.disconnect()
            return False
        finally:
            pool.release(conn)

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.disconnect()
            self._conns.clear()


def _coalesce(conn: Any) -> None:
    """Let the kernel coalesce this connection's small writes (Nagle's algorithm, which
    redis-py turns off): a mark is then a copy into the socket's buffer instead of a trip
    through the TCP stack per job, and it still reaches Redis within a round trip, or when
    the process dies (the kernel sends what is buffered when it closes the socket)."""
    sock = getattr(conn, "_sock", None)
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
