"""What the admin's pages read and show, without HTML or request handling: the queue
summaries of the dashboard, the rows of the lists and job pages, and the lazy slices and
task scans the lists page through.

Every read goes through the store's rank-based reads (ZCARD, ZCOUNT, ZRANGE with
offsets, HMGET of one page), so a page costs O(log N + page size) whatever the size
of a queue. What the actions do is in :mod:`django_delayq.admin.actions`.
The templates autoescape everything that comes from here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils.functional import Promise
from django.utils.html import avoid_wrapping
from django.utils.timesince import timesince
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from django_delayq.admin import sets, texts
from django_delayq.conf import delayq_settings
from django_delayq.django_tasks.runner import shown_call
from django_delayq.jobs.job import (
    IN_DATABASE,
    PENDING,
    RESERVED,
    RUNNING,
    Job,
    job_from_raw,
    to_datetime,
)
from django_delayq.monitoring.health import iter_known_queues
from django_delayq.outbox import rows as outbox
from django_delayq.scheduling.registry import find_task
from django_delayq.storage.reads import RawJob
from django_delayq.storage.store import Store

PER_PAGE = 50
MAX_PER_PAGE = 500
# A task-filtered list reads at most this many entries of the set per page it shows.
SCAN_CHUNK = 500
SCAN_BUDGET = 5_000
CHART_MINUTES = 30
PREVIEW_CHARS = 120


# -- queues and formatting ---------------------------------------------------


def admin_queues(store: Store) -> list[str]:
    """The configured queues (DEFAULT_QUEUE, QUEUES), those of registered tasks, then every
    queue Redis remembers (what get_job() searches)."""
    return list(iter_known_queues(store))


def duration(start: float, end: float) -> str:
    """The time between two epochs in Django's ``timesince`` words ("3 hours, 5 minutes"),
    translated; in seconds below a minute, where ``timesince`` would say "0 minutes" (the
    lag of a queue is worth telling in seconds)."""
    earlier, later = sorted((start, end))
    if to_datetime(earlier) is None or to_datetime(later) is None:
        return ""  # a score no datetime can hold (garbage written to Redis)
    if later - earlier < 60:
        seconds = int(later - earlier)
        return avoid_wrapping(
            ngettext("%(count)s second", "%(count)s seconds", seconds) % {"count": seconds}
        )
    return timesince(to_datetime(earlier), to_datetime(later))  # type: ignore[arg-type]


def relative(epoch: float | None, now: float, *, future: Promise, past: Promise) -> str:
    """``future`` or ``past`` (a lazy text with ``%(time)s``) around the time to ``epoch``;
    "" for no time, and for a score no datetime can hold (garbage written to Redis)."""
    if epoch is None or not math.isfinite(epoch) or abs(epoch - now) > 1e11:
        return ""
    return (future if epoch > now else past) % {"time": duration(epoch, now)}


def preview(job: Job, limit: int = PREVIEW_CHARS) -> str:
    """The call's arguments on one line: 42, "x", reason="unpaid" (cut at ``limit``)."""
    _, args, kwargs = shown_call(job.task, job.args, job.kwargs)
    return arguments_text(args, kwargs, limit)


