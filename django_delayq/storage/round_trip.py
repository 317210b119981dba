"""One round trip on one connection, without its I/O: what the sync transport
(:mod:`.transport`) and the asyncio one (:mod:`.async_transport`) share, so that they
differ only in how they write and read (``conn.read_response()`` or
``await conn.read_response()``).

- :class:`Round`: the bytes of the ops sent together (each with its resend args once it
  may have run), and what each reply or error read back means: an answer, a failure for
  :class:`.resends.Resends` to triage (:func:`.resends.reply_failure`), scripts to load
  again after ``NOSCRIPT``, a connection that must not go back to its pool.
- :class:`LoadedScripts`: which scripts each node has loaded (once per node and process,
  again after a ``NOSCRIPT``: a restart or ``SCRIPT FLUSH``), the ``SCRIPT LOAD`` command
  for the missing ones and the check of its replies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django_delayq.exceptions import DelayQError
from django_delayq.storage.ops import Op, pack
from django_delayq.storage.resends import (
    LOST,
    NOSCRIPT,
    READ_ERRORS,
    RECONNECT,
    Failure,
    reply_failure,
)
from django_delayq.storage.scripts import Script


class Round:
    """``ops[i]`` for each ``i`` of ``indexes``, written together on one connection; their
    answers go to ``results[i]``, their failures to :attr:`failures`. ``resent``: the
    indexes Redis may have run already (sent with their resend args)."""

    __slots__ = ("failures", "indexes", "noscript", "ops", "resent", "results", "reusable")

    def __init__(
        self, ops: Sequence[Op], indexes: list[int], resent: set[int], results: list[Any]
    ) -> None:
        self.ops, self.indexes, self.resent, self.results = ops, indexes, resent, results
        self.failures: dict[int, Failure] = {}
        self.reusable = True  # every reply read and no failover: back to the pool it goes
        self.noscript = False  # Redis lost its scripts: forget what was loaded there

    def payload(self) -> bytes:
        ops, resent = self.ops, self.resent
        return b"".join([ops[i].packed(resent=i in resent) for i in self.indexes])

    def not_sent(self, exc: BaseException) -> dict[int, Failure]:
        """Nothing of ours was written (no connection, or loading the scripts failed)."""
        self.reusable = False  # the replies of other SCRIPT LOADs may be left unread
        self.failures = {i: Failure(exc, maybe_ran=False) for i in self.indexes}
        return self.failures

    def write_broke(self, exc: BaseException) -> dict[int, Failure]:
        """The connection broke while writing: Redis may have run any of the ops."""
        self.reusable = False
        self.failures = {i: Failure(exc, maybe_ran=True) for i in self.indexes}
        return self.failures

    def read_all(self, read_response: Callable[[], Any]) -> bool:
        """Read every reply with ``read_response`` (a sync connection's), in order; False
        when the connection broke. (The asyncio transport awaits each instead.)"""
        ops, results = self.ops, self.results
        for pos, i in enumerate(self.indexes):
            try:
                reply = read_response()
            except READ_ERRORS as exc:
                if self.read_failed(pos, exc):
                    continue
                return False
            results[i] = ops[i].read(reply, i in self.resent)
        return True

    def answered(self, pos: int, reply: Any) -> None:
        """The reply of the ``pos``-th op sent, parsed into ``results``."""
        i = self.indexes[pos]
        self.results[i] = self.ops[i].read(reply, i in self.resent)

    def read_failed(self, pos: int, exc: BaseException) -> bool:
        """Reading the ``pos``-th reply raised ``exc`` (one of :data:`.resends.READ_ERRORS`):
        True to read on; False when the connection broke, the replies from this one on lost
        (their ops may have run)."""
        failure, then = reply_failure(exc)
        if then == LOST:
            self.reusable = False
            self.failures.update(dict.fromkeys(self.indexes[pos:], failure))
            return False
        self.failures[self.indexes[pos]] = failure
        self.noscript = self.noscript or then == NOSCRIPT
        self.reusable = self.reusable and then != RECONNECT  # a failover: find the new master
        return True


class LoadedScripts:
    """The SHAs of the scripts known to be loaded, per node (any hashable: a pool)."""

    def __init__(self) -> None:
        self._known: dict[Any, set[str]] = {}
        self._lock = threading.Lock()

    def missing(self, node: Any, ops: Sequence[Op]) -> dict[str, Script]:
        """The scripts of ``ops`` not known to be loaded on ``node``, by SHA."""
        known = self._known.get(node)
        if known is not None:  # the common case, read without the lock (membership is atomic)
            for op in ops:
                if op.script is not None and op.script.sha not in known:
                    break
            else:
                return {}
        with self._lock:
            known = self._known.get(node, set())
            return {
                op.script.sha: op.script
                for op in ops
                if op.script is not None and op.script.sha not in known
            }

    @staticmethod
    def load_command(missing: dict[str, Script]) -> bytes:
        """``SCRIPT LOAD`` of each of ``missing``, in one write (one reply each, in order)."""
        return b"".join(pack((b"SCRIPT", b"LOAD", s.source)) for s in missing.values())

    @staticmethod
    def check(script: Script, reply: Any) -> None:
        """Refuse a ``SCRIPT LOAD`` reply that is not ``script``'s SHA."""
        sha = reply.decode() if isinstance(reply, bytes) else reply
        if sha != script.sha:
            raise DelayQError(f"Redis loaded {script.name}.lua as {sha}, not {script.sha}")

    def loaded(self, node: Any, missing: dict[str, Script]) -> None:
        with self._lock:
            self._known.setdefault(node, set()).update(missing)

    def forget(self, node: Any) -> None:
        """Redis answered NOSCRIPT: its scripts were flushed (a restart or SCRIPT FLUSH)."""
        with self._lock:
            self._known.pop(node, None)
