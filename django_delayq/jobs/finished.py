"""Finished jobs as kept in Redis, and the attempts of a job.

A job that succeeded, was cancelled or expired is kept a while (``DELAYQ["FINISHED_MAX_AGE"]`` and
``["FINISHED_MAX_COUNT"]``, storage/finished.py) as one entry written by the script that
ended it (lua/include/keeping.lua's ``keep_finished``)::

    succeeded 1764351234567\\n      its outcome and when it ended (epoch ms); then, each
                                   when it applies, the record's size when it was above
                                   64 KiB (only its header and task line are kept, no
                                   arguments) and "d<epoch ms>", the due time a cancelled
                                   job had
    57\\n<record>                   its record, framed ("<byte length>\\n<bytes>")
    52\\n2 1764351234560 6.250 1764351234555 w1
                                   the attempt that ended it, framed: number, start (epoch
                                   ms), duration (ms), due time (epoch ms, "-" when not
                                   known), worker ('' for a cancelled job)
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
EXPIRED = "expired"  # not started before its expiry (schedule(expires=...): lua/expire.lua)
FINISHED = (SUCCEEDED, CANCELLED, EXPIRED)


@dataclass(frozen=True)
class KeptEntry:
    """A kept entry, split (the record and errors still as bytes)."""

    outcome: str
    ended_at: float  # epoch seconds
    record: bytes
    last_attempt: dict[str, Any] | None
    errors: list[dict]
    cut: int | None = None  # the record's size when only its header and task were kept
    due: float | None = None  # epoch s: its last attempt's due time, or a cancelled job's


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
    """``"<attempt> <started ms> <duration ms> <due ms or -> <worker>"`` as a dict (times in
    epoch seconds, due None when not known); None for ''. ValueError when damaged."""
    if not text:
        return None
    attempt, started, duration, due, worker = text.split(" ", 4)
    return {
        "attempt": int(attempt),
        "started": int(started) / 1000,
        "duration": round(float(duration) / 1000, 6),
        "due": None if due == "-" else int(due) / 1000,
        "worker": worker,
    }


def _head(line: bytes) -> tuple[str, float, int | None, float | None]:
    """The first line: outcome, ended (epoch s), the cut record's size, due (epoch s)."""
    outcome, ended, *more = line.decode().split(" ")
    cut = due = None
    for field in more:
        if field.startswith("d"):
            due = int(field[1:]) / 1000
        else:
            cut = int(field)
    return outcome, int(ended) / 1000, cut, due


def parse_kept(raw: bytes | str | None) -> KeptEntry | None:
    """A kept entry, or None for a missing or damaged one."""
    if not raw:
        return None
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    try:
        newline = raw.index(b"\n")
        outcome, ended, cut, due = _head(raw[:newline])
        record, pos = _frame(raw, newline + 1)
        summary, pos = _frame(raw, pos)
        last = parse_summary(summary.decode("utf-8", "replace"))
        errors = parse_errors(raw[pos:])
        if due is None and last is not None:
            due = last["due"]
        return KeptEntry(outcome, ended, record, last, errors, cut, due)
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
