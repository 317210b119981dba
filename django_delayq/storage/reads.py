"""Read views of the storage layer: one job, pages of a set, counts, throughput, results.

A base of :class:`~django_delayq.storage.store.Store` (key names and sending come from
:class:`~.calls.Calls`), so the admin, ``get_job()`` and the django.tasks backend read through
the same transport as every write. Every read costs O(log N + page) whatever the size of a
queue, and every value read from Redis is parsed defensively: garbage written by someone else
shows as garbage, never as an exception.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django_delayq.exceptions import JobNotFound
from django_delayq.jobs.job import WAITING
from django_delayq.storage.calls import Calls
from django_delayq.storage.milliseconds import ms, seconds
from django_delayq.storage.ops import Op
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.replies import pairs as _pairs

STATUS_KINDS = ("pending", "running", "dead")
TOTALS = (
    "done",
    "failed",
    "retried",
    "dead",
    "recovered",
    "limited",
    "expired",
    "rescheduled",
)


@dataclass(frozen=True)
class RawJob:
    """A job as read from Redis, undecoded (job.job_from_raw decodes)."""

    id: str
    queue: str
    status: str | None  # pending | running | dead | None (a record in no set)
    score: float | None  # due_at, lease_until (negative: not started) or died_at, by status
    record: bytes | None
    state: bytes | None = None
    errors: bytes | None = None
    kept: bytes | None = None  # what is kept of it once finished (jobs/finished.py)
    waits_for: str | None = None  # status "waiting": the key's job it follows (unique_until)


def _bytes(value: Any) -> bytes | None:
    if value is None or value is False:
        return None
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _raw_job(queue: str, job_id: str, reply: Any, finished: bool = False) -> RawJob | None:
    """fetch.lua's reply read: the job, or None when nothing of it is stored (nor, with
    ``finished``, kept of it since it finished)."""
    record, state, errors, *scores = reply
    follows = scores.pop() if len(scores) > len(STATUS_KINDS) + 1 else None
    kept = scores.pop() if len(scores) > len(STATUS_KINDS) else None
    if not record and not state and not errors and not any(scores):
        if kept and finished:  # status None: job_from_raw reads the kept entry
            return RawJob(job_id, queue, None, None, None, kept=_bytes(kept))
        return None
    status, score = None, None
    for name, value in zip(STATUS_KINDS, scores, strict=True):
        if value:
            status, score = name, seconds(value)
            break
    waits_for = None
    if follows and status is None:  # a follower (unique_until="end"): "<leader>|<not before>"
        leader, _, after = _text(follows).rpartition("|")
        status, score, waits_for = WAITING, int(after) / 1000, leader
    return RawJob(
        job_id,
        queue,
        status,
        score,
        _bytes(record),
        _bytes(state),
        _bytes(errors),
        _bytes(kept),
        waits_for,
    )


def _queue_names(members: Any) -> list[str]:
    """The valid queue names among SMEMBERS' reply, sorted."""
    names = set()
    for member in members:
        try:
            text = member.decode() if isinstance(member, bytes) else member
            names.add(check_queue_name(text))
        except (UnicodeDecodeError, ValueError):
            continue
    return sorted(names)


def _status(status: str) -> str:
    if status not in STATUS_KINDS:
        raise ValueError(f"unknown job status {status!r}: use pending, running or dead")
    return status


