"""Start marks: a runner marks a job started just before running it, with no reply awaited.

A job marked started counts its attempt if its worker dies. The mark must reach Redis even
if the job then kills the process (os._exit, a segfault): it is written on a connection of
its own with ``CLIENT REPLY OFF`` (:class:`Marker`), so bytes written to the socket are
delivered when the kernel closes it, and with no replies coming back nothing unread makes it
reset the connection instead. Nothing waits for Redis, so a mark costs one write.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

import redis

from django_delayq.storage.errors import BROKEN
from django_delayq.storage.keys import KeyNames
from django_delayq.storage.milliseconds import ms
from django_delayq.storage.ops import pack
from django_delayq.storage.transport import Transport

logger = logging.getLogger("django_delayq.transport")


class StartMarks:
    """A runner's start marks (the same write as ``Store.mark_op``, a ``ZADD XX GT`` of the
    running set), written with no reply awaited. Per mark: one preformatted write, no Op
    built (a runner pays this before every job)."""

    def __init__(self, transport: Transport, names: KeyNames) -> None:
        self.names = names
        self.marker = Marker(transport)
        self._heads: dict[str, tuple[bytes, bytes]] = {}  # queue -> (route, packed prefix)

    def mark(self, queue: str, job_id: str, lease_until: float) -> bool:
        """One job's mark (a runner thread's, before every job)."""
        route, prefix = self._heads.get(queue) or self._head(queue)
        return self.marker.write(route, _packed(prefix, job_id, lease_until))

    def mark_many(self, queue: str, marks: list[tuple[str, float]]) -> bool:
        """Marks of several jobs of one queue, in one write (the worker's event loop
        starts many attempts at once)."""
        route, prefix = self._heads.get(queue) or self._head(queue)
        parts = [_packed(prefix, job_id, lease_until) for job_id, lease_until in marks]
        return self.marker.write(route, b"".join(parts), len(parts))

    def _head(self, queue: str) -> tuple[bytes, bytes]:
        running = self.names.key(queue, "running").encode()
        prefix = b"*6\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n$2\r\nXX\r\n$2\r\nGT\r\n" % (
            len(running),
            running,
        )
        self._heads[queue] = (running, prefix)
        return running, prefix

    def close(self) -> None:
        self.marker.close()


def _packed(prefix: bytes, job_id: str, lease_until: float) -> bytes:
    score, member = b"%d" % ms(lease_until), job_id.encode()
    return b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n" % (prefix, len(score), score, len(member), member)


class Marker:
    """Fire-and-forget commands on a connection of their own with ``CLIENT REPLY OFF``, one
    per node. Clients whose connections are not sockets (fakeredis) are written
    synchronously."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._conns: dict[Any, Any] = {}
        self._fake: dict[Any, bool] = {}
        self._lock = threading.Lock()

    def write(self, route: bytes, data: bytes, commands: int = 1) -> bool:
        """Write packed commands (``commands`` of them) to the node of ``route``; False if
        they could not be written (the caller goes on regardless)."""
        pool = self.transport.pool(route)
        fake = self._fake.get(pool)
        if fake is None:
            kinds = f"{type(pool).__module__} {getattr(pool, 'connection_class', '')}"
            fake = self._fake[pool] = "fakeredis" in kinds
        if fake:
            return self._write_and_read(pool, data, commands)
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
    def _write_and_read(pool: Any, data: bytes, commands: int) -> bool:
        try:
            conn = pool.get_connection()
        except redis.exceptions.RedisError:
            return False
        try:
            conn.send_packed_command([data])
            for _ in range(commands):
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
