"""A minimal Redis client (RESP2 over a socket) for ``compare.py``, which runs on any
Python without redis-py: enough for PING, FLUSHALL, INFO, DEL, LLEN and LRANGE."""

from __future__ import annotations

import socket
from typing import Any


class Resp:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.file = self.sock.makefile("rb")

    def __call__(self, *args: str | bytes) -> Any:
        parts = [arg.encode() if isinstance(arg, str) else arg for arg in args]
        request = b"*%d\r\n" % len(parts)
        request += b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)
        self.sock.sendall(request)
        return self._reply()

    def _reply(self) -> Any:
        line = self.file.readline()
        if not line:
            raise ConnectionError("Redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(f"Redis error: {rest.decode()}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.file.read(size + 2)[:-2]
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._reply() for _ in range(size)]
        raise ConnectionError(f"unexpected reply from Redis: {line!r}")

    def close(self) -> None:
        self.file.close()
        self.sock.close()
