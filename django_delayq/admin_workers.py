"""What the admin's Workers tab shows (admin.py serves it): one row per live worker of the
roster (roster.py) with the jobs it is running, read in one round trip per queue.

The templates autoescape everything that comes from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.utils.translation import gettext_lazy as _

from .admin_views import duration, preview, relative
from .conf import delayq_settings
from .job import job_from_raw, to_datetime
from .roster import LiveWorker
from .store import Store, check_queue_name
from .wording import shown_call

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


def worker_rows(
    store: Store,
    workers: Sequence[LiveWorker],
    now: float,
    job_url: Callable[[str, str], str],
    list_url: Callable[[str], str],
) -> list[WorkerRow]:
    """Rows of the Workers tab; ``job_url(queue, id)`` and ``list_url(queue)`` make links."""
    wanted: dict[str, list[str]] = {}
    for worker in workers:
        for job in worker.running:
            if _valid(job.queue) and sum(map(len, wanted.values())) < MAX_JOBS_READ:
                wanted.setdefault(job.queue, []).append(job.id)
    records = {}
    for queue, ids in wanted.items():
        for raw in store.fetch_many(queue, "running", [(i, None) for i in ids]):
            if raw.record is not None:
                records[queue, raw.id] = job_from_raw(raw, delayq_settings.MAX_RETRIES)
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
        for job in worker.running:
            found = records.get((job.queue, job.id))
            task = shown_call(found.task, found.args, found.kwargs)[0] if found else job.task
            row.running.append(
                RunningRow(
                    queue=job.queue,
                    id=job.id,
                    task_parts=task.split(".") if task else [],
                    preview=preview(found) if found is not None else "",
                    since=_("for %(time)s") % {"time": duration(job.since, now)}
                    if job.since is not None
                    else "",
                    url=job_url(job.queue, job.id) if _valid(job.queue) else "",
                )
            )
        rows.append(row)
    return rows
