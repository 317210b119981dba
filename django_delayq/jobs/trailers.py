"""Trailers of a job record: numbers a record carries at its very end as JSON whitespace.

A job scheduled with ``expires=`` (since 0.8) has flag ``x`` and its expiry (epoch ms,
absolute) at the very end of the record, in the last :data:`EXPIRY_WIDTH` bytes: the number
in base 4, most significant first, one of the JSON whitespace bytes ``' ' '\\t' '\\r'
'\\n'`` a digit (:func:`expiry_trailer`). JSON allows whitespace before the closing ``]``
that every reader puts around the argument text, so a reader that does not know flag ``x``
(0.7.0's workers, during a rolling deploy) decodes the same task and arguments and runs the
job, as it would have run it without an expiry (tests/test_expiry.py runs 0.7.0's decoder
on such a record). No script reads it: the worker decides from the record a claim returns
(worker/expiry.py). A record kept cut to its header and task line (a finished job above
64 KiB) has lost it: ``decode_record`` then reads no expiry.

A keyed job with ``unique_for=`` (since 0.8) has flag ``w`` and its window (ms) in a trailer
of the same form, before the expiry's if any; acks.lua reads it (lua/include/throttle.lua).
0.7.0 decodes the same call (whitespace) and its scripts ignore 'w': the job runs, no window.

:mod:`django_delayq.jobs.record` imports them (its readers and encoders use them).
"""

from __future__ import annotations

EXPIRY_WIDTH = 24  # base-4 digits: up to 2**48 ms, past the year 10000
_DIGITS = b" \t\r\n"  # JSON whitespace, digit values 0..3
_DIGIT_OF = {byte: value for value, byte in enumerate(_DIGITS)}


def expiry_trailer(expires_ms: int) -> bytes:
    """The last bytes of a record whose job expires at ``expires_ms`` (epoch ms): whitespace
    every JSON reader skips (see the module docstring)."""
    return bytes(_DIGITS[(expires_ms >> 2 * i) & 3] for i in range(EXPIRY_WIDTH - 1, -1, -1))


def read_expiry(record: bytes, skip: int = 0) -> int | None:
    """The expiry (epoch ms) at the end of a record with flag 'x'; None when its last bytes
    are not one (a kept record cut to its header). ``skip``: the trailers after it (bytes)."""
    end, value = len(record) - skip, 0
    if end < EXPIRY_WIDTH:
        return None
    for byte in record[end - EXPIRY_WIDTH : end]:
        digit = _DIGIT_OF.get(byte)
        if digit is None:
            return None
        value = value * 4 + digit
    return value
