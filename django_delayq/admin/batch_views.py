"""What the admin's Batches pages read and show, without HTML or request handling: the rows
of the list of batches, a batch's callbacks and members, and the batch or chain a job's
link names (its page's "Batch" line).

Costs: a page of the list is one ZCARD, one ZREVRANGE, one round trip of HGETALLs (one
per batch shown) and one round trip that reads the jobs of the callbacks scheduled (one
fetch.lua each, finished jobs kept included: the state shown is the job's, not the batch's
"scheduled"); a batch's page is one HGETALL, one HLEN, that round trip for its callbacks,
and, up to MEMBERS_READ_LIMIT members, its two member hashes whole (``store.batches.outcomes``,
storage/batches.py), sorted and paged here; a bigger batch's members are not listed. The
pages that use this are in :mod:`django_delayq.admin.batch_pages`. The templates
autoescape everything from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from django_delayq.admin.views import arguments_text
from django_delayq.batches import links
from django_delayq.batches.api import BatchState, state_of
from django_delayq.conf import delayq_settings
from django_delayq.exceptions import DelayQError
from django_delayq.jobs.finished import CANCELLED, EXPIRED, SUCCEEDED
from django_delayq.jobs.job import DEAD, PENDING, RUNNING, decode_fields, job_from_raw, to_datetime
from django_delayq.jobs.record import FLAG_LINKED
from django_delayq.scheduling.plan import Plan
from django_delayq.storage.reads import RawJob
from django_delayq.storage.store import Store

PER_PAGE = 50
MEMBERS_PER_PAGE = 100
# A batch's page lists its members (read whole, two HGETALLs) up to this many.
MEMBERS_READ_LIMIT = 20_000

KIND_TITLES = {"success": _("on success"), "complete": _("on complete"), "death": _("on death")}
CALLBACK_STATES = {
    None: _("not decided"),
    "decided": _("decided"),
    "scheduled": _("scheduled"),
}
# A scheduled callback's state is its job's, read where the job is (kept once finished).
JOB_STATES = {
    PENDING: _("job pending"),
    RUNNING: _("job running"),
    SUCCEEDED: _("job succeeded"),
    CANCELLED: _("job cancelled"),
    EXPIRED: _("job expired"),
    DEAD: _("job dead"),
    "": _("job ended, no longer kept"),
}
# A member's outcome; "" is a member that has not ended. Listed in this order.
OUTCOMES = {
    "": _("not ended"),
    "dead": _("dead"),
    "cancelled": _("cancelled"),
    "expired": _("expired"),
    "succeeded": _("succeeded"),
}


@dataclass
class CallbackRow:
    """One callback of a batch: its kind, its state, and (on the batch's page) its call."""

    kind: str
    title: Promise
    state: str | None
    state_title: Promise
    task: str = ""
    arguments: str = ""
    more_steps: int = 0  # a chain: its steps after the first
    job_id: str = ""  # decided: the id its job gets (links.derived_id), the find link's query
    job_url: str = ""
    queue: str = ""  # the queue its job goes to (its first step's, as steps.store_step decides)
    job_status: str | None = None  # scheduled: its job's status, "" when no longer kept


@dataclass
class BatchRow:
    """One batch as the list or its own page shows it; ``state`` None: it expired (its keys
    are gone a week after it finished), only its entry in the list is left."""

    id: str
    created_at: datetime | None
    state: BatchState | None
    callbacks: list[CallbackRow] = field(default_factory=list)
    url: str = ""

    @property
    def ended(self) -> int:
        s = self.state
        return 0 if s is None else s.succeeded + s.dead + s.cancelled + s.expired

    @property
    def percent(self) -> int | None:
        """Members ended, in percent of the total (None before the seal: no total yet)."""
        if self.state is None or self.state.total is None:
            return None
        total = self.state.total
        return 100 if total == 0 else min(self.ended * 100 // total, 100)

    @property
    def status(self) -> Promise:
        s = self.state
        if s is None:
            return _("expired")
        if s.cancelled_at is not None:
            return _("cancelled")
        if s.done:
            return _("done")
        if s.total is None:
            return _("being filled (its block has not ended)")
        return _("in progress")

    @property
    def cancellable(self) -> bool:
        return self.state is not None and self.state.cancelled_at is None and not self.state.done


def callback_rows(
    state: BatchState, fields: dict[str, str], find_url: Callable[[str], str] | None = None
) -> list[CallbackRow]:
    """The batch's callbacks in the order of KIND_TITLES, each once decided with the id
    and queue of its job; with ``find_url`` (the batch's page) each with its call and, once
    decided, a link to its job."""
    rows = []
    for kind, title in KIND_TITLES.items():
        if kind not in state.callbacks:
            continue
        found = state.callbacks[kind]
        row = CallbackRow(kind, title, found, CALLBACK_STATES.get(found, _("not decided")))
        spec = fields.get(f"cb:{kind}", "")
        if find_url is not None:
            _describe(row, spec)
        fired = fields.get(f"fire:{kind}", "")
        if fired.isdigit():
            row.job_id = links.derived_id(state.id, kind, int(fired))
            row.queue = _queue_of(spec)
            if find_url is not None:
                row.job_url = find_url(row.job_id)
        rows.append(row)
    return rows


def _queue_of(spec_json: str) -> str:
    """The queue a callback's job is stored in: its first step's (steps.store_step plans
    it so); "" when the spec is not what steps.py writes."""
    try:
        step = json.loads(spec_json)["steps"][0]
        queue = (step.get("o") or {}).get("queue")
        return Plan(step["t"], {"queue": queue} if queue else {}).queue
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, LookupError, DelayQError):
        return ""


def read_callback_jobs(store: Store, callbacks: Sequence[CallbackRow]) -> None:
    """Give each scheduled callback its job's status, read where the job is now (one
    round trip for them all: a job that ran is kept a while, ``FINISHED_MAX_AGE``): a
    batch's "scheduled" says only that the job was stored, not whether it ran."""
    wanted = [cb for cb in callbacks if cb.state == "scheduled" and cb.job_id and cb.queue]
    if not wanted:
        return
    ops = [store.fetch_op(cb.queue, cb.job_id, finished=True) for cb in wanted]
    for cb, raw in zip(wanted, store.run(ops, budget=2.0), strict=True):
        if isinstance(raw, Exception):
            raise raw
        job = job_from_raw(raw, delayq_settings.MAX_RETRIES) if raw is not None else None
        cb.job_status = job.status if job is not None else ""
        cb.state_title = JOB_STATES.get(cb.job_status, cb.state_title)


def _describe(row: CallbackRow, spec_json: str) -> None:
    """The callback's first call and how many steps follow it (steps.py's JSON)."""
    try:
        spec = json.loads(spec_json)
        steps = spec["steps"]
        first = steps[0]
        row.task = str(first.get("t") or "")
        args, kwargs = first.get("a") or [], first.get("k") or {}
        row.arguments = arguments_text(list(args), dict(kwargs))
        row.more_steps = len(steps) - 1
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        row.task = spec_json[:200]  # not the JSON steps.py writes: shown as it is


class BatchSlice(Sequence):
    """The list of batches, newest first, as a lazy sequence for the Paginator: ``len()``
    is one ZCARD, a slice one ZREVRANGE plus one round trip of HGETALLs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._size: int | None = None

    def __len__(self) -> int:
        if self._size is None:
            self._size = self.store.batches.count()
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("BatchSlice supports only contiguous slices")
        start, stop = max(index.start or 0, 0), index.stop
        stop = len(self) if stop is None else stop
        if stop <= start:
            return []
        listed = self.store.batches.page(start, stop - start)
        hashes = self.store.batches.read_many([batch_id for batch_id, _ in listed])
        rows = [
            batch_row(batch_id, created_ms, fields)
            for (batch_id, created_ms), fields in zip(listed, hashes, strict=True)
        ]
        read_callback_jobs(self.store, [cb for row in rows for cb in row.callbacks])
        return rows


def batch_row(batch_id: str, created_ms: int | None, fields: dict[str, str] | None) -> BatchRow:
    """A batch's row from its hash (None: expired), its callbacks without their calls."""
    if fields is None:
        created = to_datetime(created_ms / 1000) if created_ms is not None else None
        return BatchRow(batch_id, created, None)
    state = state_of(batch_id, fields)
    return BatchRow(batch_id, state.created_at, state, callback_rows(state, fields))


@dataclass
class MemberRow:
    id: str
    queue: str  # "" when the batch recorded no queue for it (an outcome before the seal)
    outcome: str  # "" for a member that has not ended
    outcome_title: Promise
    url: str = ""


def member_rows(queues: dict[str, str], outcomes: dict[str, str]) -> list[MemberRow]:
    """Every member (those the seal recorded, and any outcome recorded without one): the
    members not ended first, then the dead, the cancelled and the succeeded, each by id
    (ULIDs: by the time they were scheduled)."""
    order = {outcome: i for i, outcome in enumerate(OUTCOMES)}
    rows = [
        MemberRow(member, queues.get(member, ""), outcome, OUTCOMES.get(outcome, _("not ended")))
        for member in {**queues, **outcomes}
        for outcome in [outcomes.get(member, "")]
    ]
    rows.sort(key=lambda row: (order.get(row.outcome, len(order)), row.id))
    return rows


def outcome_counts(rows: Sequence[MemberRow]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for row in rows:
        counts[row.outcome if row.outcome in counts else ""] += 1
    return counts


@dataclass(frozen=True)
class JobLink:
    """What a job's link says (its page's "Batch" and "Chain" lines)."""

    batch_id: str | None
    callback: bool  # it is a callback of the batch, not a member
    chain_id: str | None
    step: int | None  # its place in the chain, from 1


def job_link(store: Store, raw: RawJob) -> JobLink | None:
    """The link of a linked job (record flag 'l': one HGET; none for others), or None."""
    if FLAG_LINKED not in decode_fields(raw.record).flags:
        return None
    link = links.loads(store.batches.read_link(raw.queue, raw.id))
    batch_id = links.batch_of(link)
    chain_id = link.get("c") if isinstance(link.get("c"), str) else None
    if batch_id is None and chain_id is None:
        return None
    index = link.get("i")
    step = index + 1 if isinstance(index, int) and chain_id else None
    return JobLink(batch_id, "b" not in link, chain_id, step)
