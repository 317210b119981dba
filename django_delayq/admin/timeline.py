"""A job page's timeline: what happened to the job, in time order.

- scheduled (when its id was made: a ULID holds the time; an occurrence of a recurring
  schedule, whose id holds its fire time, was stored by a worker ahead of that time, and
  nothing records when), and due: a pending job's due
  time last, a succeeded job's before the attempt that succeeded (with how late that
  attempt started), a cancelled job's beside its end;
- each attempt it made (``Job.attempt_history``, jobs/finished.py): its number, worker,
  start, how long it ran, its error (type, message, the traceback folded) and the wait
  before the retry ("retried in 2 s"), as far as they are known: errors written before
  0.7 hold no duration and no wait, and only the last ``MAX_ERRORS_KEPT`` are kept;
- the attempt in progress, for a running job;
- its end: succeeded, cancelled (``finished_at``) or dead (``died_at``);
- the admin actions taken on it, and by whom (the admin log, :mod:`django_delayq.admin.audit`),
  merged in by time.

Times of Redis (the job's) and of the web process (the admin log's) are merged as they are.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.formats import number_format
from django.utils.translation import gettext

from django_delayq.admin import audit
from django_delayq.admin.views import duration
from django_delayq.jobs.finished import CANCELLED, EXPIRED, SUCCEEDED, AttemptRecord
from django_delayq.jobs.job import DEAD, PENDING, RUNNING, Job
from django_delayq.jobs.state import shown_instance


@dataclass
class Event:
    """One line of the timeline; every text in it is escaped by the template."""

    kind: str  # scheduled, due, failed, succeeded (an attempt), running, end, earlier, admin
    at: datetime | None
    title: str
    details: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    outcome: str = ""  # the end's: succeeded, cancelled, dead


def seconds_text(seconds: float | None) -> str:
    """How long an attempt ran or a job waited: "0.04 ms", "6.3 ms", "1.25 s", "3 minutes";
    "" when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return ""
    if seconds < 1:
        places = 2 if seconds < 0.01 else 1
        value = number_format(round(seconds * 1000, places), places)
        return gettext("%(value)s ms") % {"value": value}
    if seconds < 60:
        return gettext("%(value)s s") % {"value": number_format(round(seconds, 2), 2)}
    return duration(0, seconds)


def date_text(when: datetime) -> str:
    """A time as the timeline's times show (the template's ``date:"Y-m-d H:i:s T"``)."""
    return format_date(timezone.localtime(when), "Y-m-d H:i:s T")


def _error(error: dict) -> dict[str, str]:
    return {
        "type": str(error.get("type") or ""),
        "message": str(error.get("message") or ""),
        "traceback": str(error.get("traceback") or ""),
    }


def attempt_event(attempt: AttemptRecord) -> Event:
    """An attempt that ended: failed (with its error and the wait before the retry) or
    succeeded."""
    number = {"number": attempt.number}
    details = []
    if attempt.worker:
        details.append(gettext("worker %(worker)s") % {"worker": shown_instance(attempt.worker)})
    if attempt.duration is not None:
        details.append(gettext("ran %(time)s") % {"time": seconds_text(attempt.duration)})
    if attempt.error is None:
        title = gettext("Attempt %(number)s succeeded") % number if attempt.number else ""
        title = title or gettext("The attempt succeeded")
        return Event("succeeded", attempt.started_at, title, details)
    if attempt.retry_in is not None:
        details.append(
            gettext("retried in %(time)s") % {"time": seconds_text(attempt.retry_in)}
            if attempt.retry_in > 0
            else gettext("retried at once")
        )
    title = gettext("Attempt %(number)s failed") % number if attempt.number else ""
    return Event(
        "failed",
        attempt.started_at,
        title or gettext("An attempt failed"),
        details,
        _error(attempt.error),
    )


def _end(job: Job) -> Event | None:
    if job.status == SUCCEEDED:
        return Event("end", job.finished_at, gettext("Succeeded"), outcome=SUCCEEDED)
    if job.status == CANCELLED:
        due = [gettext("was due %(when)s") % {"when": date_text(job.due_at)}] if job.due_at else []
        return Event("end", job.finished_at, gettext("Cancelled"), due, outcome=CANCELLED)
    if job.status == EXPIRED:
        return Event("end", job.finished_at, gettext("Expired, not run"), outcome=EXPIRED)
    if job.status == DEAD:
        return Event("end", job.died_at, gettext("Dead-lettered"), outcome=DEAD)
    return None


def job_events(job: Job, running_since: datetime | None = None) -> list[Event]:
    """What the job itself tells, in the order it happened (``running_since``: when the
    attempt in progress of a running job started, if a live worker said)."""
    if job.fire_time is None:
        events = [Event("scheduled", job.created_at, gettext("Scheduled"))]
    else:  # its id holds its fire time, not when it was stored
        events = [Event("scheduled", None, gettext("Stored by a worker, ahead of its fire time"))]
    history = job.attempt_history
    first = history[0].number if history else None
    if first is not None and first > 1:  # the oldest errors were not kept (MAX_ERRORS_KEPT)
        events.append(
            Event(
                "earlier", None, gettext("Attempts before %(number)s: not kept") % {"number": first}
            )
        )
    if job.status != SUCCEEDED:
        history = [a for a in history if a.error is not None]
    events += [attempt_event(a) for a in history]
    succeeded = events[-1] if events[-1].kind == "succeeded" else None
    if succeeded is not None and job.due_at is not None:
        if succeeded.at is not None and succeeded.at >= job.due_at:
            late = seconds_text((succeeded.at - job.due_at).total_seconds())
            succeeded.details.append(gettext("%(time)s after due") % {"time": late})
        events.insert(-1, Event("due", job.due_at, gettext("Due")))
    if job.status == RUNNING:
        details = [gettext("worker %(worker)s") % {"worker": shown_instance(job.worker)}]
        title = gettext("Attempt %(number)s in progress") % {"number": job.attempts}
        events.append(Event("running", running_since, title, details))
    if job.status == PENDING and job.due_at is not None:
        events.append(Event("due", job.due_at, gettext("Due")))
    end = _end(job)
    return [*events, end] if end else events


def admin_events(entries: Iterable) -> list[Event]:
    """The admin log's entries of a job (audit.entries_for), oldest first."""
    events = []
    for entry in entries:
        user = entry.user.get_username() if entry.user_id and entry.user else ""
        details = [gettext("by %(user)s") % {"user": user}] if user else []
        events.append(Event("admin", entry.action_time, audit.shown_message(entry), details))
    return events


def timeline(
    job: Job | None, entries: Iterable, running_since: datetime | None = None
) -> list[Event]:
    """The job's events and the admin's, merged by time (an event of the job without a time
    keeps its place after the one before it)."""
    own = job_events(job, running_since) if job is not None else []
    keyed, last = [], float("-inf")
    for event in own:
        last = event.at.timestamp() if event.at is not None else last
        keyed.append((last, event))
    theirs = [(e.at.timestamp() if e.at else last, e) for e in admin_events(entries)]
    merged = heapq.merge(keyed, theirs, key=lambda pair: pair[0])
    return [event for _, event in merged]
