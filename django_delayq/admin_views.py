"""What the admin dashboard (admin.py) shows and does, without HTML or request handling.

Every read goes through the store's rank-based reads (ZCARD, ZCOUNT, ZRANGE with
offsets, HMGET of one page), so a page costs O(log N + page size) whatever the size
of a queue. Every change goes through the store's scripts, the ones the worker runs,
so an action racing a worker is reported ("1 is being run by a worker"), never half
applied.
The templates autoescape everything that comes from here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .conf import delayq_settings
from .job import DEAD, PENDING, RESERVED, RUNNING, Job, job_from_raw, to_datetime
from .reads import RawJob
from .registry import find_task
from .store import Store

PER_PAGE = 50
MAX_PER_PAGE = 500
# A task-filtered list reads at most this many entries of the set per page it shows.
SCAN_CHUNK = 500
SCAN_BUDGET = 5_000
# "All matching" actions: at most this many jobs per request (reading at most ALL_SCAN).
ALL_MATCHING_LIMIT = 10_000
ALL_SCAN = 50_000
ACTION_CHUNK = 500
MAX_POSTED_IDS = 1_000
# Missed ids looked up to tell "a worker is running it" from "it is gone".
MISSED_CHECKED = 100
CHART_MINUTES = 30
PREVIEW_CHARS = 120


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    permission: str  # codename in the django_delayq app
    status: str  # the set the jobs must be in
    done: str  # "3 jobs <done>"
    missed: str  # "1 <missed>"


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("cancel", "Cancel", "cancel_job", PENDING, "cancelled", "was already gone"),
        Action("run_now", "Run now", "run_job", PENDING, "made due now", "was no longer pending"),
        Action("requeue", "Requeue", "requeue_job", DEAD, "requeued", "was no longer dead"),
        Action("delete", "Delete", "delete_job", DEAD, "deleted", "was already gone"),
    )
}


def actions_for(status: str) -> list[Action]:
    return [a for a in ACTIONS.values() if a.status == status]


# -- queues and formatting ---------------------------------------------------


def admin_queues(store: Store) -> list[str]:
    """The configured queues (DEFAULT_QUEUE, QUEUES), those of registered tasks, then every
    queue Redis remembers (what get_job() searches)."""
    from .api import search_queues

    return list(search_queues())


def humanize(seconds: float) -> str:
    """A short duration: '12 s', '29 min', '3 h 5 min', '2 d 4 h'."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def relative(epoch: float | None, now: float, *, future: str, past: str) -> str:
    if epoch is None or not math.isfinite(epoch) or abs(epoch - now) > 1e12:
        return ""
    delta = epoch - now
    return (future if delta > 0 else past).format(humanize(delta))