def arguments_text(args: Sequence[Any], kwargs: dict[str, Any], limit: int = PREVIEW_CHARS) -> str:
    """Arguments on one line as a call shows them (a job's, a recurring schedule's)."""
    parts = [_dumps(a) for a in args]
    parts += [f"{name}={_dumps(value)}" for name, value in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


# -- rows ---------------------------------------------------------------------


@dataclass
class JobRow:
    """One job as a list or detail page shows it."""

    job: Job
    gone: bool  # the record vanished between the ZRANGE and the HMGET (finished meanwhile)
    corrupt: bool
    when: str  # relative time of the set's score
    overdue: bool
    preview: str
    registered: bool
    task_parts: list[str] = field(default_factory=list)  # the dotted name, split to wrap
    runner: str = ""  # the task that runs it, when it is a Django Task (run_django_task)
    raw_record: str = ""
    errors: list[dict] = field(default_factory=list)
    url: str = ""  # the job page (the page that shows the row sets it)
    took: str = ""  # a finished job: how long its last attempt ran (timeline.seconds_text)
    attempts: str = ""  # "2 of 4" (texts.attempts), and what it means (the tooltip)
    attempts_meaning: str = ""


@dataclass(frozen=True)
class OutboxRaw(RawJob):
    """A pending job read from the database outbox (outbox.Row), shown like one in Redis."""


def outbox_shown() -> bool:
    """Whether the admin reads the outbox too: with DELAYQ["HORIZON"] on (without it, rows
    live only between a commit and its relay)."""
    return delayq_settings.HORIZON is not None


def outbox_raw(row: outbox.Row) -> OutboxRaw:
    return OutboxRaw(row.id, row.queue, PENDING, row.due_at, row.record)


def find_in_outbox(job_id: str, queue: str | None = None) -> OutboxRaw | None:
    row = outbox.find(job_id, queue) if outbox_shown() else None
    return None if row is None else outbox_raw(row)


def make_row(raw: RawJob, now: float) -> JobRow:
    job = job_from_raw(raw, delayq_settings.MAX_RETRIES)
    if isinstance(raw, OutboxRaw):
        job = replace(job, waits_in=IN_DATABASE)
    overdue = raw.status == PENDING and raw.score is not None and raw.score <= now
    if raw.status == PENDING:
        when = relative(raw.score, now, future=_("in %(time)s"), past=_("%(time)s overdue"))
        if raw.score is not None and abs(raw.score - now) < 1:
            when = gettext("due now")
    elif raw.status == RUNNING and raw.score is not None and raw.score < 0:
        when = relative(
            raw.score + RESERVED,  # claimed, not started yet: waits in its worker
            now,
            future=_("waiting in its worker, lease ends in %(time)s"),
            past=_("waiting in its worker, lease expired %(time)s ago"),
        )
    elif raw.status == RUNNING:
        when = relative(
            raw.score, now, future=_("lease ends in %(time)s"), past=_("lease expired %(time)s ago")
        )
    elif sets.is_finished(job.status):
        ended = job.finished_at.timestamp() if job.finished_at else None
        when = relative(ended, now, future=_("in %(time)s"), past=_("%(time)s ago"))
    else:
        when = relative(raw.score, now, future=_("in %(time)s"), past=_("%(time)s ago"))
    # A kept job's record is inside its entry; a damaged entry is shown raw, as corrupt.
    kept = raw.status is None and raw.kept is not None
    record = (sets.kept_record(raw.kept) or raw.kept) if kept else raw.record
    shown = shown_call(job.task, job.args, job.kwargs)[0]
    made, meaning = texts.attempts(job.attempts, job.max_retries)
    return JobRow(
        job=job,
        gone=record is None,
        corrupt=record is not None and job.task == "",
        when=when,
        overdue=overdue,
        preview=preview(job),
        registered=find_task(job.task) is not None,
        task_parts=shown.split("."),
        runner=job.task if shown != job.task else "",
        raw_record=record.decode("utf-8", "replace") if isinstance(record, bytes) else "",
        attempts=made,
        attempts_meaning=meaning,
    )


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
            self._size = sets.size(self.store, self.queue, self.status)
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("SortedSetSlice supports only contiguous slices")
        start, stop = max(index.start or 0, 0), index.stop
        stop = len(self) if stop is None else stop
        if stop <= start:
            return []
        return sets.page(self.store, self.queue, self.status, start, stop - start)


class PendingSlice(Sequence):
    """The pending jobs of a queue in Redis, then those in the database outbox (jobs beyond
    the horizon, due after the ones in Redis), as one sequence for the Paginator."""

    def __init__(self, store: Store, queue: str, in_redis: int, in_database: int) -> None:
        self.redis = SortedSetSlice(store, queue, PENDING, in_redis)
        self.queue, self.in_redis, self.in_database = queue, in_redis, in_database

    def __len__(self) -> int:
        return self.in_redis + self.in_database

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("PendingSlice supports only contiguous slices")
        start, stop = max(index.start or 0, 0), index.stop
        stop = len(self) if stop is None else stop
        found = list(self.redis[start : min(stop, self.in_redis)]) if start < self.in_redis else []
        if stop > self.in_redis:
            offset = max(start - self.in_redis, 0)
            rows = outbox.page(self.queue, offset, stop - self.in_redis - offset)
            found += [outbox_raw(row) for row in rows]
        return found


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
        chunk = sets.page(store, queue, status, pos, min(SCAN_CHUNK, start + budget - pos))
        for i, raw in enumerate(chunk):
            if _task_of(raw) == task:
                found.append(raw)
                if len(found) == limit:
                    end = pos + i + 1
                    return Scan(
                        found, start, end, bool(sets.page_ids(store, queue, status, end, 1))
                    )
        if not chunk:
            return Scan(found, start, pos, False)
        pos += len(chunk)
    return Scan(found, start, pos, bool(sets.page_ids(store, queue, status, pos, 1)))


def _task_of(raw: RawJob) -> str:
    return job_from_raw(raw, 0).task if raw.record is not None or raw.kept else ""


def fetch_rows(
    store: Store, queue: str, ids: Sequence[str], now: float
) -> list[tuple[str, JobRow | None]]:
    """(id, row) per id, the row None for a job gone (store.fetch: one round trip each)."""
    return [
        (job_id, make_row(raw, now) if (raw := store.fetch(queue, job_id)) else None)
        for job_id in ids
    ]


# -- dashboard -------------------------------------------------------------------


def queue_limits(store: Store, queue: str) -> list[dict[str, Any]]:
    """The rate and concurrency limits of ``queue`` (issue 20), for the dashboard: its own
    concurrency limit (DELAYQ['QUEUES']) first, then its tasks'."""
    out = []
    concurrency, holding = store.control.queue_limit(queue)
    if concurrency:
        out.append(
            {
                "task": gettext("all its jobs"),
                "rate": "",
                "concurrency": concurrency,
                "holding": holding,
            }
        )
    for limit in store.control.limits(queue):
        rate = ""
        if limit.rate:
            count, period = limit.rate
            unit = {1000: "s", 60_000: "m", 3_600_000: "h"}.get(period, f"{period}ms")
            rate = f"{count}/{unit}"
        out.append(
            {
                "task": limit.task,
                "rate": rate,
                "concurrency": limit.concurrency,
                "holding": limit.holding,
            }
        )
    return out


def queue_summary(store: Store, queue: str, now: float) -> dict[str, Any]:
    counts = store.counts(queue, now)
    counts["limits"] = queue_limits(store, queue)  # issue 20: rate and concurrency limits
    counts["in_database"] = outbox.count(queue) if outbox_shown() else 0
    counts["pending"] += counts["in_database"]
    series = store.throughput(queue, now, minutes=CHART_MINUTES)
    oldest = counts["oldest_due_at"]
    lag = now - oldest if oldest is not None and oldest <= now else 0.0
    return {
        "name": queue,
        **counts,
        "lag": lag,
        "lag_text": duration(oldest, now) if lag >= 1 else "",
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
