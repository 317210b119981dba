"""The admin's texts: whole sentences per job status and per action, so that each can be
translated as a whole (a translator never sees "No {status} jobs"). Lazy: translated
when shown, in the language active then. The action names and reports are beside the
actions, in :mod:`django_delayq.admin.actions`.
"""

from __future__ import annotations

from django.utils.formats import number_format
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from django_delayq.admin.sets import FINISHED
from django_delayq.jobs.finished import CANCELLED, EXPIRED, SUCCEEDED
from django_delayq.jobs.job import DEAD, PENDING, RUNNING

# The lists (and their tabs), then the statuses of a finished job.
STATUS_TITLES = {
    PENDING: _("Pending"),
    RUNNING: _("In progress"),
    DEAD: _("Dead"),
    FINISHED: _("Finished"),
    SUCCEEDED: _("Succeeded"),
    CANCELLED: _("Cancelled"),
    EXPIRED: _("Expired"),
}
LIST_TITLES = {
    PENDING: _("Pending jobs in %(queue)s"),
    RUNNING: _("Jobs in progress in %(queue)s"),
    DEAD: _("Dead jobs in %(queue)s"),
    FINISHED: _("Finished jobs in %(queue)s"),
}
EMPTY_LISTS = {
    PENDING: _("No pending jobs in %(queue)s."),
    RUNNING: _("No jobs in progress in %(queue)s."),
    DEAD: _("No dead jobs in %(queue)s."),
    FINISHED: _(
        "No finished jobs kept in %(queue)s (jobs that succeeded or were cancelled are kept "
        "for DELAYQ['FINISHED_MAX_AGE'])."
    ),
}
EMPTY_TASK_LISTS = {
    PENDING: _("No pending jobs of %(task)s in %(queue)s."),
    RUNNING: _("No jobs of %(task)s in progress in %(queue)s."),
    DEAD: _("No dead jobs of %(task)s in %(queue)s."),
    FINISHED: _("No finished jobs of %(task)s kept in %(queue)s."),
}
TOTALS = {
    PENDING: ngettext_lazy("%(count)s pending job", "%(count)s pending jobs", "count"),
    RUNNING: ngettext_lazy("%(count)s job in progress", "%(count)s jobs in progress", "count"),
    DEAD: ngettext_lazy("%(count)s dead job", "%(count)s dead jobs", "count"),
    FINISHED: ngettext_lazy("%(count)s finished job", "%(count)s finished jobs", "count"),
}
# The order of each list, said above it (the pending list is not by due time alone).
ORDERS = {
    PENDING: _(
        "In the order workers claim them: by priority, the highest first, then by due time, "
        "the earliest first; jobs waiting for a free slot of their group's limit come last."
    ),
    RUNNING: _(
        "Jobs claimed by a worker and not started yet first, then by lease deadline, the "
        "soonest first."
    ),
    DEAD: _("By time of death, the oldest first."),
    FINISHED: _("By when they finished, the newest first."),
}
OUTBOX_LAST = _("Then the jobs that wait in the database (due beyond DELAYQ['HORIZON']).")
# The "all matching" checkbox of the lists that have actions (pending, dead).
EVERY_JOB = {
    PENDING: ngettext_lazy(
        "the %(count)s pending job of %(queue)s", "all %(count)s pending jobs of %(queue)s", "count"
    ),
    DEAD: ngettext_lazy(
        "the %(count)s dead job of %(queue)s", "all %(count)s dead jobs of %(queue)s", "count"
    ),
}
FIRST_JOBS = {
    PENDING: ngettext_lazy(
        "the first %(limit)s of the %(count)s pending job of %(queue)s",
        "the first %(limit)s of the %(count)s pending jobs of %(queue)s",
        "count",
    ),
    DEAD: ngettext_lazy(
        "the first %(limit)s of the %(count)s dead job of %(queue)s",
        "the first %(limit)s of the %(count)s dead jobs of %(queue)s",
        "count",
    ),
}
NONE_MATCHED = {PENDING: _("No pending jobs matched."), DEAD: _("No dead jobs matched.")}
SEARCHED = {
    PENDING: ngettext_lazy(
        "Only the first %(count)s pending job of queue %(queue)s was searched for %(task)s; "
        "jobs further back are left alone.",
        "Only the first %(count)s pending jobs of queue %(queue)s were searched for %(task)s; "
        "jobs further back are left alone.",
        "count",
    ),
    DEAD: ngettext_lazy(
        "Only the first %(count)s dead job of queue %(queue)s was searched for %(task)s; "
        "jobs further back are left alone.",
        "Only the first %(count)s dead jobs of queue %(queue)s were searched for %(task)s; "
        "jobs further back are left alone.",
        "count",
    ),
}
STOPPED = ngettext_lazy(
    "Only the first %(count)s matching job is included; run the action again for the rest.",
    "Only the first %(count)s matching jobs are included; run the action again for the rest.",
    "count",
)
# Confirmation pages (actions with ``confirm``, and every "all matching" action).
CONFIRM_TITLES = {
    "cancel": ngettext_lazy(
        "Cancel %(count)s pending job?", "Cancel %(count)s pending jobs?", "count"
    ),
    "delete": ngettext_lazy("Delete %(count)s dead job?", "Delete %(count)s dead jobs?", "count"),
    "run_now": ngettext_lazy(
        "Run %(count)s pending job now?", "Run %(count)s pending jobs now?", "count"
    ),
    "requeue": ngettext_lazy(
        "Requeue %(count)s dead job?", "Requeue %(count)s dead jobs?", "count"
    ),
    "postpone": ngettext_lazy(
        "Postpone %(count)s pending job?", "Postpone %(count)s pending jobs?", "count"
    ),
}
CONFIRM_WARNINGS = {
    "cancel": _(
        "A cancelled job never runs: it is removed with its arguments, and its unique key "
        "becomes free. This cannot be undone."
    ),
    "delete": _(
        "A deleted job is removed with its arguments and its errors. This cannot be undone."
    ),
    "run_now": _("Each job becomes due now and runs as soon as a worker is free."),
    "postpone": _(
        "Each job becomes due that long from now (a job due later than that becomes due "
        "sooner). It keeps its arguments, attempts, priority and unique key."
    ),
    "requeue": _(
        "Each job goes back to the pending jobs, due now, with its attempts reset to 0 "
        "(its errors are kept)."
    ),
}
CONFIRM_BUTTONS = {
    "cancel": ngettext_lazy("Yes, cancel it", "Yes, cancel them", "count"),
    "delete": ngettext_lazy("Yes, delete it", "Yes, delete them", "count"),
    "run_now": ngettext_lazy("Yes, run it now", "Yes, run them now", "count"),
    "postpone": ngettext_lazy("Yes, postpone it", "Yes, postpone them", "count"),
    "requeue": ngettext_lazy("Yes, requeue it", "Yes, requeue them", "count"),
}
# Postpone's delay field: its units (seconds each), and what a bad value is told.
DELAY_UNITS = {
    "minutes": (60, _("minutes")),
    "hours": (3600, _("hours")),
    "days": (86400, _("days")),
}
BAD_DELAY = _("Give the delay as a whole number from 1 to 10000, in minutes, hours or days.")
CONFIRM_QUERY = _(
    "These are the jobs that matched “%(query)s”. When you confirm, a job that no longer "
    "matches is left alone."
)

