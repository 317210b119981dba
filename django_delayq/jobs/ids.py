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
# Two base-32 digits (10 bits) per lookup: 5 lookups write the time's 10 digits, 8 the
# random bits' 16.
_DIGIT_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
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
    return _time_digits(ms) + _random_digits(rand)


# The digits of the last millisecond an id was made in (ms, digits): ids of one
# millisecond share them.
_time_of = (-1, "")


def _time_digits(ms: int) -> str:
    """The first 10 digits of a ULID: ``ms``'s low 50 bits."""
    global _time_of
    known = _time_of
    if known[0] == ms:
        return known[1]
    p = _DIGIT_PAIRS
    digits = (
        p[(ms >> 40) & 1023] + p[(ms >> 30) & 1023] + p[(ms >> 20) & 1023]
        + p[(ms >> 10) & 1023] + p[ms & 1023]
    )  # fmt: skip
    _time_of = (ms, digits)
    return digits


def _random_digits(rand: int) -> str:
    """The last 16 digits of a ULID: the 80 random bits."""
    p = _DIGIT_PAIRS
    return (
        p[(rand >> 70) & 1023] + p[(rand >> 60) & 1023] + p[(rand >> 50) & 1023]
        + p[(rand >> 40) & 1023] + p[(rand >> 30) & 1023] + p[(rand >> 20) & 1023]
        + p[(rand >> 10) & 1023] + p[rand & 1023]
    )  # fmt: skip


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
