"""What the scripts answer, parsed: the reply types the store returns and one parser per
script reply (store.py chooses which). Scores and times in replies are integer epoch
milliseconds; these return epoch seconds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def pairs(reply: Any) -> list[tuple[Any, Any]]:
    """Member/score (or field/value) pairs of a reply, RESP2 (flat) or RESP3 (nested, map)."""
    if isinstance(reply, dict):
        return list(reply.items())
    if reply and isinstance(reply[0], list):
        return [(a, b) for a, b in reply]
    return [(reply[i], reply[i + 1]) for i in range(0, len(reply) - 1, 2)]


def seconds_of(value: Any) -> float | None:
    """Milliseconds from a reply ('' or None: none) as seconds."""
    if value in (None, b"", "", False):
        return None
    return int(value) / 1000


@dataclass(frozen=True)
class Scheduled:
    outcome: str  # created | replaced | kept | done
    id: str
    due_at: float | None
    record: bytes | None  # the existing record when kept
    waits_for: str | None = None  # a follower stored (unique_until="end"): its leader's id


@dataclass(frozen=True)
class Claimed:
    id: str
    record: bytes
    attempt: int  # the number this attempt has once started
    due: float | None = None  # its due time (epoch s), when the claim had it at hand


@dataclass(frozen=True)
class Claim:
    now: float
    next_due: float | None
    jobs: list[Claimed]
    acked: list[int]  # per ack sent with the claim: 1 acked, 0 gone, -1 not ours
    resent: bool = False  # the reply of a re-send (the first send's reply was lost)
    # None of ranked, control, parked existed at the claim: claim_plain.lua may claim next
    plain: bool = False
    # claim_plain.lua found the queue using features: acks done, nothing leased or read
    features: bool = False


@dataclass(frozen=True)
class Recovered:
    id: str
    outcome: str  # refund | retry | dead
    attempts: int
    record: bytes | None
    lost_token: str | None
    error: dict | None  # the error this recovery recorded (None for a refund)


def scheduled(
    outcome: str,
    job_id: str,
    due_at: float | None,
    record: bytes | None = None,
    waits_for: str | None = None,
) -> Scheduled:
    """``Scheduled(...)`` without the frozen dataclass's ``__init__`` (it sets each field
    through ``object.__setattr__``: a schedule_many() chunk makes one a job). The same
    value: equal, hashed and shown alike (tests/test_schedule_plain.py)."""
    made = object.__new__(Scheduled)
    values = {"outcome": outcome, "id": job_id, "due_at": due_at, "record": record}
    values["waits_for"] = waits_for
    object.__setattr__(made, "__dict__", values)
    return made


def parse_schedule(reply: list) -> Scheduled:
    outcome, job_id, due, record, *follows = reply
    leader = text(follows[0]) if follows else None
    return Scheduled(text(outcome), text(job_id), seconds_of(due), record or None, leader)


def parse_schedule_plain(job_id: str, reply: Any) -> Scheduled:
    """schedule_plain.lua's reply for job ``job_id``: its due time (epoch ms), created (now
    or by an earlier send of the call), or 0: done (a re-send after the job finished). The
    script's reply before it was one integer, {outcome, id, due_at}, is read too (what
    ``engine_cost.py --baseline <ref>`` gets from an older ref's Lua)."""
    if isinstance(reply, list):
        outcome, _, due_ms = reply
        return scheduled(text(outcome), job_id, seconds_of(due_ms))
    due = int(reply)
    if due == 0:
        return scheduled("done", job_id, None)
    return scheduled("created", job_id, due / 1000)


def parse_many(reply: list, plan: list[tuple[str, str, int]]) -> list[Scheduled]:
    now = int(reply[0])
    stored = {int(reply[i]) - 1: seconds_of(reply[i + 1]) for i in range(1, len(reply), 2)}
    results = []
    add = results.append
    for i, (job_id, mode, value) in enumerate(plan):
        if i in stored:
            due = stored[i]
            add(scheduled("created" if due is not None else "done", job_id, due))
        else:  # what schedule_many.lua computed from its `now`
            due_ms = now + max(value, 0) if mode == "delay" else max(value, now)
            add(scheduled("created", job_id, due_ms / 1000))
    return results


def parse_claim(reply: list, resent: bool = False) -> Claim:
    """claim.lua's reply and claim_plain.lua's (the same shape; 'plain' after the jobs when
    the queue was plain, next_due 'features' from claim_plain.lua on a queue that is not)."""
    now, next_due, acked, flat = reply[:4]
    flags = [int(f) for f in acked]
    if next_due in (b"features", "features"):
        return Claim(int(now) / 1000, None, [], flags, resent, features=True)
    jobs = [
        Claimed(text(flat[i]), flat[i + 1], int(flat[i + 2]), seconds_of(flat[i + 3]))
        for i in range(0, len(flat), 4)
    ]
    plain = len(reply) > 4 and reply[4] in (b"plain", "plain")
    return Claim(int(now) / 1000, seconds_of(next_due), jobs, flags, resent, plain)


def parse_resent_claim(reply: list) -> Claim:
    """A claim re-sent after a lost reply: its acks' 0 (gone) may be the lost send's work."""
    return parse_claim(reply, resent=True)


def parse_ints(reply: list) -> list[int]:
    return [int(flag) for flag in reply]


def parse_flags(reply: list) -> list[bool]:
    return [int(flag) == 1 for flag in reply]


def parse_outcome(reply: list) -> tuple[str, float | None]:
    return text(reply[0]), seconds_of(reply[1])


def parse_recovered(reply: list) -> list[Recovered]:
    return [
        Recovered(
            text(reply[i]),
            text(reply[i + 1]),
            int(reply[i + 2]),
            reply[i + 3] or None,
            text(reply[i + 4]) if reply[i + 4] else None,
            _error(reply[i + 5]),
        )
        for i in range(0, len(reply), 6)
    ]


def _error(raw: Any) -> dict | None:
    if not raw:
        return None
    try:
        error = json.loads(raw)
    except ValueError:
        return {"type": "unknown", "message": text(raw)}
    return error if isinstance(error, dict) else {"message": str(error)}


def parse_cancel(reply: list) -> tuple[str, bytes] | None:
    return (text(reply[0]), reply[1]) if reply else None