# The search of the lists (?q=, admin/search.py).
MATCH_TOTALS = ngettext_lazy("%(count)s matching job", "%(count)s matching jobs", "count")
MATCHES = ngettext_lazy(
    "%(count)s job matches “%(query)s”.", "%(count)s jobs match “%(query)s”.", "count"
)
# Where a search stopped: how many jobs it read of how many (plural: the set's size).
SEARCHED_ALL = {
    PENDING: ngettext_lazy(
        "Searched the %(count)s pending job.", "Searched all %(count)s pending jobs.", "count"
    ),
    RUNNING: ngettext_lazy(
        "Searched the %(count)s job in progress.",
        "Searched all %(count)s jobs in progress.",
        "count",
    ),
    DEAD: ngettext_lazy(
        "Searched the %(count)s dead job.", "Searched all %(count)s dead jobs.", "count"
    ),
    FINISHED: ngettext_lazy(
        "Searched the %(count)s finished job.", "Searched all %(count)s finished jobs.", "count"
    ),
}
SEARCHED_FIRST = {
    PENDING: ngettext_lazy(
        "Searched the %(searched)s most urgent of the %(count)s pending job (one search "
        "reads at most %(limit)s jobs); the jobs after them were not searched.",
        "Searched the %(searched)s most urgent of the %(count)s pending jobs (one search "
        "reads at most %(limit)s jobs); the jobs after them were not searched.",
        "count",
    ),
    RUNNING: ngettext_lazy(
        "Searched the %(searched)s first (by lease deadline) of the %(count)s job in "
        "progress (one search reads at most %(limit)s jobs); the others were not searched.",
        "Searched the %(searched)s first (by lease deadline) of the %(count)s jobs in "
        "progress (one search reads at most %(limit)s jobs); the others were not searched.",
        "count",
    ),
    DEAD: ngettext_lazy(
        "Searched the %(searched)s oldest of the %(count)s dead job (one search reads at "
        "most %(limit)s jobs); the jobs that died after them were not searched.",
        "Searched the %(searched)s oldest of the %(count)s dead jobs (one search reads at "
        "most %(limit)s jobs); the jobs that died after them were not searched.",
        "count",
    ),
    FINISHED: ngettext_lazy(
        "Searched the %(searched)s newest of the %(count)s finished job (one search reads "
        "at most %(limit)s jobs); the jobs that finished before them were not searched.",
        "Searched the %(searched)s newest of the %(count)s finished jobs (one search reads "
        "at most %(limit)s jobs); the jobs that finished before them were not searched.",
        "count",
    ),
}
SEARCHED_RANKS = ngettext_lazy(
    "Searched the jobs at positions %(first)s to %(last)s of %(count)s (one search reads "
    "at most %(limit)s jobs).",
    "Searched the jobs at positions %(first)s to %(last)s of %(count)s (one search reads "
    "at most %(limit)s jobs).",
    "count",
)
SEARCH_NEXT = ngettext_lazy(
    "Search the next %(count)s job", "Search the next %(count)s jobs", "count"
)
# The job the query names exactly, found in another list.
ELSEWHERE = {
    PENDING: _("Job %(id)s, whose id or unique key this is, is pending."),
    RUNNING: _("Job %(id)s, whose id or unique key this is, is in progress."),
    DEAD: _("Job %(id)s, whose id or unique key this is, is dead."),
    FINISHED: _("Job %(id)s, whose id this is, has finished (it is kept a while)."),
}
EVERY_MATCH = ngettext_lazy(
    "the %(count)s job matching “%(query)s”", "all %(count)s jobs matching “%(query)s”", "count"
)
# After an "all matching" action: how far its search read, what changed meanwhile.
QUERY_SEARCHED = {
    PENDING: ngettext_lazy(
        "Only %(count)s pending job of queue %(queue)s was searched for “%(query)s”; "
        "the jobs after it are left alone.",
        "Only %(count)s pending jobs of queue %(queue)s were searched for “%(query)s”; "
        "the jobs after them are left alone.",
        "count",
    ),
    DEAD: ngettext_lazy(
        "Only %(count)s dead job of queue %(queue)s was searched for “%(query)s”; "
        "the jobs after it are left alone.",
        "Only %(count)s dead jobs of queue %(queue)s were searched for “%(query)s”; "
        "the jobs after them are left alone.",
        "count",
    ),
}
NO_LONGER_MATCHING = ngettext_lazy(
    "%(count)s no longer matched “%(query)s” and was left alone.",
    "%(count)s no longer matched “%(query)s” and were left alone.",
    "count",
)

# A job's attempts, the same words on every page (the worker logs "attempt 2 of 4"):
# made, the one running included, of allowed (max_retries + 1).
ATTEMPTS = _("%(made)s of %(allowed)s")
ATTEMPTS_MEANING = ngettext_lazy(
    "attempts made, a running one included, of the attempts allowed: the first and up to "
    "%(count)s retry",
    "attempts made, a running one included, of the attempts allowed: the first and up to "
    "%(count)s retries",
    "count",
)


def attempts(made: int, max_retries: int) -> tuple[str, str]:
    """("2 of 4", what it means) for a job that made ``made`` attempts of its
    ``max_retries`` + 1."""
    allowed = {"made": Count(made), "allowed": Count(max_retries + 1)}
    return ATTEMPTS % allowed, ATTEMPTS_MEANING % {"count": Count(max_retries)}


PURGED = ngettext_lazy(
    "Purged %(count)s dead job of queue %(queue)s.",
    "Purged %(count)s dead jobs of queue %(queue)s.",
    "count",
)


class Count(int):
    """A number for a plural text: the plural form is chosen by its value, and it prints
    with the active language's thousands separator ("12,345")."""

    def __str__(self) -> str:
        return number_format(int(self), force_grouping=True)
