"""The job record: the bytes stored for a job in its queue's ``jobs`` hash, and their format.

A record holds what the producer decided and never changes while the job waits (a unique-key
replace swaps it whole). Format 3 (since 0.2) is a header the Lua scripts read, then a body
only Python reads::

    5ik=19:order:42:autocancel\\n    header: max_retries 5, flags i and k, the key (19 bytes)
    shop.tasks.cancel_order\\n       the task name
    {"reason":"unpaid"}\\n           keyword arguments (only with flag 'k')
    42,"x"                          the positional arguments: a JSON array without [ ]

A job with a priority other than 0 ends its header with ``^<priority>`` (after the key, if
any): ``5ik=19:order:42:autocancel^10``; scripts read it to put the job in the queue's
``ranked`` set (``lua/_lib.lua``). A reader older than priorities refuses such a header.

The header is everything scripts need (``header()`` in ``lua/_lib.lua``), so they never
decode user data, whatever its size or nesting: ``max_retries`` (decided once, when the job is
scheduled), flags (``i``: keep a tombstone when it finishes, see ``store.py``; ``k``: has
keyword arguments; ``u``: max_retries undecided, see below; ``l``: linked, a member of a batch
or a step of a chain, its link stored beside the record; ``e``: its tombstone is kept a day;
``g``: scheduled with ``group=``, its group stored beside the record, for the task's limits
per group; ``d``: scheduled with ``max_wait=``, its first due time kept in ``keys`` beside its
unique key, which ack.lua deletes with it; a reader that does not know it, 0.7.0's, leaves
the entry, which names this job and so is overwritten by the key's next debounced schedule;
``h``: scheduled with ``unique_until="end"``, its key holds while it runs and its end, however
it ends, promotes the key's follower (``lua/include/followers.lua``); a 0.7.0 worker runs
such a job as any keyed one but its end promotes nothing: the key's next schedule does)
and the unique key.

A process that schedules a task by name without importing it (``CHECK_NAMES`` off) does not
know the task's ``max_retries``: it writes its ``MAX_RETRIES`` setting and flag ``u``, and
the worker that runs the job writes the task's own into the header (``settle_record``,
``lua/settle.lua``) as it starts it. A reader that does not know flag ``u`` (0.2.0) reads
the digits, as before; a new flag letter keeps the format at 3.

A record of 0.1 (a JSON array, format 2, or object, format 1) is still decoded here;
scripts treat it as having no unique key and the ``MAX_RETRIES`` setting.

A job scheduled with ``expires=`` or ``unique_for=`` (since 0.8) carries them in trailers of
JSON whitespace at the end of its record (:mod:`django_delayq.jobs.trailers`).

What changes as the job runs lives beside the record (:mod:`django_delayq.jobs.state`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django_delayq.exceptions import CorruptJob
from django_delayq.jobs.arguments import comes_back_equal, dumps, refusal
from django_delayq.jobs.trailers import EXPIRY_WIDTH, expiry_trailer, read_expiry

FLAG_TOMBSTONE = "i"
FLAG_KWARGS = "k"
FLAG_UNDECIDED = "u"
FLAG_LINKED = "l"  # a link beside the record: a batch member or chain step (lua/_lib.lua)
FLAG_LONG_TOMBSTONE = "e"  # with 'i': the tombstone is kept a day (a callback, a next step)
FLAG_GROUPED = "g"  # a group beside the record (schedule(group=...), lua/_lib.lua's A)
FLAG_TRACED = "t"  # a trace context beside the record (OpenTelemetry, lua/_lib.lua's O)
FLAG_EXPIRES = "x"  # an expiry at the end of the record (expiry_trailer)
FLAG_DEBOUNCED = "d"  # scheduled with max_wait=: its first due time kept beside its key
FLAG_WINDOW = "w"  # unique_for=: its window (ms) in a trailer (window_trailer)
FLAG_HELD = "h"  # unique_until="end": its key holds while it runs (lua/include/followers.lua)


def expires_of(record: bytes) -> int | None:
    """The expiry (epoch ms) of a record, None for one without flag 'x' (one regex match on
    its first bytes: what a worker pays per claimed job)."""
    match = _HEADER.match(record)
    if match is None or b"x" not in match.group(2):
        return None
    return read_expiry(record)


def encode_record(
    task: str,
    args: list,
    kwargs: dict,
    key: str | None = None,
    max_retries: int = 0,
    flags: str = "",
    priority: int = 0,
    expires_ms: int | None = None,
    window_ms: int | None = None,
) -> bytes:
    """Encode a job record (format 3), refusing arguments that would not come back equal;
    ``expires_ms``, ``window_ms``: flag 'x' or 'w' and its trailer (the module docstring).

    One ``dumps`` and one ``loads`` (both in C) decide, the ``loads`` only when an argument
    is not a plain str/int/bool/None/finite float; only when they disagree is the structure
    walked, to name the offending argument in the error.
    """
    try:
        args_text = dumps(args)
        kwargs_text = dumps(kwargs) if kwargs else ""
        ok = comes_back_equal(args, args_text, kwargs, kwargs_text)
        body = (
            f"{task}\n{kwargs_text}\n{args_text[1:-1]}" if kwargs else f"{task}\n{args_text[1:-1]}"
        )
        data = body.encode()  # UnicodeEncodeError (a ValueError): a lone surrogate
    except (TypeError, ValueError, RecursionError):
        ok = False
    if not ok:
        raise refusal(task, args, kwargs)
    if kwargs:
        flags += FLAG_KWARGS
    if window_ms is not None:
        flags += "" if FLAG_WINDOW in flags else FLAG_WINDOW
        data += expiry_trailer(window_ms)
    if expires_ms is not None:
        flags += FLAG_EXPIRES
        data += expiry_trailer(expires_ms)
    head = f"{max_retries}{flags}".encode()
    if key is not None:
        raw_key = key.encode()
        head += b"=%d:%s" % (len(raw_key), raw_key)
    if priority:
        head += b"^%d" % priority
    return head + b"\n" + data


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a producer decided of a job, the reasons for its flags included: the one input
    of :func:`encode_job` (schedule() and schedule_many(), batch steps, the django.tasks
    backend and recurring occurrences build one).

    ``undecided``: this process does not know the task's max_retries (flag 'u': the worker
    writes the task's); ``tombstone``: a finished job leaves a tombstone (flag 'i': due soon,
    so a re-sent schedule may come after it ran; an occurrence; a step); ``outbox``: bound for
    the database outbox (flag 'i': a row may be relayed twice); ``relayed``: stored as a
    re-send (a step: schedule.lua's relay), never on the plain path; ``long_tombstone``:
    the tombstone kept a day (flag 'e'); ``linked``, ``grouped``, ``traced``: a link, group
    or trace context stored beside the record (flags 'l', 'g', 't')."""

    task: str
    args: list
    kwargs: dict
    key: str | None = None
    max_retries: int = 0
    priority: int = 0
    undecided: bool = False
    tombstone: bool = False
    outbox: bool = False
    relayed: bool = False
    long_tombstone: bool = False
    linked: bool = False
    grouped: bool = False
    traced: bool = False
    expires_ms: int | None = None  # flag 'x': not run once Redis's clock passed it
    debounced: bool = False  # flag 'd': max_wait= (ack.lua drops its first due time)
    window_ms: int | None = None  # flag 'w': unique_for= (its success holds the key this long)
    held: bool = False  # flag 'h': unique_until="end" (its end promotes its key's follower)


