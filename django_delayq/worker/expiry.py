"""Expiry, decided where a job would start: the claimed jobs whose expiry (``schedule(...,
expires=...)``, record flag 'x') is at or before the claim's ``now`` (Redis's clock, the one
every worker shares) are never run; one round trip of lua/expire.lua ends them "expired".

What a plain job pays: a byte search in the first 24 bytes of its record (``b"x"`` among the
header's flags, then the header's regex only when found), no round trip and no Lua.

A job that expired is ended before any runner sees it (the claim's attempts are sifted
before they reach the holdings). When that round trip fails, the attempts are left
unheld: their lease lapses, recovery hands them back without counting an attempt (they
never started), and the next claim sifts them again. A retry is not judged when it is
scheduled: a failed attempt's retry whose due time falls after the expiry expires when it
is claimed.

Each job it ended is announced by ``job_expired`` (signals.py) once Redis answered, on the
dispatcher's thread: a receiver that raises is logged (``send_robust``) and changes
nothing, the job is expired by then. A job whose first round trip's reply was lost and
which the re-sent one finds gone (``GONE``: this very call ended it) is announced as well,
so a receiver may, rarely, hear of one job twice (another worker expired it after this
one's lease lapsed), never of an expired job not at all once Redis answered.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from django_delayq import signals
from django_delayq.jobs.finished import EXPIRED as EXPIRED_STATUS
from django_delayq.jobs.job import Job, decode_fields, make_job
from django_delayq.jobs.record import FLAG_LINKED, expires_of, record_flags
from django_delayq.jobs.times import to_datetime
from django_delayq.scheduling.registry import sender
from django_delayq.storage.expiry import EXPIRED, GONE, expire_op
from django_delayq.storage.finished import Keep

if TYPE_CHECKING:
    from django_delayq.storage.store import Store
    from django_delayq.worker.delivery import Results
    from django_delayq.worker.execution import Attempt

logger = logging.getLogger("django_delayq.worker")

# Bytes of a record its flags are within: max_retries has at most 9 digits, then at most
# the 8 flag letters (i e u g l t k x, x last).
_HEAD = 24


def sift(
    store: Store, results: Results, queue: str, attempts: list[Attempt], now: float, keep: Keep
) -> list[Attempt]:
    """The claimed ``attempts`` to run; those expired by ``now`` (the claim's, epoch s) are
    ended (expire.lua) and counted in the history, linked ones forwarded to their batch."""
    late = []
    now_ms = int(now * 1000)
    for a in attempts:
        if b"x" in a.record[:_HEAD]:
            expires = expires_of(a.record)
            if expires is not None and expires <= now_ms:
                late.append(a)
    if not late:
        return attempts
    entries = [(a.id, a.token, a.due) for a in late]
    reply = store.run([expire_op(store, queue, entries, keep=keep, now=now)])
    answers = reply[0]
    if isinstance(answers, Exception):
        logger.warning(
            "%d expired jobs of %s not ended yet (%s): not run; their leases lapse and the "
            "next claim ends them",
            len(late),
            queue,
            answers,
        )
    else:
        _ended(results, queue, late, answers)
        _announce(results, queue, late, answers, now)
    dropped = set(map(id, late))
    return [a for a in attempts if id(a) not in dropped]


def _ended(results: Results, queue: str, late: list[Attempt], answers: list[int]) -> None:
    linked = []
    expired = 0
    for a, answer in zip(late, answers, strict=True):
        if answer not in (EXPIRED, GONE):
            continue
        # GONE: this very call, re-sent after a lost reply (the job ended by the first),
        # counted as the first reply would have been (expire.lua tallied its stats then).
        expired += 1
        logger.info("job %s expired before it started: not run", a.id)
        if _linked(a.record):
            linked.append((queue, a.id))
    if expired and results.history is not None:
        results.history.add(queue, "e", expired)
    if linked:
        results.forward(linked)


def _linked(record: bytes) -> bool:
    return FLAG_LINKED.encode() in record_flags(record)


def _announce(
    results: Results, queue: str, late: list[Attempt], answers: list[int], now: float
) -> None:
    """``job_expired`` for each attempt this call ended (see the module)."""
    if not signals.job_expired.receivers:  # no Job to build
        return
    for a, answer in zip(late, answers, strict=True):
        if answer in (EXPIRED, GONE):
            job = expired_job(a, queue, results.default_max_retries, now)
            signals.send(signals.job_expired, sender(job.task), job=job)


def expired_job(attempt: Attempt, queue: str, default_max_retries: int, now: float) -> Job:
    """The finished Job an expired ``attempt`` became (its attempts: those made before)."""
    job = make_job(
        attempt.id,
        queue,
        EXPIRED_STATUS,
        decode_fields(attempt.record),
        default_max_retries,
        attempts=attempt.number - 1,
        score=attempt.due,
    )
    return replace(job, finished_at=to_datetime(now))
