"""What the admin's Workers tab shows (dashboard.py serves it): one row per live worker of the
roster (roster.py) with the jobs it is running. Those come from the queues' running sets
(the lease token names the worker), read in one round trip per queue, so the tab agrees
with the In progress list; the roster's own list is up to a heartbeat old and only lends
each job its start time.

The templates autoescape everything that comes from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.utils.translation import gettext_lazy as _

from django_delayq.admin.views import duration, preview, relative
from django_delayq.conf import delayq_settings
from django_delayq.django_tasks.runner import shown_call
from django_delayq.jobs.job import job_from_raw, to_datetime
from django_delayq.jobs.state import parse_state, worker_of
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.reads import RawJob
from django_delayq.storage.roster import LiveWorker
from django_delayq.storage.store import Store

# Running jobs read from Redis per page (each worker runs at most `concurrency` at once).
MAX_JOBS_READ = 500


@dataclass
class RunningRow:
    """A job a worker is running: linked to its page."""

    queue: str
    id: str
    task_parts: list[str]
    preview: str
    since: str  # "for 3 minutes"
    url: str


@dataclass
class WorkerRow:
    worker: LiveWorker
    started: str  # "2 hours ago"
    started_at: datetime | None
    beat: str  # "3 seconds ago"
    beat_at: datetime | None
    queues: list[tuple[str, str]]  # (queue, its pending list)
    running: list[RunningRow] = field(default_factory=list)


def _valid(queue: str) -> bool:
    try:
        check_queue_name(queue)
    except ValueError:
        return False
    return True


def _running(store: Store, workers: Sequence[LiveWorker]) -> dict[str, list[RawJob]]:
    """instance -> the attempts it holds now (started, or claimed and waiting for a
    runner, as In progress lists them), read from the running sets of the queues the
    workers serve (MAX_JOBS_READ at most in all)."""
    live = {w.instance for w in workers}
    held: dict[str, list[RawJob]] = {}
    budget = MAX_JOBS_READ
    for queue in dict.fromkeys(q for w in workers for q in w.queues):
        if not _valid(queue) or budget <= 0:
            continue
        found = store.page(queue, "running", 0, budget)
        budget -= len(found)
        for raw in found:
            if raw.record is None or raw.score is None:
                continue  # finished meanwhile
            instance = worker_of(parse_state(raw.state)[1])
            if instance in live:
                held.setdefault(instance, []).append(raw)
    return held


def worker_rows(
    store: Store,
    workers: Sequence[LiveWorker],
    now: float,
    job_url: Callable[[str, str], str],
    list_url: Callable[[str], str],
) -> list[WorkerRow]:
    """Rows of the Workers tab; ``job_url(queue, id)`` and ``list_url(queue)`` make links."""
    held = _running(store, workers)
    since = {(j.queue, j.id): j.since for w in workers for j in w.running}
    ago = {"future": _("in %(time)s"), "past": _("%(time)s ago")}
    rows = []
    for worker in workers:
        row = WorkerRow(
            worker=worker,
            started=relative(worker.started, now, **ago),
            started_at=to_datetime(worker.started) if worker.started is not None else None,
            beat=relative(worker.beat, now, **ago),
            beat_at=to_datetime(worker.beat),
            queues=[(q, list_url(q) if _valid(q) else "") for q in worker.queues],
        )
        for raw in held.get(worker.instance, []):
            job = job_from_raw(raw, delayq_settings.MAX_RETRIES)
            started = since.get((raw.queue, raw.id))
            row.running.append(
                RunningRow(
                    queue=raw.queue,
                    id=raw.id,
                    task_parts=shown_call(job.task, job.args, job.kwargs)[0].split("."),
                    preview=preview(job),
                    since=_("waiting for a runner")
                    if raw.score < 0
                    else _("for %(time)s") % {"time": duration(started, now)}
                    if started is not None
                    else "",
                    url=job_url(raw.queue, raw.id),
                )
            )
        rows.append(row)
    return rows


def attempt_started(store: Store, now: float, queue: str, job_id: str) -> datetime | None:
    """When the attempt in progress of a running job started, as its worker's last beat
    said (the roster); None when no live worker says it runs the job."""
    for worker in store.roster.live(now):
        for job in worker.running:
            if job.queue == queue and job.id == job_id and job.since is not None:
                return to_datetime(job.since)
    return None
