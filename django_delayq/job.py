"""The Job value object, job ids, and the encoding of job records.

A job record is the JSON text stored (as the value of the queue's ``jobs`` hash)
for each job. It holds only what the producer decided and never changes while
the job lives, so Lua scripts never re-encode user data.

Format 2 (written since 0.2) is a JSON array: a head, then the positional arguments::

    ["shop.tasks.cancel_order", 42]                  # the head is the task name, or
    [{"t": "shop.tasks.cancel_order",                # an object when there is more:
      "k": {"reason": "unpaid"},                     #   keyword arguments (omitted if none)
      "u": "order:42:autocancel",                    #   unique key (omitted if none)
      "r": 3},                                       #   max_retries (omitted: the setting)
     42]

A later format will carry ``"v": <version>`` in an object head; a version this code
does not know is refused (the job is dead-lettered, not guessed at).

Format 1 (0.1) is a JSON object and is still decoded::

    {"t": "shop.tasks.cancel_order", "a": [42], "k": {...}, "u": "...", "r": 3}

Mutable state (attempts, lease token, worker, errors) lives in a separate ``meta``
hash written by the scripts. ``created_at`` is not stored: job ids are ULIDs, whose
first 48 bits are the creation time in milliseconds. The queue is the key's, the
due time is the sorted-set score. The record's size decides the Redis memory of a
pending job: the array form saves the ``{"t":`` and ``,"a":`` keys (8 bytes), which
for a short task name and payload is the difference between allocation classes.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .exceptions import CorruptJob, SerializationError

RECORD_VERSION = 2  # written; 1 and 2 are decoded

PENDING = "pending"
RUNNING = "running"
DEAD = "dead"
STATUSES = (PENDING, RUNNING, DEAD)

# Outcomes of schedule() with a unique key.
CREATED = "created"
REPLACED = "replaced"
KEPT = "kept"
DEFERRED = "deferred"  # on_commit=True inside a transaction: stored when it commits

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
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


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


def _scalars(values: Iterable[Any]) -> bool:
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
    max_retries: int | None = None,
) -> bytes:
    """Encode a job record, refusing arguments that would not come back equal.

    One ``dumps`` and one ``loads`` (both in C) decide, the ``loads`` only when an
    argument is not a plain str/int/bool/None/finite float; only when they disagree
    is the structure walked, to name the offending argument in the error.
    """
    head: str | dict[str, Any] = task
    if kwargs or key is not None or max_retries is not None:
        head = {"t": task}
        if kwargs:
            head["k"] = kwargs
        if key is not None:
            head["u"] = key
        if max_retries is not None:
            head["r"] = max_retries
    try:
        text = _ENCODER.encode([head, *args])
        if _scalars(args) and (
            not kwargs or (_scalars(kwargs.values()) and all(type(k) is str for k in kwargs))
        ):
            ok = True  # nothing that could come back changed: skip the loads() check
        else:
            back = json.loads(text)
            ok = back[1:] == args and (back[0].get("k", {}) if kwargs else {}) == kwargs
        data = text.encode()  # UnicodeEncodeError (a ValueError): a lone surrogate
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
    return data


def decode_record(raw: bytes | str) -> dict[str, Any]:
    """Decode a record (format 1 or 2) into {task, args, kwargs, key, max_retries};
    raise CorruptJob."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptJob(f"job record is not valid JSON ({exc}): {_head(raw)!r}") from None
    if type(record) is list and record and type(record[0]) is str:  # format 2, short head
        return {
            "task": record[0],
            "args": record[1:],
            "kwargs": {},
            "key": None,
            "max_retries": None,
        }
    if type(record) is list and record and type(record[0]) is dict:  # format 2, object head
        head, args, version = record[0], record[1:], record[0].get("v", 2)
    elif type(record) is dict:  # format 1
        head, args, version = record, record.get("a", []), record.get("v", 1)
    else:
        raise CorruptJob(f"job record has no task name: {_head(raw)!r}")
    if version not in (1, 2) or (version == 1) != (head is record):
        raise CorruptJob(f"job record format {version!r} is newer than this django-delayq")
    if not isinstance(head.get("t"), str):
        raise CorruptJob(f"job record has no task name: {_head(raw)!r}")
    kwargs = head.get("k", {})
    max_retries = head.get("r")
    if (
        not isinstance(args, list)
        or not isinstance(kwargs, dict)
        or not (max_retries is None or type(max_retries) is int)
    ):
        raise CorruptJob(f"job record has malformed fields: {_head(raw)!r}")
    return {
        "task": head["t"],
        "args": args,
        "kwargs": kwargs,
        "key": head.get("u"),
        "max_retries": max_retries,
    }


def _head(raw: bytes | str) -> bytes:
    return (raw.encode("utf-8", "replace") if isinstance(raw, str) else bytes(raw))[:80]


@dataclass(frozen=True)
class Job:
    """A job as stored in Redis at the moment it was read.

    ``status`` is ``"pending"``, ``"running"`` or ``"dead"``. A job that finished
    successfully (or was cancelled) no longer exists: ``get_job`` returns None.
    ``outcome`` is set only on the Job returned by ``schedule()``: ``"created"``,
    ``"replaced"`` or ``"kept"`` (unique keys), or ``"deferred"`` (on_commit).
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

    @property
    def will_retry(self) -> bool:
        """Whether a failure of the current attempt would be retried."""
        return self.attempts <= self.max_retries


def parse_meta(raw: bytes | str | None) -> dict[str, Any]:
    """The per-job state written by the scripts: n (attempts), t (token), w, s, e."""
    if not raw:
        return {}
    try:
        meta = json.loads(raw)
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


def last_error_of(meta: dict[str, Any]) -> str | None:
    errors = meta.get("e") or []
    if not errors or not isinstance(errors, list):
        return None
    last = errors[-1]
    if not isinstance(last, dict):
        return str(last)
    kind, message = last.get("type") or "", last.get("message") or ""
    return f"{kind}: {message}" if kind else message


def empty_fields() -> dict[str, Any]:
    """The decoded fields of a job whose record is missing or corrupt (a fresh dict)."""
    return {"task": "", "args": [], "kwargs": {}, "key": None, "max_retries": None}


def job_from_raw(raw: Any, default_max_retries: int, outcome: str | None = None) -> Job:
    """Build a Job from a store.RawJob. A corrupt record gives a Job whose task is ''."""
    meta = parse_meta(raw.meta)
    try:
        fields = decode_record(raw.record) if raw.record is not None else None
    except CorruptJob:
        fields = None
    fields = fields or empty_fields()
    max_retries = fields["max_retries"]
    score = to_datetime(raw.score)
    errors = meta.get("e") if isinstance(meta.get("e"), list) else []
    return Job(
        id=raw.id,
        task=fields["task"],
        args=fields["args"],
        kwargs=fields["kwargs"],
        queue=raw.queue,
        status=raw.status or "orphaned",
        due_at=score if raw.status == PENDING else None,
        attempts=int(meta.get("n") or 0),
        max_retries=default_max_retries if max_retries is None else max_retries,
        last_error=last_error_of(meta),
        key=fields["key"],
        created_at=to_datetime(id_timestamp(raw.id)),
        errors=errors,
        lease_until=score if raw.status == RUNNING else None,
        worker=meta.get("w") if raw.status == RUNNING else None,
        died_at=score if raw.status == DEAD else None,
        outcome=outcome,
    )