def preview(job: Job, limit: int = PREVIEW_CHARS) -> str:
    """The call's arguments on one line: 42, "x", reason="unpaid" (cut at ``limit``)."""
    parts = [_dumps(a) for a in job.args]
    parts += [f"{name}={_dumps(value)}" for name, value in job.kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


# -- rows ---------------------------------------------------------------------


@dataclass
class Row:
    """One job as a list or detail page shows it."""

    job: Job
    gone: bool  # the record vanished between the ZRANGE and the HMGET (finished meanwhile)
    corrupt: bool
    when: str  # relative time of the set's score
    overdue: bool
    preview: str
    registered: bool
    task_parts: list[str] = field(default_factory=list)  # the dotted name, split to wrap
    raw_record: str = ""
    errors: list[dict] = field(default_factory=list)


def make_row(raw: RawJob, now: float) -> Row:
    job = job_from_raw(raw, delayq_settings.MAX_RETRIES)
    overdue = raw.status == PENDING and raw.score is not None and raw.score <= now
    if raw.status == PENDING:
        when = relative(raw.score, now, future="in {}", past="{} overdue")
        if raw.score is not None and abs(raw.score - now) < 1:
            when = "due now"
    elif raw.status == RUNNING and raw.score is not None and raw.score < 0:
        lease_until = raw.score + RESERVED  # claimed, not started yet
        when = relative(
            lease_until,
            now,
            future="waiting in its worker, lease ends in {}",
            past="waiting in its worker, lease expired {} ago",
        )
    elif raw.status == RUNNING:
        when = relative(raw.score, now, future="lease ends in {}", past="lease expired {} ago")
    else:
        when = relative(raw.score, now, future="in {}", past="{} ago")
    record = raw.record
    return Row(
        job=job,
        gone=record is None,
        corrupt=record is not None and job.task == "",
        when=when,
        overdue=overdue,
        preview=preview(job),
        registered=find_task(job.task) is not None,
        task_parts=job.task.split("."),
        raw_record=record.decode("utf-8", "replace") if isinstance(record, bytes) else "",
    )


def detail_errors(job: Job) -> list[dict]:
    """The recorded errors, newest first, with ``at`` as a datetime."""
    out = []
    for error in reversed(job.errors):
        if not isinstance(error, dict):
            error = {"message": str(error)}
        at = error.get("at")
        out.append(
            {
                "type": str(error.get("type") or ""),
                "message": str(error.get("message") or ""),
                "traceback": str(error.get("traceback") or ""),
                "attempt": error.get("attempt"),
                "worker": str(error.get("worker") or ""),
                "at": to_datetime(at) if isinstance(at, (int, float)) else None,
            }
        )
    return out


# -- lists ---------------------------------------------------------------------


class SortedSetSlice(Sequence):
    """A sorted set as a lazy sequence for django.core.paginator.Paginator.

    ``len()`` is one ZCARD, a slice is one ZRANGE by rank plus one HMGET: a page
    costs O(log N + page) even a million entries deep.
    """

    def __init__(self, store: Store, queue: str, status: str, size: int | None = None) -> None:
        self.store, self.queue, self.status = store, queue, status
        self._size = size

    def __len__(self) -> int:
        if self._size is None:
            self._size = self.store.size(self.queue, self.status)
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("SortedSetSlice supports only contiguous slices")
        start, stop = max(index.start or 0, 0), index.stop
        stop = len(self) if stop is None else stop
        if stop <= start:
            return []
        return self.store.page(self.queue, self.status, start, stop - start)


@dataclass
class Scan:
    """One page of a task-filtered list, read from rank ``start`` on."""

    raws: list[RawJob]
    start: int
    end: int  # first rank not looked at
    more: bool  # entries remain after ``end``


def scan_for_task(
    store: Store, queue: str, status: str, task: str, start: int, limit: int, budget: int
) -> Scan:
    """Up to ``limit`` jobs of ``task`` from rank ``start``, reading at most ``budget`` ranks."""
    pos, found = start, []
    while pos < start + budget:
        chunk = store.page(queue, status, pos, min(SCAN_CHUNK, start + budget - pos))
        for i, raw in enumerate(chunk):
            if _task_of(raw) == task:
                found.append(raw)
                if len(found) == limit:
                    end = pos + i + 1
                    return Scan(found, start, end, bool(store.page_ids(queue, status, end, 1)))
        if not chunk:
            return Scan(found, start, pos, False)
        pos += len(chunk)
    return Scan(found, start, pos, bool(store.page_ids(queue, status, pos, 1)))


def _task_of(raw: RawJob) -> str:
    return job_from_raw(raw, 0).task if raw.record is not None else ""


@dataclass(frozen=True)
class Matching:
    """The jobs an "all matching" action acts on, and what its caps left out."""

    ids: list[str]
    limited: bool  # ALL_MATCHING_LIMIT was reached: more matching jobs may remain
    searched: int | None  # a task search stopped after this many ranks (None: it saw all)


def matching_ids(
    store: Store, queue: str, status: str, task: str, *, skip_due: bool = False
) -> Matching:
    """Ids for an "all matching" action, capped at ALL_MATCHING_LIMIT.

    ``skip_due`` starts after the jobs already due (run-now): those sort first, and making
    them due again would change nothing while the cap hid the ones it should reach.
    """
    start = store.counts(queue, store.server_time())["due"] if skip_due else 0
    if not task:
        ids = store.page_ids(queue, status, start, ALL_MATCHING_LIMIT + 1)
        return Matching(ids[:ALL_MATCHING_LIMIT], len(ids) > ALL_MATCHING_LIMIT, None)
    scan = scan_for_task(store, queue, status, task, start, ALL_MATCHING_LIMIT, ALL_SCAN)
    limited = len(scan.raws) == ALL_MATCHING_LIMIT and scan.more
    searched = scan.end - start if scan.more and not limited else None
    return Matching([raw.id for raw in scan.raws], limited, searched)


# -- actions ---------------------------------------------------------------------


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class Applied:
    """What an action did: how many jobs it changed, the ids it missed, and of those how
    many a requeue kept dead because another pending job holds their unique key."""

    done: int = 0
    missed: list[str] = field(default_factory=list)
    key_held: int = 0


def apply_action(store: Store, action: Action, queue: str, ids: Sequence[str]) -> Applied:
    """Run ``action`` on ``ids`` through the store's scripts."""
    from .api import cancel_in  # sends job_cancelled, as django_delayq.cancel() does

    ids = list(dict.fromkeys(ids))
    applied = Applied()
    if action.name == "cancel":
        for job_id in ids:
            if cancel_in(queue, job_id=job_id):
                applied.done += 1
            else:
                applied.missed.append(job_id)
        return applied
    method = {"run_now": store.run_now, "requeue": store.requeue, "delete": store.delete_dead}
    for chunk in _chunks(ids, ACTION_CHUNK):
        for job_id, changed in zip(chunk, method[action.name](queue, chunk), strict=True):
            if changed is True or changed == 1:
                applied.done += 1
            else:
                applied.missed.append(job_id)
                applied.key_held += changed == 2  # requeue: another pending job holds its key
    return applied


def running_among(store: Store, queue: str, ids: Sequence[str]) -> int:
    """How many of ``ids`` (the first MISSED_CHECKED) a worker is running now."""
    return sum(
        1
        for job_id in ids[:MISSED_CHECKED]
        if (raw := store.fetch(queue, job_id)) is not None and raw.status == RUNNING
    )


def action_message(
    action: Action, done: int, missed: int, running: int = 0, key_held: int = 0
) -> str:
    """'3 jobs cancelled, 1 is being run by a worker, 1 was already gone.'"""
    text = f"{done} job{'' if done == 1 else 's'} {action.done}"
    if running:
        text += f", {running} {'is' if running == 1 else 'are'} being run by a worker"
    if key_held:
        text += (
            f", {key_held} {'was' if key_held == 1 else 'were'} kept dead because another "
            "pending job holds the same unique key (cancel or run that one first)"
        )
    others = missed - running - key_held
    if others:
        verb = action.missed if others == 1 else action.missed.replace("was ", "were ", 1)
        text += f", {others} {verb}"
    return text + "."


# -- dashboard -------------------------------------------------------------------


def queue_summary(store: Store, queue: str, now: float) -> dict[str, Any]:
    counts = store.counts(queue, now)
    series = store.throughput(queue, now, minutes=CHART_MINUTES)
    oldest = counts["oldest_due_at"]
    lag = now - oldest if oldest is not None and oldest <= now else 0.0
    return {
        "name": queue,
        **counts,
        "lag": lag,
        "lag_text": humanize(lag) if lag >= 1 else "",
        "done_5": sum(series["d"][-5:]),
        "failed_5": sum(series["f"][-5:]),
        "done_total": sum(series["d"]),
        "failed_total": sum(series["f"]),
        "chart": chart(series["d"], series["f"]),
    }


CHART_HEIGHT = 48
BAR_WIDTH = 8


def chart(done: list[int], failed: list[int]) -> dict[str, Any]:
    """Numbers for an inline SVG bar chart: one stacked bar (done, failed) per minute."""
    peak = max((d + f for d, f in zip(done, failed, strict=True)), default=0) or 1
    bars = []
    count = len(done)
    for i, (d, f) in enumerate(zip(done, failed, strict=True)):
        done_h = round(d / peak * CHART_HEIGHT, 1)
        failed_h = round(f / peak * CHART_HEIGHT, 1)
        bars.append(
            {
                "x": i * BAR_WIDTH,
                "done_y": round(CHART_HEIGHT - done_h, 1),
                "done_h": done_h,
                "failed_y": round(CHART_HEIGHT - done_h - failed_h, 1),
                "failed_h": failed_h,
                "ago": count - 1 - i,
                "done": d,
                "failed": f,
            }
        )
    return {"bars": bars, "width": count * BAR_WIDTH, "height": CHART_HEIGHT, "peak": peak}
