"""Job ids: 26-character ULIDs, whose first 48 bits are the job's creation time.

A job's ``created_at`` is not stored anywhere: it is read back from its id
(:func:`id_timestamp`).
"""

from __future__ import annotations

import os
import threading
import time

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
