"""The dashboard's POST side: the action endpoint (``<admin>/django_delayq/job/action/``)
that the lists' and job pages' forms post to, the confirmation page it shows before a
cancel or delete, the purge page of a queue's dead jobs (``purge/``), and the dashboard's
pause and resume buttons (``queue/``, issue 20: the ``pause_queue`` permission).

Every change is a POST, checks the action's own permission, reports what it did
through the messages framework and writes who did it to Django's admin log (one entry per
job changed, :mod:`django_delayq.admin.audit`); cancel, delete and purge destroy data, so
they ask on a confirmation page first. What an action does is in :mod:`django_delayq.admin.actions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from django_delayq.admin import actions as actions
from django_delayq.admin import audit as audit
from django_delayq.admin import search as search
from django_delayq.admin import texts as texts
from django_delayq.admin import views as views
from django_delayq.admin.pages import AdminPages, int_param
from django_delayq.admin.texts import Count
from django_delayq.jobs.job import DEAD, PENDING
from django_delayq.storage.connection import get_store
from django_delayq.storage.store import Store


@dataclass
class Chosen:
    """The jobs a POST acts on, how they were chosen, and what the choice left out."""

    ids: list[str]
    across: bool = False  # "all matching": chosen by the list's filter, not ticked
    confirmed: bool = False  # posted by a confirmation page
    task: str = ""
    query: str = ""  # the list's search (?q=, search.py)
    start: int = 0  # the rank the search started at
    capped: bool = False  # ALL_MATCHING_LIMIT reached
    searched: int | None = None  # the filter stopped after reading this many jobs
    changed: list[str] = field(default_factory=list)  # confirmed, no longer matching


def cap_warnings(action: actions.Action, queue: str, chosen: Chosen) -> list[str]:
    """What an "all matching" action left out: past its cap, past its search, and (once
    confirmed) the jobs that no longer matched."""
    out = []
    if chosen.capped:
        out.append(texts.STOPPED % {"count": Count(actions.ALL_MATCHING_LIMIT)})
    if chosen.searched:
        searched_text = (texts.QUERY_SEARCHED if chosen.query else texts.SEARCHED)[action.status]
        out.append(
            searched_text
            % {
                "count": Count(chosen.searched),
                "queue": queue,
                "task": chosen.task,
                "query": chosen.query,
            }
        )
    if chosen.changed:
        out.append(
            texts.NO_LONGER_MATCHING
            % {"count": Count(len(chosen.changed)), "query": chosen.query or chosen.task}
        )
    return out


def posted_delay(request: HttpRequest) -> float | None:
    """Postpone's delay (seconds) as its confirmation page posts it, None when it is not a
    whole number from 1 to 10000 of one of texts.DELAY_UNITS."""
    amount, unit = request.POST.get("delay_amount", ""), request.POST.get("delay_unit", "")
    if (
        unit not in texts.DELAY_UNITS
        or not (amount.isascii() and amount.isdigit())
        or not 1 <= int(amount) <= 10000
    ):
        return None
    return float(int(amount) * texts.DELAY_UNITS[unit][0])


class ActionPages(AdminPages):
    """The action, confirmation and purge pages of
    :class:`~django_delayq.admin.dashboard.JobAdmin`."""

    @staticmethod
    def _safe_next(request: HttpRequest, fallback: str) -> str:
        target = request.POST.get("next", "")
        allowed = url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        return target if target and allowed else fallback

    def action_view(self, request: HttpRequest) -> HttpResponse:
        return require_POST(self._action)(request)

    def _action(self, request: HttpRequest) -> HttpResponse:
        # A row's own button posts one="<action>:<id>"; the bulk form posts action + ids
        # (or select_across, with the list's task and q); a confirmation page posts action
        # + job_ids + confirmed (and select_across, for jobs a filter chose).
        post = request.POST
        one_action, _, one_id = post.get("one", "").partition(":")
        action = actions.ACTIONS.get(one_action or post.get("action", ""))
        if action is None:
            messages.error(request, gettext("Choose an action."))
            return HttpResponseRedirect(self._safe_next(request, self._url("changelist")))
        self._require(request, action.permission)
        store = get_store()
        queue = self._queue(post.get("queue"), views.admin_queues(store))
        fallback = self._url(action.status, queue=queue)
        chosen = self._chosen(request, store, action, queue, [one_id] if one_action else None)
        if not chosen.ids:
            messages.warning(
                request,
                texts.NONE_MATCHED[action.status]
                if chosen.across
                else gettext("No jobs were selected: tick the jobs to act on."),
            )
            for warning in cap_warnings(action, queue, chosen):
                messages.warning(request, warning)
            return HttpResponseRedirect(self._safe_next(request, fallback))
        delay = posted_delay(request) if action.delay_field else 0.0
        if action.delay_field and chosen.confirmed and delay is None:
            messages.error(request, texts.BAD_DELAY)
            chosen.confirmed = False
        if (action.confirm or chosen.across) and not chosen.confirmed:
            return self._confirm(request, action, queue, chosen)
        return self._apply(request, store, action, queue, chosen, fallback, delay or 0.0)

    def _chosen(
        self,
        request: HttpRequest,
        store: Store,
        action: actions.Action,
        queue: str,
        one: list[str] | None,
    ) -> Chosen:
        """The jobs the POST names: a row's one, the ticked ones, those a confirmation page
        counted (of them, for a filter's, those that still match it), or all matching."""
        post = request.POST
        chosen = Chosen(
            [],
            across=post.get("select_across") == "1" and one is None,
            confirmed=post.get("confirmed") == "yes",
            task=post.get("task", "").strip()[:300],
            query=search.clean_query(post.get("q")),
            start=int_param(post.get("from"), 0, 0, 10**9),
        )
        if chosen.confirmed:  # exactly the jobs the confirmation page counted
            ids = post.get("job_ids", "").split()[: actions.ALL_MATCHING_LIMIT]
            chosen.capped = post.get("capped") == "1"
            chosen.searched = int_param(post.get("searched"), 0, 0, 10**9) or None
            if chosen.across:  # ... that the filter still matches
                args = (store, queue, ids, chosen.query, chosen.task)
                chosen.ids, chosen.changed = search.still_matching(*args)
            else:
                chosen.ids = ids
        elif one is not None:
            chosen.ids = [job_id for job_id in one if job_id]
        elif chosen.across:
            matching = actions.matching_ids(
                store,
                queue,
                action.status,
                chosen.task,
                query=chosen.query,
                start=chosen.start,
                skip_due=action.name == "run_now",
            )
            chosen.ids, chosen.capped, chosen.searched = (
                matching.ids,
                matching.limited,
                matching.searched,
            )
        else:
            chosen.ids = post.getlist("ids")[: actions.MAX_POSTED_IDS]
        return chosen

    def _apply(
        self,
        request: HttpRequest,
        store: Store,
        action: actions.Action,
        queue: str,
        chosen: Chosen,
        fallback: str,
        delay: float = 0.0,
    ) -> HttpResponse:
        """Run the action, log and report what it did (then what the choice left out), go
        back."""
        ids = list(dict.fromkeys(chosen.ids))
        tasks = audit.task_names(store, queue, ids)  # before a cancel or delete removes them
        applied = actions.apply_action(store, action, queue, ids, delay)
        done, missed = applied.done, applied.missed
        left = set(missed)
        changed = ((job_id, tasks.get(job_id, "")) for job_id in ids if job_id not in left)
        audit.log(request.user, action.name, changed)
        running = actions.running_among(store, queue, missed) if action.status == PENDING else 0
        level = messages.SUCCESS if done else messages.WARNING
        messages.add_message(
            request,
            level,
            actions.action_message(action, done, len(missed), running, applied.held_keys),
        )
        for warning in cap_warnings(action, queue, chosen):
            messages.warning(request, warning)
        if done and request.POST.get("from_detail") and not action.delay_field:
            # The job left the page's state (cancelled, deleted, or due now and likely
            # claimed at once): its page would say "No job ...". Show its list instead.
            return HttpResponseRedirect(self._url(action.lands_on, queue=queue))
        return HttpResponseRedirect(self._safe_next(request, fallback))

    def _confirm(
        self, request: HttpRequest, action: actions.Action, queue: str, chosen: Chosen
    ) -> HttpResponse:
        """The page that asks before a cancel or delete, and before any "all matching"
        action; its form posts the same action with the ids it counted and confirmed=yes.
        Nothing changes until then."""
        store = get_store()
        ids = list(dict.fromkeys(chosen.ids))
        shown = views.fetch_rows(store, queue, ids[: actions.CONFIRM_SHOWN], store.server_time())
        for _job_id, row in shown:
            if row is not None:
                row.url = self._url("detail", queue, row.job.id)
        count = Count(len(ids))
        back = self._safe_next(request, self._url(action.status, queue=queue))
        notes = cap_warnings(action, queue, chosen)
        if chosen.across and chosen.query:
            notes.insert(0, texts.CONFIRM_QUERY % {"query": chosen.query})
        context = self._context(
            request,
            texts.CONFIRM_TITLES[action.name] % {"count": count},
            crumbs=[
                (gettext("Dashboard"), self._url("changelist")),
                self._list_crumb(action.status, queue),
                (action.label, ""),
            ],
            action=action,
            queue=queue,
            status=action.status,
            count=count,
            shown=shown,
            more=len(ids) - len(shown),
            warning=texts.CONFIRM_WARNINGS[action.name],
            notes=notes,
            button=texts.CONFIRM_BUTTONS[action.name] % {"count": count},
            job_ids=" ".join(ids),
            chosen=chosen,
            from_detail=request.POST.get("from_detail", ""),
            next=back,
            back_url=back,
            action_url=self._url("action"),
            delay_units=[(value, label) for value, (_, label) in texts.DELAY_UNITS.items()],
            delay_amount=request.POST.get("delay_amount", "1")[:6],
            delay_unit=request.POST.get("delay_unit", "hours"),
        )
        return self._render(request, "action_confirm.html", context)

    def purge_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request, "delete_job")
        source = request.POST if request.method == "POST" else request.GET
        store = get_store()
        queue = self._queue(source.get("queue"), views.admin_queues(store))
        dead_url = self._url(DEAD, queue=queue)
        if request.method == "POST":
            # Only the jobs that had died when the confirmation page was shown.
            try:
                died_before = float(request.POST.get("died_before", ""))
            except ValueError:
                died_before = store.server_time()
            purged = store.purge_dead(queue, died_before=died_before)
            if purged:  # a purge that found nothing changed nothing: not logged
                audit.log(request.user, "purge", [(queue, f"{queue}: {purged}")])
            messages.success(
                request,
                texts.PURGED % {"count": Count(purged), "queue": queue},
            )
            return HttpResponseRedirect(dead_url)
        context = self._context(
            request,
            gettext("Purge the dead jobs of %(queue)s") % {"queue": queue},
            crumbs=[
                (gettext("Dashboard"), self._url("changelist")),
                self._list_crumb(DEAD, queue),
                (gettext("Purge"), ""),
            ],
            queue=queue,
            dead=store.size(queue, DEAD),
            died_before=repr(store.server_time()),
            dead_url=dead_url,
        )
        return self._render(request, "purge_confirm.html", context)

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        """Pause or resume a queue: a POST with the CSRF token, from a user with the
        ``pause_queue`` permission (405 for a GET, 403 without it)."""
        return require_POST(self._pause_or_resume)(request)

    def _pause_or_resume(self, request: HttpRequest) -> HttpResponse:
        self._require(request, "pause_queue")
        store = get_store()
        queue = self._queue(request.POST.get("queue"), [])
        back = self._url("changelist")
        operation = request.POST.get("operation")
        if operation == "pause":
            changed = store.control.pause(queue)
            text = (
                gettext("Queue %(queue)s paused: no job of it is claimed until it is resumed.")
                if changed
                else gettext("Queue %(queue)s was paused already.")
            )
        elif operation == "resume":
            changed = store.control.resume(queue)
            text = (
                gettext("Queue %(queue)s resumed.")
                if changed
                else gettext("Queue %(queue)s was not paused.")
            )
        else:
            messages.error(request, gettext("Choose pause or resume."))
            return HttpResponseRedirect(back)
        if changed:
            audit.log(request.user, operation, [(queue, queue)])
        messages.add_message(
            request, messages.SUCCESS if changed else messages.WARNING, text % {"queue": queue}
        )
        return HttpResponseRedirect(back)
