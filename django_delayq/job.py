"""The Job value object, job ids, and the encoding of what Redis holds for a job.

A job record is the bytes stored for a job in its queue's ``jobs`` hash. It holds what the
producer decided and never changes while the job waits (a unique-key replace swaps it
whole). Format 3 (since 0.2) is a header the Lua scripts read, then a body only Python reads::

    5ik=19:order:42:autocancel\\n    header: max_retries 5, flags i and k, the key (19 bytes)
    shop.tasks.cancel_order\\n       the task name
    {"reason":"unpaid"}\\n           keyword arguments (only with flag 'k')
    42,"x"                          the positional arguments: a JSON array without [ ]

The header is everything scripts need (``header()`` in ``lua/_lib.lua``), so they never
decode user data, whatever its size or nesting: ``max_retries`` (decided once, when the job is
scheduled), flags (``i``: keep a tombstone when it finishes, see ``store.py``; ``k``: has
keyword arguments; ``u``: max_retries undecided, see below) and the unique key.

A process that schedules a task by name without importing it (``CHECK_NAMES`` off) does not
know the task's ``max_retries``: it writes its ``MAX_RETRIES`` setting and flag ``u``, and
the worker that runs the job writes the task's own into the header (``settle_record``,
``lua/settle.lua``) as it starts it. A reader that does not know flag ``u`` (0.2.0) reads
the digits, as before; a new flag letter keeps the format at 3.

A record of 0.1 (a JSON array, format 2, or object, format 1) is still decoded here;
scripts treat it as having no unique key and the ``MAX_RETRIES`` setting.

The mutable state lives beside the record: ``state`` (``"<attempts>|<lease token>"``) and
``errors`` (each error framed as ``"<length>\\n<JSON>"``), written by the scripts.
``created_at`` is not stored: job ids are ULIDs, whose first 48 bits are the creation time.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .exceptions import CorruptJob, SerializationError

PENDING = "pending"
RUNNING = "running"
DEAD = "dead"
STATUSES = (PENDING, RUNNING, DEAD)

# Outcomes of schedule() with a unique key.
CREATED = "created"
REPLACED = "replaced"
KEPT = "kept"
DEFERRED = "deferred"  # on_commit=True inside a transaction: stored when it commits

# Where a pending job waits (Job.waits_in): in Redis, or as a row of the database outbox
# (outbox.py: on_commit jobs until relayed, jobs due beyond DELAYQ["HORIZON"]).
IN_REDIS = "redis"
IN_DATABASE = "database"

# A claimed job that no runner has started yet has the running score lease_until - RESERVED
# (seconds here; lua/_lib.lua holds the same span in milliseconds).
RESERVED = 10_000_000_000
FLAG_TOMBSTONE = "i"
FLAG_KWARGS = "k"
FLAG_UNDECIDED = "u"

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two base-32 digits (10 bits) per lookup: 13 lookups write a ULID.
_DIGIT_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_PAIR_SHIFTS = tuple(range(120, -1, -10))
_id_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def new_job_id(now_ms: int | None = None) -> str:
    """A 26-character ULID: creation time in ms, then 80 random bits.

    Ids from one process are strictly increasing (monotonic ULID), so two jobs
    created in the same millisecond still sort in creation order.
    """
    global _last_ms, _last_rand
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _id_lock:
        if ms <= _last_ms:
            ms = _last_ms
            rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_rand = ms, rand
    value = (ms << 80) | rand  # 128 bits, written as 26 digits of 5 bits (130 bits)
    return "".join([_DIGIT_PAIRS[(value >> shift) & 1023] for shift in _PAIR_SHIFTS])


# Crockford digits -> the digits int(..., 32) reads; every other ASCII character -> "!",
# which int() refuses (as it would refuse non-ASCII digits, which isascii() keeps out).
_TO_BASE32 = str.maketrans(
    {
        **{chr(i): "!" for i in range(128)},
        **{c: "0123456789abcdefghijklmnopqrstuv"[i] for i, c in enumerate(_CROCKFORD)},
    }
)


def id_timestamp(job_id: str) -> float | None:
    """Epoch seconds encoded in a job id, or None when it is not a ULID."""
    if len(job_id) != 26 or not job_id.isascii():
        return None
    try:
        return int(job_id[:10].translate(_TO_BASE32), 32) / 1000
    except ValueError:
        return None


def to_datetime(epoch: float | None) -> datetime | None:
    """An aware UTC datetime, or None for None and for what no datetime can hold (a
    garbage score read from Redis must not break a page)."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


