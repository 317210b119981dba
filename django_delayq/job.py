"""The Job value object, job ids, and the encoding of job records.

A job record is the JSON object stored (as the value of the queue's ``jobs`` hash)
for each job. It holds only what the producer decided and never changes while
the job lives, so Lua scripts never re-encode user data::

    {"t": "shop.tasks.cancel_order",   # task name (always)
     "a": [42],                         # positional arguments (omitted when empty)
     "k": {"reason": "unpaid"},         # keyword arguments (omitted when empty)
     "u": "order:42:autocancel",        # unique key (omitted when none)
     "r": 3,                            # max_retries (omitted: the MAX_RETRIES setting)
     "v": 2}                            # format version (omitted: version 1)

Mutable state (attempts, lease token, worker, errors) lives in a separate ``meta``
hash written by the scripts. ``created_at`` is not stored: job ids are ULIDs, whose
first 48 bits are the creation time in milliseconds. The queue is the key's, the
due time is the sorted-set score. Keeping the record small is what keeps a pending
job near 200 bytes of Redis memory.
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

RECORD_VERSION = 1

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


def id_timestamp(job_id: str) -> float | None:
    """Epoch seconds encoded in a job id, or None when it is not a ULID."""
    if len(job_id) != 26:
        return None
    value = 0
    try:
        for char in job_id[:10]:
            value = value * 32 + _CROCKFORD.index(char)
    except ValueError:
        return None
    return value / 1000


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
    record: dict[str, Any] = {"t": task}
    if args:
        record["a"] = args
    if kwargs:
        record["k"] = kwargs
    if key is not None:
        record["u"] = key
    if max_retries is not None:
        record["r"] = max_retries
    try:
        text = dumps(record)
        if _scalars(args) and _scalars(kwargs.values()) and all(type(k) is str for k in kwargs):
            ok = True  # nothing that could come back changed: skip the loads() check
        else:
            back = json.loads(text)
            ok = back.get("a", []) == args and back.get("k", {}) == kwargs
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
    """Decode a record into {task, args, kwargs, key, max_retries}; raise CorruptJob."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptJob(f"job record is not valid JSON ({exc}): {bytes(raw)[:80]!r}") from None
    if not isinstance(record, dict) or not isinstance(record.get("t"), str):
        raise CorruptJob(f"job record has no task name: {bytes(raw)[:80]!r}")
    version = record.get("v", 1)
    if version != RECORD_VERSION:
        raise CorruptJob(f"job record format {version!r} is newer than this django-delayq")
    args, kwargs = record.get("a", []), record.get("k", {})
    max_retries = record.get("r")
    if (
        not isinstance(args, list)
        or not isinstance(kwargs, dict)
        or not (max_retries is None or type(max_retries) is int)
    ):
        raise CorruptJob(f"job record has malformed fields: {bytes(raw)[:80]!r}")
    return {
        "task": record["t"],
        "args": args,
        "kwargs": kwargs,
        "key": record.get("u"),
        "max_retries": max_retries,
    }


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


def job_from_raw(raw: Any, default_max_retries: int, outcome: str | None = None) -> Job:
    """Build a Job from a store.RawJob. A corrupt record gives a Job whose task is ''."""
    meta = parse_meta(raw.meta)
    try:
        fields = decode_record(raw.record) if raw.record is not None else None
    except CorruptJob:
        fields = None
    fields = fields or {"task": "", "args": [], "kwargs": {}, "key": None, "max_retries": None}
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