class Reads(Calls):
    """The read-only half of the Store."""

    def fetch(self, queue: str, job_id: str, finished: bool = False) -> RawJob | None:
        """One job's record, state, errors and set, read atomically (fetch.lua); with
        ``finished``, also a job kept since it finished (status None, ``kept`` set)."""
        return self.call(self.fetch_op(queue, job_id, finished))

    def fetch_op(self, queue: str, job_id: str, finished: bool = False) -> Op:
        """:meth:`fetch` as an op (aget_job() sends it on the asyncio client)."""
        return self.op(
            "fetch", queue, (job_id,), lambda reply: _raw_job(queue, job_id, reply, finished)
        )

    def fetch_many(self, queue: str, status: str, ids_scores: Sequence[tuple]) -> list[RawJob]:
        if not ids_scores:
            return []
        ids = [_text(i) for i, _ in ids_scores]
        jobs, state, errors = (self.key(queue, k) for k in ("jobs", "state", "errors"))
        cmd = self.command
        records, states, errs = self._all(
            [cmd(b"HMGET", h, *ids, route=h) for h in (jobs, state, errors)]
        )
        return [
            RawJob(job_id, queue, status, seconds(score), _bytes(r), _bytes(s), _bytes(e))
            for (job_id, (_, score), r, s, e) in zip(
                ids, ids_scores, records, states, errs, strict=True
            )
        ]

    def _all(self, ops: list) -> list:
        results = self.run(ops, budget=2.0)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    def page(self, queue: str, status: str, offset: int, limit: int) -> list[RawJob]:
        """Jobs of one set in score order, straight from ZRANGE (O(log N + limit))."""
        return self.fetch_many(queue, status, self.ranks(queue, status, offset, limit))

    def ranks(self, queue: str, status: str, offset: int, limit: int) -> list[tuple[str, Any]]:
        """(id, score in epoch milliseconds) of one set's ranks [offset, offset + limit),
        in the order :meth:`page` reads them (ZRANGE by rank: O(log N + limit))."""
        key = self.key(queue, _status(status))
        if limit < 1 or offset < 0:
            return []  # ZRANGE 0 -1 would read the whole set
        if status == "pending":  # in claim order, across pending and ranked (control.py)
            pairs = self.control.pending_page(queue, offset, limit)
        else:
            read = self.command(
                b"ZRANGE", key, offset, offset + limit - 1, b"WITHSCORES", route=key
            )
            pairs = _pairs(self.call(read))
        return [(_text(job_id), score) for job_id, score in pairs]

    def records(self, queue: str, ids: Sequence[str]) -> list[bytes | None]:
        """The records of ``ids`` (None for a job gone): one HMGET of the jobs hash, without
        the state and errors :meth:`fetch_many` adds (the admin's search reads thousands)."""
        if not ids:
            return []
        jobs = self.key(queue, "jobs")
        return [_bytes(r) for r in self.call(self.command(b"HMGET", jobs, *ids, route=jobs))]

    def page_ids(self, queue: str, status: str, offset: int, limit: int) -> list[str]:
        """Ids only, in score order (ZRANGE by rank: O(log N + limit)); [] for limit < 1."""
        key = self.key(queue, _status(status))
        if limit < 1 or offset < 0:
            return []
        if status == "pending":
            return [_text(i) for i, _ in self.control.pending_page(queue, offset, limit)]
        read = self.command(b"ZRANGE", key, offset, offset + limit - 1, route=key)
        return [_text(i) for i in self.call(read)]

    def size(self, queue: str, status: str) -> int:
        """ZCARD of one set (O(1))."""
        key = self.key(queue, _status(status))
        if status == "pending":  # and the prioritised ones (control.py), and the parked ones
            ranked, parked = self.key(queue, "ranked"), self.key(queue, "parked")
            keys = (key, ranked, parked)
            sizes = self._all([self.command(b"ZCARD", k, route=k) for k in keys])
            return sum(int(s) for s in sizes)
        return int(self.call(self.command(b"ZCARD", key, route=key)))

    def counts(self, queue: str, now: float) -> dict[str, Any]:
        """Set sizes (``finished``: the kept finished jobs), the due-now backlog, jobs
        claimed but not started, the oldest due time, whether the queue is paused, the
        priorities of its prioritised pending jobs (control.Band, highest first) and how
        many due jobs wait for their group's slot (``parked``): O(log N) each, one round
        trip (and one per priority present, when some are)."""
        pending, running, dead = (self.key(queue, s) for s in STATUS_KINDS)
        ranked, paused = self.key(queue, "ranked"), self.key(queue, "control")
        parked, finished = self.key(queue, "parked"), self.key(queue, "finished")
        cmd = self.command
        sizes = self._all(
            [
                cmd(b"ZCARD", pending, route=pending),
                cmd(b"ZCOUNT", pending, b"-inf", round(now * 1000), route=pending),
                cmd(b"ZCARD", running, route=running),
                cmd(b"ZCOUNT", running, b"-inf", b"(0", route=running),
                cmd(b"ZCARD", dead, route=dead),
                cmd(b"ZRANGE", pending, 0, 0, b"WITHSCORES", route=pending),
                cmd(b"ZCARD", ranked, route=ranked),
                cmd(b"HGET", paused, b"paused", route=paused),
                cmd(b"ZCARD", parked, route=parked),
                cmd(b"ZCARD", finished, route=finished),
            ]
        )
        head = _pairs(sizes[5])
        counts = {
            "pending": int(sizes[0]),
            "due": int(sizes[1]),
            "running": int(sizes[2]),
            "waiting": int(sizes[3]),
            "dead": int(sizes[4]),
            "oldest_due_at": seconds(head[0][1]) if head else None,
            "paused": sizes[7] is not None,
            "priorities": [],
            # due jobs held back by their group's concurrency limit (lua/claim.lua): counted
            # in pending, not in due (as jobs a rate limit holds back, due later)
            "parked": int(sizes[8]),
            # succeeded and cancelled jobs kept a while (storage/finished.py)
            "finished": int(sizes[9]),
        }
        counts["pending"] += counts["parked"]
        if counts["parked"]:  # due jobs too: the lag is the oldest due job's wait
            parked_due = self.control.oldest_parked_due(queue)
            if parked_due is not None:
                counts["oldest_due_at"] = min(
                    t for t in (counts["oldest_due_at"], parked_due / 1000) if t is not None
                )
        if int(sizes[6]):  # prioritised pending jobs: counted band by band (control.py)
            extra = self.control.ranked_counts(queue, now)
            counts["pending"] += extra["pending"]
            counts["due"] += extra["due"]
            firsts = [t for t in (counts["oldest_due_at"], extra["oldest_due_at"]) if t is not None]
            counts["oldest_due_at"] = min(firsts) if firsts else None
            counts["priorities"] = extra["bands"]
        return counts

    def throughput(self, queue: str, now: float, minutes: int = 60) -> dict[str, list[int]]:
        """Jobs done ("d") and failed attempts ("f") per minute, oldest first; garbage in the
        stats hash is skipped."""
        stats = self.key(queue, "stats")
        raw = self.call(self.command(b"HGETALL", stats, route=stats))
        current = int(now // 60)
        series = {"d": [0] * minutes, "f": [0] * minutes}
        for field, value in _pairs(raw):
            kind = _text(field).split(":", 1)[0]
            try:
                minute, count = (int(x) for x in _text(value).split(":"))
            except ValueError:
                continue
            age = current - minute
            if kind in series and 0 <= age < minutes and 0 <= count < 2**53:
                series[kind][minutes - 1 - age] = count
        return series

    def totals(self, queue: str) -> dict[str, int]:
        """Counts since the queue began (the metrics' counters): jobs done, attempts failed,
        attempts retried, jobs dead-lettered, jobs recovered from lost workers, jobs
        expired (not started before their expiry: lua/expire.lua), jobs rescheduled
        (moved by lua/reschedule.lua: reschedule(), the admin's Postpone)."""
        stats = self.key(queue, "stats")
        raw = dict(_pairs(self.call(self.command(b"HGETALL", stats, route=stats))))
        totals = {}
        for name in TOTALS:
            try:
                totals[name] = int(raw.get(name.encode(), raw.get(name, 0)))
            except (TypeError, ValueError):
                totals[name] = 0  # garbage: counted from zero
        return totals

    def server_time(self) -> float:
        whole, micros = self.call(self.command(b"TIME"))
        return int(whole) + int(micros) / 1_000_000

    def queues(self) -> list[str]:
        """Every queue ever scheduled to, as Redis remembers them; invalid members skipped
        (every queue something names: health.iter_known_queues)."""
        return self.call(self.queues_op())

    def queues_op(self) -> Op:
        """:meth:`queues` as an op."""
        key = self.queues_key
        return Op((b"SMEMBERS", key), _queue_names, route=key.encode())

    def remember_queue_op(self, queue: str) -> Op:
        """SADD the queue to the registry of queues (sent beside every schedule on a cluster,
        so a lost registry heals with the next job; nothing here caches what Redis holds)."""
        return self.command(
            b"SADD", self.queues_key, check_queue_name(queue), route=self.queues_key
        )

    def find(self, job_id: str, queues: Iterable[str], finished: bool = False) -> RawJob | None:
        for queue in queues:
            raw = self.fetch(queue, job_id, finished)
            if raw is not None:
                return raw
        return None

    def require(self, queue: str, job_id: str) -> RawJob:
        raw = self.fetch(queue, job_id)
        if raw is None:
            raise JobNotFound(f"no job {job_id!r} in queue {queue!r}")
        return raw

    def id_for_key(self, queue: str, key: str) -> str | None:
        """The job id holding a unique key in a queue (HGET on the keys hash), or None."""
        keys = self.key(queue, "keys")
        found = self.call(self.command(b"HGET", keys, key, route=keys))
        return None if found is None else _text(found)

    def first_due(self, queue: str, key: str, job_id: str) -> float | None:
        """The first due time (epoch seconds) a debounce (schedule.lua's ARGV[14]) kept for
        ``job_id`` under its unique key, or None (none kept, or kept for another job)."""
        keys = self.key(queue, "keys")
        found = self.call(self.command(b"HGET", keys, "\0d" + key, route=keys))
        held_id, _, held_ms = ("" if found is None else _text(found)).rpartition("|")
        return int(held_ms) / 1000 if held_id == job_id and held_ms.isdigit() else None

    def relayed(self, queue: str, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` marked relayed: their outbox rows are leftovers of a relay whose
        DELETE has not committed, not pending jobs (the job is in Redis, or ran)."""
        return self.call(self.relayed_op(queue, ids)) if ids else set()

    def relayed_op(self, queue: str, ids: Sequence[str]) -> Op:
        """:meth:`relayed` as an op (``ids`` not empty)."""
        key = self.key(queue, "relayed")
        ids = list(ids)
        return Op(
            (b"ZMSCORE", key, *ids),
            lambda scores: {i for i, s in zip(ids, scores, strict=True) if s is not None},
            route=key.encode(),
        )

    def old_relayed(self, queue: str, before: float, limit: int) -> list[str]:
        """Up to ``limit`` ids whose relayed mark is older than ``before`` (epoch seconds)."""
        key = self.key(queue, "relayed")
        op = self.command(
            b"ZRANGEBYSCORE", key, b"-inf", b"(%d" % ms(before), b"LIMIT", 0, limit, route=key
        )
        return [i.decode() if isinstance(i, bytes) else i for i in self.call(op)]

    # -- django.tasks results (backends.py): one string per result, found by id -----------

    def save_result(self, result_id: str, result: bytes, ttl: float | None) -> None:
        """SET a result, replacing it whole; it expires after ``ttl`` seconds (None: never)."""
        self.call(self.result_op(result_id, result, ttl))

    def result_op(self, result_id: str, result: bytes, ttl: float | None) -> Any:
        key = self.result_key(result_id)
        expiry = () if ttl is None else (b"PX", max(int(ttl * 1000), 1))
        return self.command(b"SET", key, result, *expiry, route=key)

    def load_result(self, result_id: str) -> bytes | None:
        key = self.result_key(result_id)
        return _bytes(self.call(self.command(b"GET", key, route=key)))

    def read_timeout(self) -> float | None:
        """The socket read timeout of this client's connections, in seconds (None: none).

        redis-py 8 gives connections a 5 s default that ``connection_kwargs`` does not
        show: it is the default of the connection class's ``socket_timeout`` parameter.
        """
        pool = getattr(self.client, "connection_pool", None)
        if pool is None:  # RedisCluster: its nodes' pools are built from the same kwargs
            return None
        kwargs = getattr(pool, "connection_kwargs", {})
        for name in ("socket_timeout", "orig_socket_timeout"):
            if name in kwargs:
                return kwargs[name]
        for cls in getattr(pool, "connection_class", type(None)).__mro__:
            try:
                param = inspect.signature(cls.__init__).parameters.get("socket_timeout")
            except (TypeError, ValueError):
                continue
            if param is not None and param.default is not inspect.Parameter.empty:
                return param.default
        return None