# -- JSON arguments -----------------------------------------------------------


_HINT_TEXT = "decode bytes with errors='replace', or pass the data base64-encoded"


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _find_unserializable(value: Any, path: str) -> str | None:
    """Describe the first value under ``path`` that JSON would not return as is."""
    kind = type(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path} is {value!r}, which JSON cannot carry: pass a finite number or a string"
    if isinstance(value, str) and not _utf8(value):
        return f"{path} is a string with a lone surrogate, which UTF-8 cannot carry: {_HINT_TEXT}"
    if value is None or isinstance(value, (str, int, float)):
        return None  # subclasses (IntEnum, TextChoices) come back as their equal base value
    if kind is list:
        for index, item in enumerate(value):
            problem = _find_unserializable(item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if kind is dict:
        for key, item in value.items():
            if type(key) is str and not _utf8(key):
                return f"{path} has a key with a lone surrogate, which UTF-8 cannot carry"
            if type(key) is not str:
                return (
                    f"{path} has the key {key!r} ({type(key).__name__}); JSON object keys are "
                    "strings, so it would come back changed: use string keys"
                )
            problem = _find_unserializable(item, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    if kind is tuple:
        return f"{path} is a tuple, which JSON would return as a list: pass a list"
    hint = "pass a JSON type (str, int, float, bool, None, list, dict)"
    if isinstance(value, datetime):
        hint = "pass an ISO string (value.isoformat())"
    elif hasattr(value, "_meta") and hasattr(value, "pk"):
        hint = "pass its primary key and load it in the task"
    return f"{path} is a {kind.__module__}.{kind.__qualname__}, which JSON cannot carry: {hint}"


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# Scalars of these exact types come back from JSON equal (floats only when finite).
_SCALARS = frozenset({str, int, bool, type(None)})


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _scalars(values: Any) -> bool:
    for value in values:
        kind = type(value)
        if kind not in _SCALARS and not (kind is float and math.isfinite(value)):
            return False
    return True


def encode_record(
    task: str,
    args: list,
    kwargs: dict,
    key: str | None = None,
    max_retries: int = 0,
    flags: str = "",
) -> bytes:
    """Encode a job record (format 3), refusing arguments that would not come back equal.

    One ``dumps`` and one ``loads`` (both in C) decide, the ``loads`` only when an argument
    is not a plain str/int/bool/None/finite float; only when they disagree is the structure
    walked, to name the offending argument in the error.
    """
    try:
        args_text = _ENCODER.encode(args)
        kwargs_text = _ENCODER.encode(kwargs) if kwargs else ""
        if _scalars(args) and (
            not kwargs or (_scalars(kwargs.values()) and all(type(k) is str for k in kwargs))
        ):
            ok = True  # nothing that could come back changed: skip the loads() check
        else:
            ok = json.loads(args_text) == args and (not kwargs or json.loads(kwargs_text) == kwargs)
        body = (
            f"{task}\n{kwargs_text}\n{args_text[1:-1]}" if kwargs else f"{task}\n{args_text[1:-1]}"
        )
        data = body.encode()  # UnicodeEncodeError (a ValueError): a lone surrogate
    except (TypeError, ValueError, RecursionError):
        ok = False
    if not ok:
        try:
            problems = (
                *(_find_unserializable(v, f"argument {i}") for i, v in enumerate(args)),
                *(_find_unserializable(v, f"argument {n!r}") for n, v in kwargs.items()),
            )
        except RecursionError:
            problems = (f"the arguments of {task} are nested too deeply for JSON",)
        for problem in problems:
            if problem:
                raise SerializationError(f"{problem} (task {task})")
        raise SerializationError(f"the arguments of {task} do not round-trip through JSON")
    if kwargs:
        flags += FLAG_KWARGS
    head = f"{max_retries}{flags}".encode()
    if key is not None:
        raw_key = key.encode()
        head += b"=%d:%s" % (len(raw_key), raw_key)
    return head + b"\n" + data


@dataclass(frozen=True)
class Fields:
    """What a record says: the call, and the policy decided when the job was scheduled."""

    task: str
    args: list
    kwargs: dict
    key: str | None = None
    max_retries: int | None = None  # None only for records of 0.1 (the setting applies)
    flags: str = ""

    @property
    def info(self) -> str:
        """The record's flags and unique key as ack.lua takes them."""
        return self.flags if self.key is None else f"{self.flags}={self.key}"


EMPTY = Fields("", [], {})
_HEADER = re.compile(rb"(\d{1,9})([a-z]*)")


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
        args = json.loads(b"[" + raw[rest:] + b"]")
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSON errors too
        raise CorruptJob(f"job record cannot be decoded ({exc}): {raw[:80]!r}") from None
    if not task or not isinstance(kwargs, dict):
        raise CorruptJob(f"job record has malformed fields: {raw[:80]!r}")
    flags = flags.replace(FLAG_KWARGS, "")
    return Fields(task, args, kwargs, key, max_retries, flags)


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


def parse_state(raw: bytes | str | None) -> tuple[int, str | None]:
    """``"<attempts>|<token>"`` (or ``|~<token>`` once the attempt is settled) ->
    (attempts, token or None); garbage reads as (0, None)."""
    if not raw:
        return 0, None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    count, bar, token = raw.partition("|")
    if not bar or not count.isdigit() or len(count) > 9:
        return 0, None
    return int(count), token.removeprefix("~") or None


def parse_errors(raw: bytes | str | None) -> list[dict]:
    """The framed error list (``"<length>\\n<JSON>"`` each) as dicts; damage is skipped."""
    if not raw:
        return []
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    errors, pos = [], 0
    while pos < len(raw):
        newline = raw.find(b"\n", pos)
        try:
            length = int(raw[pos:newline]) if newline > pos else -1
        except ValueError:
            break
        if length < 0:
            break
        chunk = raw[newline + 1 : newline + 1 + length]
        pos = newline + 1 + length
        try:
            error = json.loads(chunk)
        except ValueError:
            error = {"type": "unknown", "message": chunk.decode("utf-8", "replace")}
        errors.append(error if isinstance(error, dict) else {"message": str(error)})
    return errors


def frame_error(error: dict) -> bytes:
    """One error as fail.lua appends it (what parse_errors reads)."""
    data = json.dumps(error, ensure_ascii=False, default=str).encode()
    return b"%d\n%s" % (len(data), data)


# What a worker name may not hold as is in its instance name, which starts every lease token
# (``<instance>#<counter>``, kept in the state hash as ``<n>|<token>`` or ``<n>|~<token>``)
# and names its fields of the claims hash (``<instance>`` and ``<instance>/r``, whose values
# are ``<token>\n<ids>``): '%' (the escape), '~' (a settled attempt; also the separator of
# the name and the instance's random suffix), '|', '#', '/', braces (a cluster hash tag in a
# roster key), whitespace and every other character that is not printable.
_NAME_RESERVED = frozenset("%~|#/{}")


def encode_instance_name(name: str) -> str:
    """``name`` with its reserved characters percent-encoded (their UTF-8 bytes, as in URLs),
    so that any name a worker is given ("~x", "a|b", "w/r") starts an instance name and lease
    tokens the scripts read back unchanged; distinct names stay distinct. Plain names
    ("web-1:4242", "café") are left as they are. ValueError when UTF-8 cannot carry the name
    (a lone surrogate)."""
    if type(name) is not str or not name:
        raise ValueError(f"worker name {name!r} is not a name: pass a non-empty str")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise ValueError(
            f"worker name {name!r} holds characters UTF-8 cannot carry (a lone surrogate, "
            "from bytes the terminal could not decode): pass a name of printable text"
        ) from None
    return "".join(
        "".join(f"%{b:02X}" for b in c.encode())
        if c in _NAME_RESERVED or c.isspace() or not c.isprintable()
        else c
        for c in name
    )


def worker_of(token: str | None) -> str | None:
    """The worker instance named in a lease token (``<instance>#<counter>``)."""
    if not token:
        return None
    return token.rpartition("#")[0] or token


def last_error_of(errors: list[dict]) -> str | None:
    if not errors:
        return None
    last = errors[-1]
    kind, message = str(last.get("type") or ""), str(last.get("message") or "")
    return f"{kind}: {message}" if kind else message


@dataclass(frozen=True)
class Job:
    """A job as stored in Redis at the moment it was read.

    ``status`` is ``"pending"``, ``"running"`` or ``"dead"``. A job that finished
    successfully (or was cancelled) no longer exists: ``get_job`` returns None.
    ``outcome`` is set only on the Job returned by ``schedule()``: ``"created"``,
    ``"replaced"`` or ``"kept"`` (unique keys), or ``"deferred"`` (on_commit inside a
    transaction: its row is in the transaction, Redis gets it after the commit).
    ``attempts`` counts the attempts made, the one running included. ``waits_in`` is
    ``"redis"``, or ``"database"`` for a pending job that waits in the outbox table.
    """

    id: str
    task: str
    args: list
    kwargs: dict
    queue: str
    status: str
    due_at: datetime | None = None
    attempts: int = 0
    max_retries: int = 0
    last_error: str | None = None
    key: str | None = None
    created_at: datetime | None = None
    errors: list[dict] = field(default_factory=list, repr=False)
    lease_until: datetime | None = None
    worker: str | None = None
    died_at: datetime | None = None
    outcome: str | None = None
    waits_in: str = IN_REDIS

    @property
    def will_retry(self) -> bool:
        """Whether a failure of the current attempt would be retried."""
        return self.attempts <= self.max_retries


def make_job(
    job_id: str,
    queue: str,
    status: str,
    fields: Fields,
    default_max_retries: int,
    *,
    attempts: int = 0,
    score: float | None = None,
    errors: list[dict] | None = None,
    worker: str | None = None,
    outcome: str | None = None,
    waits_in: str = IN_REDIS,
) -> Job:
    """The one place a Job is assembled (API, worker, recovery, admin, backend)."""
    when = to_datetime(score)
    errors = errors or []
    return Job(
        id=job_id,
        task=fields.task,
        args=fields.args,
        kwargs=fields.kwargs,
        queue=queue,
        status=status,
        due_at=when if status == PENDING else None,
        attempts=attempts,
        max_retries=default_max_retries if fields.max_retries is None else fields.max_retries,
        last_error=last_error_of(errors),
        key=fields.key,
        created_at=to_datetime(id_timestamp(job_id)),
        errors=errors,
        lease_until=when if status == RUNNING else None,
        worker=worker if status == RUNNING else None,
        died_at=when if status == DEAD else None,
        outcome=outcome,
        waits_in=waits_in,
    )


def decode_fields(record: bytes | None) -> Fields:
    """A record's fields, or EMPTY (task '') when it is missing or corrupt."""
    if record is None:
        return EMPTY
    try:
        return decode_record(record)
    except CorruptJob:
        return EMPTY


def job_from_raw(raw: Any, default_max_retries: int, outcome: str | None = None) -> Job:
    """A Job from a store.RawJob (what the reads return). A corrupt record gives task ''."""
    attempts, token = parse_state(raw.state)
    score = raw.score
    if raw.status == RUNNING and score is not None:
        if score >= 0:
            attempts += 1  # the attempt in progress
        else:
            score += RESERVED  # claimed, not started yet: the lease still runs
    return make_job(
        raw.id,
        raw.queue,
        raw.status or "orphaned",
        decode_fields(raw.record),
        default_max_retries,
        attempts=attempts,
        score=score,
        errors=parse_errors(raw.errors),
        worker=worker_of(token),
        outcome=outcome,
    )
