"""Job ids: 26-character ULIDs, whose first 48 bits are the job's creation time.

A job's ``created_at`` is not stored anywhere: it is read back from its id
(:func:`id_timestamp`). The random bits come from ``os.urandom``, read 400 ids ahead; a
forked child reads its own (and forgets its parent's last id).
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
# Random bits are read from os.urandom 4,000 bytes at a time (400 ids), not 10 bytes a
# call: a system call for each id was a twentieth of schedule()'s Python.
_RANDOM_BLOCK = 4000
_random = b""
_random_at = 0


def _reset_after_fork() -> None:
    """A forked child must not repeat its parent's random bits (nor continue its last id:
    both would make the same next id in the same millisecond)."""
    global _random, _random_at, _last_ms, _last_rand
    _random, _random_at, _last_ms, _last_rand = b"", 0, 0, 0


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_reset_after_fork)


def new_job_id(now_ms: int | None = None) -> str:
    """A 26-character ULID: creation time in ms, then 80 random bits.

    Ids from one process are strictly increasing (monotonic ULID), so two jobs
    created in the same millisecond still sort in creation order.
    """
    global _last_ms, _last_rand, _random, _random_at
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _id_lock:
        if ms <= _last_ms:
            ms = _last_ms
            rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            if _random_at >= len(_random):
                _random, _random_at = os.urandom(_RANDOM_BLOCK), 0
            rand = int.from_bytes(_random[_random_at : _random_at + 10], "big")
            _random_at += 10
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
