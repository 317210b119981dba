"""Finished jobs as kept in Redis, and the attempts of a job.

A job that succeeded or was cancelled is kept a while (``DELAYQ["FINISHED_MAX_AGE"]`` and
``["FINISHED_MAX_COUNT"]``, storage/finished.py) as one entry written by the script that
ended it (lua/_lib.lua's ``keep_finished``)::

    succeeded 1764351234567\\n      its outcome and when it ended (epoch ms); a third field,
                                   the record's size, when it was above 64 KiB: only its
                                   header and task line are kept (no arguments)
    57\\n<record>                   its record, framed ("<byte length>\\n<bytes>")
    38\\n2 1764351234560 6.250 w1    the attempt that ended it, framed: number, start (epoch
                                   ms), duration (ms), worker ('' for a cancelled job)
    <errors>                       the errors of its failed attempts, as the job held them

:func:`attempt_records` gives a job's attempts (any job: pending, running, dead or finished),
each with its worker, start, duration, error and the wait before the next one, read from its
errors (the worker writes ``duration`` and ``retry_in`` into each) and its last attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_delayq.jobs.state import parse_errors
from django_delayq.jobs.times import to_datetime

SUCCEEDED = "succeeded"
CANCELLED = "cancelled"
FINISHED = (SUCCEEDED, CANCELLED)


@dataclass(frozen=True)
class KeptEntry:
    """A kept entry, split (the record and errors still as bytes)."""

    outcome: str
    ended_at: float  # epoch seconds
    record: bytes
    last_attempt: dict[str, Any] | None
    errors: list[dict]
    cut: int | None = None  # the record's size when only its header and task were kept


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a job: ``error`` None for the attempt that succeeded; ``retry_in`` the
    seconds the job then waited before its next attempt (None: it was not retried, or not
    known: an error written before 0.7)."""

    number: int | None
    worker: str | None
    started_at: datetime | None
    duration: float | None  # seconds
    error: dict | None
    retry_in: float | None = None


def _frame(raw: bytes, pos: int) -> tuple[bytes, int]:
    newline = raw.index(b"\n", pos)
    length = int(raw[pos:newline])
    end = newline + 1 + length
    if length < 0 or end > len(raw):
        raise ValueError("frame runs past the entry")
    return raw[newline + 1 : end], end


def parse_summary(text: str) -> dict[str, Any] | None:
    """``"<attempt> <started ms> <duration ms> <worker>"`` as a dict; None for ''."""
    parts = text.split(" ", 3)
    if len(parts) < 3:
        return None
    return {
        "attempt": int(parts[0]),
        "started": int(parts[1]) / 1000,
        "duration": float(parts[2]) / 1000,
        "worker": parts[3] if len(parts) == 4 else "",
    }


def parse_kept(raw: bytes | str | None) -> KeptEntry | None:
    """A kept entry, or None for a missing or damaged one."""
    if not raw:
        return None
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    try:
        newline = raw.index(b"\n")
        outcome, ended, *cut = raw[:newline].decode().split(" ")
        record, pos = _frame(raw, newline + 1)
        summary, pos = _frame(raw, pos)
        last = parse_summary(summary.decode("utf-8", "replace"))
        size = int(cut[0]) if cut else None
        errors = parse_errors(raw[pos:])
        return KeptEntry(outcome, int(ended) / 1000, record, last, errors, size)
    except (ValueError, UnicodeDecodeError):
        return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def attempt_records(errors: list[dict], last_attempt: dict | None = None) -> list[AttemptRecord]:
    """The attempts a job's errors (and its successful last attempt, if any) tell of, in
    order."""
    records = []
    for error in errors:
        at, duration = _number(error.get("at")), _number(error.get("duration"))
        started = at - duration if at is not None and duration is not None else at
        number = error.get("attempt")
        records.append(
            AttemptRecord(
                number if isinstance(number, int) else None,
                str(error["worker"]) if error.get("worker") else None,
                to_datetime(started),
                duration,
                error,
                _number(error.get("retry_in")),
            )
        )
    if last_attempt is not None:
        records.append(
            AttemptRecord(
                last_attempt["attempt"],
                last_attempt["worker"] or None,
                to_datetime(last_attempt["started"]),
                last_attempt["duration"],
                None,
            )
        )
    return records
