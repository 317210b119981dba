"""The roster of live workers in Redis: what the admin's Workers tab, ``delayq_status`` and
the metrics read, and what each worker's presence thread (presence.py) writes.

A Store's ``store.roster`` (:class:`Roster`); :mod:`.keys` names the keys (outside
every queue's hash slot; on a cluster each command goes to the node of its own key):

- ``{prefix}:worker:<instance>``: one string per worker, its description as JSON, written
  whole with ``SET ... PX <ttl>`` at every presence beat. It disappears on its own ``ttl``
  after the worker's last beat (a worker SIGKILLed, frozen or cut off), and is deleted when
  the worker stops. One command: there is never a description without an expiry.
- ``{prefix}:workers``: a sorted set of instances scored by their last beat (epoch ms, the
  worker's clock), so readers find the descriptions without SCAN. Readers drop the members
  whose description is gone.

A worker is live while its description exists. Readers tell the age of its last beat from
the key's remaining time to live (``PTTL``), on Redis's clock, so the clocks of workers and
readers need not agree; the times a worker reports (since it started, since each of its jobs
started) are durations, placed on Redis's clock the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.exceptions import DelayQError
from django_delayq.storage.calls import Calls
from django_delayq.storage.ops import Op

logger = logging.getLogger("django_delayq.roster")

FORMAT = 1
# Members read per look at the roster (the most recently beating first).
MAX_LISTED = 1000
# A member whose score is older than this (seconds) is dropped unread: its description
# expired long ago (a margin far beyond any clock difference between workers and readers).
FORGET_AFTER = 24 * 60 * 60


@dataclass(frozen=True)
class RunningJob:
    """A job a live worker was running at its last beat."""

    queue: str
    id: str
    task: str
    since: float | None  # epoch seconds (Redis clock) when the attempt started


@dataclass(frozen=True)
class LiveWorker:
    """One live worker as its last beat described it; times are epoch seconds on Redis's
    clock (None when the description did not say)."""

    instance: str
    name: str
    host: str
    pid: int | None
    queues: tuple[str, ...]
    concurrency: int | None
    version: str
    started: float | None
    beat: float  # when the description was written
    every: float | None  # seconds between two beats
    running: tuple[RunningJob, ...]
    done: int  # jobs done since it started
    failed: int  # failed attempts since it started
    stopping: bool  # finishing its running jobs before it exits
    burst: bool
    supervisor: int | None = None  # pid of its supervisor (delayq_worker --processes)


def encode_description(
    *,
    name: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
    version: str,
    uptime: float,
    every: float,
    ttl: float,
    running: Sequence[tuple[str, str, str, float]],
    done: int,
    failed: int,
    stopping: bool,
    burst: bool,
    supervisor: int | None = None,
) -> bytes:
    """A worker's description: ``running`` holds (queue, job id, task, seconds running);
    ``supervisor``: the pid of the supervisor that started it (on the same host), if any."""
    return json.dumps(
        {
            "v": FORMAT,
            "name": name,
            "host": host,
            "pid": pid,
            "queues": list(queues),
            "concurrency": concurrency,
            "version": version,
            "uptime": round(uptime, 3),
            "every": round(every, 3),
            "ttl": round(ttl * 1000),
            "running": [[q, i, t, round(s, 3)] for q, i, t, s in running],
            "done": done,
            "failed": failed,
            "stopping": stopping,
            "burst": burst,
            **({"supervisor": supervisor} if supervisor is not None else {}),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def _number(value: Any, kind: type = float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return kind(value)
    except (OverflowError, ValueError):
        return None


def _decode_running(raw: Any, beat: float) -> tuple[RunningJob, ...]:
    jobs = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, list) or len(entry) < 2:
            continue
        queue, job_id = str(entry[0]), str(entry[1])
        task = str(entry[2]) if len(entry) > 2 and entry[2] is not None else ""
        seconds = _number(entry[3]) if len(entry) > 3 else None
        jobs.append(RunningJob(queue, job_id, task, None if seconds is None else beat - seconds))
    return tuple(jobs)


def decode_description(instance: str, raw: bytes, pttl: int, now: float) -> LiveWorker:
    """A description read from Redis, placed on Redis's clock (``now``) by the key's
    remaining time to live. Garbage shows as a worker without details, never an exception."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # garbage: not JSON, not UTF-8, nested too deep
        data = None
    if not isinstance(data, dict):
        data = {}
    ttl = _number(data.get("ttl"), int)
    age = (ttl - pttl) / 1000 if ttl is not None and 0 <= pttl <= ttl else 0.0
    beat = now - age
    uptime = _number(data.get("uptime"))
    queues = data.get("queues")
    return LiveWorker(
        instance=instance,
        name=str(data.get("name") or unquote(instance.rsplit("~", 1)[0])),
        host=str(data.get("host") or ""),
        pid=_number(data.get("pid"), int),
        queues=tuple(str(q) for q in queues) if isinstance(queues, list) else (),
        concurrency=_number(data.get("concurrency"), int),
        version=str(data.get("version") or ""),
        started=None if uptime is None else beat - uptime,
        beat=beat,
        every=_number(data.get("every")),
        running=_decode_running(data.get("running"), beat),
        done=_number(data.get("done"), int) or 0,
        failed=_number(data.get("failed"), int) or 0,
        stopping=data.get("stopping") is True,
        burst=data.get("burst") is True,
        supervisor=_number(data.get("supervisor"), int),
    )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Roster:
    """The live workers of a Store (``store.roster``): what a worker's beat writes and what
    the readers list, built and sent through the Store."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def beat_ops(self, instance: str, description: bytes, ttl: float, at: float) -> list[Op]:
        """Write a worker's description (expiring ``ttl`` seconds from now) and list it,
        scored ``at`` (epoch seconds, the worker's clock). Both may be re-sent."""
        key, roster = self._store.worker_key(instance), self._store.workers_key
        return [
            self._store.command(
                b"SET", key, description, b"PX", max(round(ttl * 1000), 1), route=key
            ),
            self._store.command(b"ZADD", roster, round(at * 1000), instance, route=roster),
        ]

    def gone_ops(self, instance: str) -> list[Op]:
        """Take a stopping worker off the roster."""
        key, roster = self._store.worker_key(instance), self._store.workers_key
        return [
            self._store.command(b"DEL", key, route=key),
            self._store.command(b"ZREM", roster, instance, route=roster),
        ]

    def live(self, now: float, unreadable: list[str] | None = None) -> list[LiveWorker]:
        """Every live worker (at most MAX_LISTED, the most recently beating first), sorted
        by name; ``now`` is Redis's time. Members whose description is gone are dropped.
        A key Redis refuses to read (of another type, written by hand or by another program:
        a worker's entry, or the roster itself) is skipped, logged once per process, and
        appended to ``unreadable`` when a list is given; it is left in place for the
        operator. Raises DelayQError when Redis cannot be reached."""
        roster = self._store.workers_key
        try:
            listed = self._store.call(
                self._store.command(b"ZREVRANGE", roster, 0, MAX_LISTED - 1, route=roster)
            )
        except DelayQConnectionError:
            raise
        except DelayQError as exc:
            _report_unreadable(roster, exc)
            if unreadable is not None:
                unreadable.append(roster)
            return []
        members = [_text(m) for m in listed]
        ops = []
        for instance in members:
            key = self._store.worker_key(instance)
            ops += [
                self._store.command(b"GET", key, route=key),
                self._store.command(b"PTTL", key, route=key),
            ]
        replies = self._store.run(ops, budget=2.0) if ops else []
        for reply in replies:
            if isinstance(reply, DelayQConnectionError):
                raise reply
        workers, gone = [], []
        for i, instance in enumerate(members):
            raw, pttl = replies[2 * i], replies[2 * i + 1]
            refused = next((r for r in (raw, pttl) if isinstance(r, Exception)), None)
            if refused is not None:
                _report_unreadable(self._store.worker_key(instance), refused)
                if unreadable is not None:
                    unreadable.append(self._store.worker_key(instance))
            elif raw is None or int(pttl) == -2:
                gone.append(instance)
            else:
                workers.append(decode_description(instance, raw, int(pttl), now))
        forget = round((now - FORGET_AFTER) * 1000)
        cleanup = [self._store.command(b"ZREMRANGEBYSCORE", roster, b"-inf", forget, route=roster)]
        if gone:  # a beat racing this may be dropped too: it is back at the next beat
            cleanup.append(self._store.command(b"ZREM", roster, *gone, route=roster))
        self._store.run(cleanup, budget=0)  # best effort: the next reader tries again
        return sorted(workers, key=lambda w: (w.name, w.instance))


_reported: set[str] = set()  # unreadable roster entries already logged by this process


def _report_unreadable(key: str, error: Exception) -> None:
    if key in _reported:
        return
    if len(_reported) < 1000:
        _reported.add(key)
    logger.warning(
        "roster key %s cannot be read (%s): skipped; delete it (redis-cli DEL) if no "
        "django-delayq worker wrote it",
        key,
        error,
    )
