"""Building the Store's ops and sending them: the base of every part of the Store (its
transitions, reads, roster and old layout).

An op on a queue is ``EVALSHA`` of one script (lua/<name>.lua) on those keys of the queue it
declares; its head (``EVALSHA``, SHA, key count, keys) is encoded and packed once per script
and queue. A plain command names a key it touches, which routes it on a cluster. Ops go
through the :class:`~.transport.Transport`: a list in one round trip per node (:meth:`run`),
one op (:meth:`call`), or chunks back to back (:meth:`stream`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django_delayq.storage.keys import KeyNames
from django_delayq.storage.ops import Op, Policy, pack
from django_delayq.storage.scripts import script
from django_delayq.storage.transport import Transport

# Seconds an API call (schedule, cancel...) keeps re-sending what may be re-sent; the
# worker's calls use WORKER_BUDGET and keep their results for the next round trip after it.
API_BUDGET = 2.0
WORKER_BUDGET = 1.0


class Calls(KeyNames):
    """Ops on the keys of one prefix, sent to one Redis (or Redis Cluster)."""

    def __init__(self, client: Any, prefix: str = "delayq") -> None:
        super().__init__(prefix)
        self.client = client
        self.transport = Transport(client)
        self.cluster = self.transport.cluster
        # EVALSHA, SHA and keys of a (script, queue, extra key), encoded and packed once.
        self._heads: dict[tuple[str, str, str], tuple[tuple[bytes, ...], bytes]] = {}

    def _head(self, name: str, queue: str, extra: str = "") -> tuple[tuple[bytes, ...], bytes]:
        """``EVALSHA <sha> <n> <keys...>`` of script ``name`` on ``queue`` (the keys it
        declares, then ``extra`` if given: a key its header allows after them), and the
        same packed."""
        head = self._heads.get((name, queue, extra))
        if head is None:
            lua = script(name)
            keys = [self.key(queue, kind).encode() for kind in lua.keys]
            if extra:
                keys.append(extra.encode())
            args = (b"EVALSHA", lua.sha_bytes, b"%d" % len(keys), *keys)
            head = (args, pack(args)[len(b"*%d\r\n" % len(args)) :])
            if len(self._heads) < 10_000:
                self._heads[name, queue, extra] = head
        return head

    def op(
        self,
        name: str,
        queue: str,
        argv: Sequence[Any],
        parse: Any,
        policy: Policy = Policy.RESEND,
        resend_argv: Sequence[Any] | None = None,
        extra_key: str = "",
        parse_resent: Any = None,
        packed_tail: tuple[bytes, int] = (b"", 0),
    ) -> Op:
        """An EVALSHA of script ``name`` on the keys of ``queue`` it declares (and
        ``extra_key``, for a script whose header takes one after them); ``packed_tail``:
        args after ``argv`` (and ``resend_argv``) packed already, and how many."""
        lua = script(name)
        head, packed = self._head(name, queue, extra_key)
        return Op(
            (*head, *argv),
            parse,
            policy,
            route=head[3],
            script=lua,
            resend_args=None if resend_argv is None else (*head, *resend_argv),
            packed_head=packed,
            head_len=len(head),
            parse_resent=parse_resent,
            packed_tail=packed_tail[0],
            tail_len=packed_tail[1],
        )

    def slot_op(self, name: str, keys: Sequence[str], argv: Sequence[Any], parse: Any) -> Op:
        """An EVALSHA of script ``name`` on ``keys`` (one slot, not a queue's: a batch's),
        re-sent after a lost reply."""
        lua = script(name)
        args = (b"EVALSHA", lua.sha_bytes, b"%d" % len(keys), *(k.encode() for k in keys))
        return Op((*args, *argv), parse, Policy.RESEND, route=args[3], script=lua)

    def command(self, *args: Any, route: str | None = None, policy: Policy = Policy.RESEND) -> Op:
        """A plain command (``route``: a key it touches, for a cluster)."""
        return Op(args, None, policy, route=route.encode() if route else None)

    def address(self) -> str:
        """Where this Redis is, for a log line (host:port/db; never a password)."""
        return self.transport.address()

    def run(self, ops: Sequence[Op], budget: float = WORKER_BUDGET) -> list[Any]:
        """Run ops in one round trip per node; each result is a value or an exception."""
        return self.transport.run(ops, budget)

    def call(self, op: Op, budget: float = API_BUDGET) -> Any:
        return self.transport.call(op, budget)

    def stream(self, chunks: Iterable[Sequence[Op]], budget: float = API_BUDGET) -> Iterator[list]:
        """:meth:`run` for each chunk of re-sendable ops, in order, the next chunk sent before
        this one's replies are read (schedule_many; see Transport.stream)."""
        return self.transport.stream(chunks, budget)
