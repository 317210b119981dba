"""What the storage layer sends: an :class:`Op` (one command, how to read its reply, whether
it may be re-sent) and :func:`pack`, its bytes in the Redis protocol; :func:`pack_jobs`, the
jobs of a schedule_many.lua call packed as they are read.

Ops are packed here rather than by redis-py: its per-argument encoding cost a bulk schedule
40% of its time.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django_delayq.exceptions import DelayQError
from django_delayq.storage.milliseconds import ms
from django_delayq.storage.scripts import Script


class Policy(enum.Enum):
    RESEND = "resend"  # idempotent: re-sent after a lost reply
    ONCE = "once"  # re-sent only when Redis certainly did not run it


@dataclass(slots=True)
class Op:
    """One command, how to read its reply, and whether it may be re-sent.

    ``args`` are bytes, str, int or float; ``route`` is a key whose hash slot picks the node on
    a cluster; ``script`` is set for ``EVALSHA`` (to load it after ``NOSCRIPT``);
    ``resend_args``, when set, replace ``args`` when the op is re-sent after a lost reply.
    Nothing changes an Op once built; it is not a frozen dataclass because that one's
    ``__init__`` sets each field through ``object.__setattr__`` (every schedule() builds one).
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
    # How to read the reply of a re-send after a lost reply, when that differs (the claim's:
    # an ack it carries answers "gone" for what the lost send acknowledged).
    parse_resent: Callable[[Any], Any] | None = None
    # The last args packed already, after ``args`` (or ``resend_args``), and how many args
    # that is: schedule_many's jobs, packed as they are read (storage/store.py).
    packed_tail: bytes = b""
    tail_len: int = 0

    @property
    def name(self) -> str:
        if self.script is not None:
            return self.script.name
        first = self.args[0]
        return first.decode() if isinstance(first, bytes) else str(first)

    def read(self, reply: Any, resent: bool = False) -> Any:
        """The reply parsed (``resent``: the reply of a re-send, read by ``parse_resent``
        when the op has one). One that cannot be read is the op's final answer (not
        retried): a DelayQError."""
        parse = self.parse_resent if resent and self.parse_resent is not None else self.parse
        try:
            return parse(reply) if parse is not None else reply
        except Exception as exc:
            return DelayQError(f"unreadable reply to {self.name}: {exc!r}")

    def packed(self, resent: bool = False) -> bytes:
        """The command's bytes; ``resent``: with its resend args, if it has any."""
        args = self.resend_args if resent and self.resend_args is not None else self.args
        if self.tail_len:
            return pack(args, self.packed_head, self.head_len, self.tail_len) + self.packed_tail
        return pack(args, self.packed_head, self.head_len)


# The short words scripts take as flags and modes, packed once: most of a schedule's ARGV.
_WORDS = {
    w: b"$%d\r\n%b\r\n" % (len(w), w.encode()) for w in ("", "1", "delay", "at", "replace", "keep")
}


def pack(args: Sequence[Any], packed_head: bytes = b"", head_len: int = 0, more: int = 0) -> bytes:
    """A command in the Redis protocol (an array of bulk strings); the first ``head_len``
    args may come packed already (``packed_head``); ``more``: args packed already that the
    caller writes after these (counted in the array's length)."""
    out = [b"*%d\r\n" % (len(args) + more), packed_head]
    for arg in args[head_len:] if head_len else args:
        kind = type(arg)
        if kind is str:
            word = _WORDS.get(arg)
            if word is not None:
                out.append(word)
                continue
            data = arg.encode()
        elif kind is bytes:
            data = arg
        elif kind is int or kind is float:
            data = repr(arg).encode()
        else:
            raise TypeError(f"cannot send {arg!r} to Redis")
        out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


def bulk(data: bytes) -> bytes:
    """One bulk string of the Redis protocol (an argument of a command), packed."""
    return b"$%d\r\n%b\r\n" % (len(data), data)


def pack_jobs(jobs: Sequence[tuple[Any, ...]]) -> tuple[bytes, int, list[tuple[str, str, int]]]:
    """The jobs of a schedule_many.lua call ((id, record, when) or (id, record, when, link),
    see Store.schedule_many_op) as its arguments after the first two, packed (the bytes
    ops.pack writes for them), their count, and each job's (id, mode, milliseconds) for
    parse_many. Each job is packed in one step as it is read."""
    packed: list[bytes] = []
    plan: list[tuple[str, str, int]] = []
    encoded: dict[tuple[str, float], bytes] = {}  # jobs share a `when`
    last: Any = None  # the last job's `when` (the jobs of one plan share the dict)
    for job in jobs:
        job_id, record, when = job[0], job[1], job[2]
        if when is not last:
            last = when
            mode, seconds = ("at", when["at"]) if "at" in when else ("delay", when["delay"])
            value = ms(float(seconds or 0.0))
            when_args = encoded.get((mode, value))
            if when_args is None:
                when_args = encoded[mode, value] = bulk(mode.encode()) + bulk(b"%d" % value)
        raw_id = job_id.encode()
        raw = record if type(record) is bytes else record.encode()
        text = job[3] if len(job) > 3 else ""
        raw_link = text if type(text) is bytes else text.encode()
        packed.append(
            b"$%d\r\n%b\r\n$%d\r\n%b\r\n%b$%d\r\n%b\r\n"
            % (len(raw_id), raw_id, len(raw), raw, when_args, len(raw_link), raw_link)
        )
        plan.append((job_id, mode, value))
    return b"".join(packed), 5 * len(packed), plan