@dataclass(frozen=True, slots=True)
class Encoded:
    """A job's record (``data``), its flags as stored (without 'k', as :class:`Fields`
    reads them), ``info`` (the flags and key as ack.lua takes them), ``plain`` (engine
    design 4.1: no unique key, priority 0, none of the flags i, e, l, g, t) and
    ``plain_schedule`` (lua/schedule_plain.lua may store it: plain but for flag 'i', whose
    tombstone that script checks on a re-send, and neither bound for the outbox nor
    relayed)."""

    data: bytes
    flags: str
    info: str
    plain: bool
    plain_schedule: bool


_NOT_PLAIN = frozenset(FLAG_LONG_TOMBSTONE + FLAG_LINKED + FLAG_GROUPED + FLAG_TRACED)


def encode_job(spec: JobSpec) -> Encoded:
    """The record of ``spec`` (format 3; see :func:`encode_record` for the arguments'
    check), its flags decided here from the spec's reasons, always in the order i, e, u,
    g, l, t, d, w (then k, for keyword arguments)."""
    flags = FLAG_TOMBSTONE if spec.tombstone or spec.outbox else ""
    if spec.long_tombstone:
        flags += FLAG_LONG_TOMBSTONE
    if spec.undecided:
        flags += FLAG_UNDECIDED
    if spec.grouped:
        flags += FLAG_GROUPED
    if spec.linked:
        flags += FLAG_LINKED
    if spec.traced:
        flags += FLAG_TRACED
    if spec.debounced:
        flags += FLAG_DEBOUNCED
    if spec.window_ms is not None:
        flags += FLAG_WINDOW
    if spec.held:
        flags += FLAG_HELD
    data = encode_record(
        spec.task,
        spec.args,
        spec.kwargs,
        spec.key,
        spec.max_retries,
        flags,
        spec.priority,
        spec.expires_ms,
        spec.window_ms,
    )
    lean = spec.key is None and not spec.priority and _NOT_PLAIN.isdisjoint(flags)
    return Encoded(
        data,
        flags,
        flags if spec.key is None else f"{flags}={spec.key}",
        lean and FLAG_TOMBSTONE not in flags,
        lean and not spec.outbox and not spec.relayed,
    )


