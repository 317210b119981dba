"""What the admin's actions do (cancel, run now, requeue, delete), without HTML or request
handling: the table of actions, which jobs an "all matching" action reaches, running an
action on a list of ids, and the sentence that reports what it did.

Every change goes through the store's scripts, the ones the worker runs, so an action
racing a worker is reported ("1 is being run by a worker"), never half applied. The pages
that post the actions and ask before the destructive ones are in
:mod:`django_delayq.admin.action_pages`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from django.utils.functional import Promise
from django.utils.translation import gettext, ngettext, ngettext_lazy, pgettext
from django.utils.translation import gettext_lazy as _

from django_delayq.admin import search
from django_delayq.admin.views import outbox_shown, scan_for_task
from django_delayq.jobs.job import DEAD, PENDING, RUNNING, decode_fields
from django_delayq.outbox import relay as relaying
from django_delayq.storage.calls import API_BUDGET
from django_delayq.storage.milliseconds import ms
from django_delayq.storage.store import Store

# "All matching" actions: at most this many jobs per request (reading at most ALL_SCAN).
ALL_MATCHING_LIMIT = 10_000
ALL_SCAN = 50_000
ACTION_CHUNK = 500
MAX_POSTED_IDS = 1_000
# Missed ids looked up to tell "a worker is running it" from "it is gone".
MISSED_CHECKED = 100
# A confirmation page lists this many of the jobs it asks about (and counts the rest).
CONFIRM_SHOWN = 20


@dataclass(frozen=True)
class Action:
    """One admin action. The texts are lazy: they are translated when shown.

    ``done`` and ``missed`` are plurals keyed on ``count`` ("3 jobs cancelled", "1 was
    already gone"); ``lands_on`` is the list a job page goes to once the action worked
    (the job left the page's state); ``confirm`` asks on a confirmation page first.
    """

    name: str
    label: Promise
    permission: str  # codename in the django_delayq app
    status: str  # the set the jobs must be in
    done: Promise
    missed: Promise
    lands_on: str
    confirm: bool = False
    # Postpone: its confirmation page asks for the delay (``delay_field``); it is not a
    # button of each row of a list, nor red; the job stays pending, so a job page stays.
    delay_field: bool = False

    @property
    def danger(self) -> bool:
        return self.confirm and not self.delay_field


# What run now and postpone say of the jobs they missed (one msgid, not two to translate).
NO_LONGER_PENDING = ngettext_lazy(
    "%(count)s was no longer pending", "%(count)s were no longer pending", "count"
)

ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action(
            "cancel",
            _("Cancel"),
            "cancel_job",
            PENDING,
            ngettext_lazy("%(count)s job cancelled", "%(count)s jobs cancelled", "count"),
            ngettext_lazy("%(count)s was already gone", "%(count)s were already gone", "count"),
            lands_on=PENDING,
            confirm=True,
        ),
        Action(
            "run_now",
            _("Run now"),
            "run_job",
            PENDING,
            ngettext_lazy("%(count)s job made due now", "%(count)s jobs made due now", "count"),
            NO_LONGER_PENDING,
            lands_on=PENDING,
        ),
        Action(
            "postpone",
            _("Postpone"),
            "run_job",
            PENDING,
            ngettext_lazy("%(count)s job postponed", "%(count)s jobs postponed", "count"),
            NO_LONGER_PENDING,
            lands_on=PENDING,
            confirm=True,
            delay_field=True,
        ),
        Action(
            "requeue",
            _("Requeue"),
            "requeue_job",
            DEAD,
            ngettext_lazy("%(count)s job requeued", "%(count)s jobs requeued", "count"),
            ngettext_lazy("%(count)s was no longer dead", "%(count)s were no longer dead", "count"),
            lands_on=PENDING,
        ),
        Action(
            "delete",
            _("Delete"),
            "delete_job",
            DEAD,
            ngettext_lazy("%(count)s job deleted", "%(count)s jobs deleted", "count"),
            ngettext_lazy("%(count)s was already gone", "%(count)s were already gone", "count"),
            lands_on=DEAD,
            confirm=True,
        ),
    )
}


def actions_for(status: str) -> list[Action]:
    return [a for a in ACTIONS.values() if a.status == status]


@dataclass(frozen=True)
class Matching:
    """The jobs an "all matching" action acts on, and what its caps left out."""

    ids: list[str]
    limited: bool  # ALL_MATCHING_LIMIT was reached: more matching jobs may remain
    searched: int | None  # a task search stopped after this many ranks (None: it saw all)


def matching_ids(
    store: Store,
    queue: str,
    status: str,
    task: str,
    *,
    query: str = "",
    start: int = 0,
    skip_due: bool = False,
) -> Matching:
    """Ids for an "all matching" action, capped at ALL_MATCHING_LIMIT: the jobs matching
    ``query`` (search.py: at most SEARCH_LIMIT read from rank ``start``), or else of ``task``.

    ``skip_due`` starts after the jobs already due (run-now): those sort first, and making
    them due again would change nothing while the cap hid the ones it should reach.
    """
    if query:
        return _searched_ids(store, queue, status, task, query, start, skip_due)
    start = store.counts(queue, store.server_time())["due"] if skip_due else 0
    if not task:
        ids = store.page_ids(queue, status, start, ALL_MATCHING_LIMIT + 1)
        return Matching(ids[:ALL_MATCHING_LIMIT], len(ids) > ALL_MATCHING_LIMIT, None)
    scan = scan_for_task(store, queue, status, task, start, ALL_MATCHING_LIMIT, ALL_SCAN)
    limited = len(scan.raws) == ALL_MATCHING_LIMIT and scan.more
    searched = scan.end - start if scan.more and not limited else None
    return Matching([raw.id for raw in scan.raws], limited, searched)


def _searched_ids(
    store: Store, queue: str, status: str, task: str, query: str, start: int, skip_due: bool
) -> Matching:
    found = search.search(store, queue, status, query, task, start)
    pairs = found.found
    if skip_due:  # run now: a job due already would not change
        now = ms(store.server_time())
        pairs = [(job_id, score) for job_id, score in pairs if not _due(score, now)]
    ids = [job_id for job_id, _ in pairs]
    limited = len(ids) > ALL_MATCHING_LIMIT
    return Matching(ids[:ALL_MATCHING_LIMIT], limited, found.searched if found.more else None)


def _due(score: object, now: int) -> bool:
    try:
        return float(score) <= now  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False  # no score, or garbage: let run_now.lua decide


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class Applied:
    """What an action did: how many jobs it changed, the ids it missed, and the unique keys of
    the jobs a requeue kept dead because another pending job holds their key."""

    done: int = 0
    missed: list[str] = field(default_factory=list)
    held_keys: list[str] = field(default_factory=list)


def apply_action(
    store: Store, action: Action, queue: str, ids: Sequence[str], delay: float = 0.0
) -> Applied:
    """Run ``action`` on ``ids`` through the store's scripts (``delay``: postpone's, in
    seconds from now)."""
    ids = list(dict.fromkeys(ids))
    applied = Applied()
    if action.name == "cancel":
        return _cancel(store, queue, ids)
    if action.name == "postpone":
        return _postpone(store, queue, ids, delay)
    if action.name == "run_now" and outbox_shown():  # a row run now is relayed, due now
        moved = relaying.run_now(store, queue, ids)
        applied.done += len(moved)
        ids = [i for i in ids if i not in moved]
    method = {"run_now": store.run_now, "requeue": store.requeue, "delete": store.delete_dead}
    held = []
    for chunk in _chunks(ids, ACTION_CHUNK):
        for job_id, changed in zip(chunk, method[action.name](queue, chunk), strict=True):
            if changed is True or changed == 1:
                applied.done += 1
            else:
                applied.missed.append(job_id)
                if changed == 2:  # requeue: another pending job holds its unique key
                    held.append(job_id)
    for job_id in held[:MISSED_CHECKED]:
        raw = store.fetch(queue, job_id)
        applied.held_keys.append(decode_fields(raw.record if raw else None).key or "?")
    applied.held_keys += ["?"] * (len(held) - len(applied.held_keys))
    return applied


def _cancel(store: Store, queue: str, ids: Sequence[str]) -> Applied:
    """Cancel ``ids``: cancel.lua, ACTION_CHUNK per round trip; job_cancelled sent for each
    job cancelled, as django_delayq.cancel() does. With HORIZON on, an id not in Redis may
    be a row of the outbox: cancel_in() looks there. A lost reply (the script may or may
    not have run) is raised once the others are reported."""
    from django_delayq.scheduling.api import announce_cancelled, cancel_in

    applied = Applied()
    errors: list[Exception] = []
    for chunk in _chunks(ids, ACTION_CHUNK):
        ops = [store.cancel_op(queue, job_id, None) for job_id in chunk]
        replies = store.run(ops, budget=API_BUDGET)
        announce_cancelled(queue, [r for r in replies if isinstance(r, tuple)])
        for job_id, reply in zip(chunk, replies, strict=True):
            if isinstance(reply, Exception):
                errors.append(reply)
            elif reply is None:
                applied.missed.append(job_id)
            else:
                applied.done += 1
    if errors:
        raise errors[0]
    if outbox_shown() and applied.missed:
        still = [job_id for job_id in applied.missed if not cancel_in(queue, job_id=job_id)]
        applied.done += len(applied.missed) - len(still)
        applied.missed = still
    return applied


def _postpone(store: Store, queue: str, ids: Sequence[str], delay: float) -> Applied:
    """Make ``ids`` due ``delay`` seconds from now: reschedule.lua, ACTION_CHUNK per round
    trip (each re-sent after a lost reply: it answers the same); an id not in Redis may be
    a row of the outbox (moved as reschedule() moves it); job_rescheduled sent for each job
    moved, as reschedule() does."""
    from django_delayq.scheduling.rescheduling import announce, job_of, move_rows

    applied = Applied()
    for chunk in _chunks(ids, ACTION_CHUNK):
        ops = [store.reschedule_op(queue, job_id, delay=delay) for job_id in chunk]
        for job_id, reply in zip(chunk, store.run(ops, budget=API_BUDGET), strict=True):
            if isinstance(reply, Exception):
                raise reply
            if reply is None:
                applied.missed.append(job_id)
            else:
                applied.done += 1
                announce(job_of(queue, reply))
    if outbox_shown() and applied.missed:
        options = {"delay": delay}
        still = [i for i in applied.missed if move_rows(queue, i, None, options) is None]
        applied.done += len(applied.missed) - len(still)
        applied.missed = still
    return applied


def running_among(store: Store, queue: str, ids: Sequence[str]) -> int:
    """How many of ``ids`` (the first MISSED_CHECKED) a worker is running now."""
    return sum(
        1
        for job_id in ids[:MISSED_CHECKED]
        if (raw := store.fetch(queue, job_id)) is not None and raw.status == RUNNING
    )


def action_message(
    action: Action, done: int, missed: int, running: int = 0, held_keys: Sequence[str] = ()
) -> str:
    """'3 jobs cancelled, 1 is being run by a worker, 1 was already gone.'"""
    parts = [action.done % {"count": done}]
    if running:
        parts.append(
            ngettext(
                "%(count)s is being run by a worker", "%(count)s are being run by a worker", running
            )
            % {"count": running}
        )
    key_held = len(held_keys)
    if key_held:
        shown = ", ".join(held_keys[:3]) + (", …" if key_held > 3 else "")
        parts.append(
            ngettext(
                "%(count)s was kept dead because another pending job holds its unique key "
                "%(keys)s (cancel or run that job first)",
                "%(count)s were kept dead because other pending jobs hold their unique keys "
                "%(keys)s (cancel or run those jobs first)",
                key_held,
            )
            % {"count": key_held, "keys": shown}
        )
    if missed - running - key_held:
        parts.append(action.missed % {"count": missed - running - key_held})
    # Translators: joins the parts of an action's report: "3 jobs cancelled, 1 was already gone"
    separator = pgettext("list separator", ", ")
    # Translators: ends an action's report ("3 jobs cancelled, 1 was already gone.")
    return gettext("%(report)s.") % {"report": separator.join(parts)}