@dataclass(frozen=True)
class Fields:
    """What a record says: the call, and the policy decided when the job was scheduled."""

    task: str
    args: list
    kwargs: dict
    key: str | None = None
    max_retries: int | None = None  # None only for records of 0.1 (the setting applies)
    flags: str = ""  # without 'k' and 'x' (neither concerns a script)
    priority: int = 0
    expires_at: int | None = None  # epoch ms (flag 'x'), None: never expires
    window_ms: int | None = None  # unique_for= in ms (flag 'w', which flags keeps: acks.lua)

    @property
    def info(self) -> str:
        """The record's flags and unique key as ack.lua takes them."""
        return self.flags if self.key is None else f"{self.flags}={self.key}"


EMPTY = Fields("", [], {})
_HEADER = re.compile(rb"(\d{1,9})([a-z]*)")


def traced(record: bytes) -> bool:
    """Whether a trace context is stored beside the record (flag 't')."""
    match = _HEADER.match(record)
    return match is not None and b"t" in match.group(2)


def record_flags(record: bytes) -> bytes:
    """The flags of a record's header as stored (b'' for a record without a header)."""
    match = _HEADER.match(record)
    return b"" if match is None else match.group(2)


def undecided(record: bytes) -> bool:
    """Whether the record's header leaves max_retries to the worker (flag 'u')."""
    match = _HEADER.match(record)
    return match is not None and b"u" in match.group(2)


def settle_record(record: bytes, max_retries: int) -> bytes:
    """The record with ``max_retries`` decided (flag 'u' dropped), as settle.lua writes it."""
    match = _HEADER.match(record)
    if match is None:
        return record
    flags = match.group(2).replace(b"u", b"")
    return b"%d%s%s" % (max_retries, flags, record[match.end() :])


def split_record(raw: bytes) -> tuple[bytes | None, bytes] | None:
    """A format-3 record's unique key and its body (the task name, then the argument texts
    as stored, a line each), without decoding JSON (the admin's search reads thousands);
    None for a record of 0.1 or a damaged header."""
    match = _HEADER.match(raw)
    if match is None:
        return None
    pos, key = match.end(), None
    try:
        if raw[pos : pos + 1] == b"=":
            colon = raw.index(b":", pos)
            length = int(raw[pos + 1 : colon])
            key, pos = raw[colon + 1 : colon + 1 + length], colon + 1 + length
        if raw[pos : pos + 1] == b"^":
            pos = raw.index(b"\n", pos)
    except ValueError:
        return None
    return (key, raw[pos + 1 :]) if raw[pos : pos + 1] == b"\n" else None


def decode_record(raw: bytes | str) -> Fields:
    """Decode a record (format 3, or 0.1's formats 1 and 2); raise CorruptJob."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    first = raw[:1]
    if first in (b"[", b"{"):
        return _decode_legacy(raw)
    match = _HEADER.match(raw)
    if match is None:
        raise CorruptJob(f"job record has no header (newer format, or damaged): {raw[:80]!r}")
    max_retries, flags = int(match.group(1)), match.group(2).decode()
    pos, key = match.end(), None
    try:
        if raw[pos : pos + 1] == b"=":
            colon = raw.index(b":", pos)
            length = int(raw[pos + 1 : colon])
            key = raw[colon + 1 : colon + 1 + length].decode()
            pos = colon + 1 + length
        priority = 0
        if raw[pos : pos + 1] == b"^":
            end = raw.index(b"\n", pos)
            priority = int(raw[pos + 1 : end])
            pos = end
        if raw[pos : pos + 1] != b"\n":
            raise ValueError("header does not end with a newline")
        task_end = raw.index(b"\n", pos + 1)
        task = raw[pos + 1 : task_end].decode()
        kwargs: Any = {}
        rest = task_end + 1
        if FLAG_KWARGS in flags:
            kwargs_end = raw.index(b"\n", rest)
            kwargs = json.loads(raw[rest:kwargs_end])
            rest = kwargs_end + 1
        expires = read_expiry(raw) if FLAG_EXPIRES in flags else None
        skip = EXPIRY_WIDTH if FLAG_EXPIRES in flags else 0  # the window: before the expiry
        window = read_expiry(raw, skip) if FLAG_WINDOW in flags else None
        args = json.loads(b"[" + raw[rest:] + b"]")
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSON errors too
        raise CorruptJob(f"job record cannot be decoded ({exc}): {raw[:80]!r}") from None
    if not task or not isinstance(kwargs, dict):
        raise CorruptJob(f"job record has malformed fields: {raw[:80]!r}")
    flags = flags.replace(FLAG_KWARGS, "").replace(FLAG_EXPIRES, "")
    return Fields(task, args, kwargs, key, max_retries, flags, priority, expires, window)


def _decode_legacy(raw: bytes) -> Fields:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CorruptJob(f"job record is not valid JSON ({exc}): {raw[:80]!r}") from None
    if type(record) is list and record and type(record[0]) is str:  # format 2, short head
        return Fields(record[0], record[1:], {})
    if type(record) is list and record and type(record[0]) is dict:  # format 2, object head
        head, args = record[0], record[1:]
    elif type(record) is dict:  # format 1
        head, args = record, record.get("a", [])
    else:
        raise CorruptJob(f"job record has no task name: {raw[:80]!r}")
    kwargs, max_retries, key = head.get("k", {}), head.get("r"), head.get("u")
    if (
        not isinstance(head.get("t"), str)
        or not isinstance(args, list)
        or not isinstance(kwargs, dict)
        or not (max_retries is None or type(max_retries) is int)
        or not (key is None or isinstance(key, str))
    ):
        raise CorruptJob(f"job record has malformed fields: {raw[:80]!r}")
    return Fields(head["t"], args, kwargs, key, max_retries)


def head_fields(raw: bytes) -> Fields:
    """The fields of a record cut after its task line (a finished job whose arguments were
    too large to keep: jobs/finished.py): the task and header, no arguments; raise
    CorruptJob."""
    match = _HEADER.match(raw)
    if match is None:
        raise CorruptJob(f"job record has no header (newer format, or damaged): {raw[:80]!r}")
    flags = match.group(2).replace(FLAG_KWARGS.encode(), b"")
    head = match.group(1) + flags + raw[match.end() :].rstrip(b"\n")
    return decode_record(head + b"\n")
