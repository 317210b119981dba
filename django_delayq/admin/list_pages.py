"""The pending, in progress, dead and finished lists of a queue
(``<admin>/django_delayq/job/pending/`` and the others; finished: the jobs kept since they
succeeded or were cancelled, newest first, admin/sets.py): the query a list page is asked
for, its page of jobs (a page of the set; filtered by task, a bounded scan of it; searched,
``?q=``, the matches of a bounded search, :mod:`django_delayq.admin.search`), and the bulk
actions it offers (none on the finished list).

What the rows show is in :mod:`django_delayq.admin.views`; the actions the list's form
posts are served by :mod:`django_delayq.admin.action_pages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext

from django_delayq.admin import actions as actions
from django_delayq.admin import search as search
from django_delayq.admin import sets as sets
from django_delayq.admin import texts as texts
from django_delayq.admin import timeline as timeline
from django_delayq.admin import views as views
from django_delayq.admin.pages import AdminPages, int_param
from django_delayq.admin.texts import Count
from django_delayq.jobs.job import DEAD, PENDING
from django_delayq.outbox.rows import count as outbox_count
from django_delayq.scheduling.registry import registered
from django_delayq.storage.connection import get_store
from django_delayq.storage.reads import RawJob
from django_delayq.storage.store import Store


@dataclass(frozen=True)
class Listing:
    """What a list page was asked for: the set, the queue, the task filter, the page size,
    the search."""

    status: str
    queue: str
    task: str
    per_page: int
    query: str = ""

    def params(self) -> dict[str, Any]:
        """The query that keeps them across the page's links."""
        params: dict[str, Any] = {"queue": self.queue, "task": self.task, "q": self.query}
        if self.per_page != views.PER_PAGE:
            params["per_page"] = self.per_page
        return params


def every_label(listing: Listing, total: int) -> str:
    """The label of the bulk form's "all matching" choice."""
    status, queue = listing.status, listing.queue
    if listing.query:  # total: the matches the search found
        return texts.EVERY_MATCH % {"count": Count(total), "query": listing.query}
    if listing.task:
        return gettext("every job of this task in %(queue)s (at most %(limit)s)") % {
            "queue": queue,
            "limit": Count(actions.ALL_MATCHING_LIMIT),
        }
    if total > actions.ALL_MATCHING_LIMIT:
        return texts.FIRST_JOBS[status] % {
            "count": Count(total),
            "limit": Count(actions.ALL_MATCHING_LIMIT),
            "queue": queue,
        }
    return texts.EVERY_JOB[status] % {"count": Count(total), "queue": queue}


class ListPages(AdminPages):
    """The list pages of :class:`~django_delayq.admin.dashboard.JobAdmin`."""

    def list_view(self, request: HttpRequest, status: str) -> HttpResponse:
        self._require(request, "view_job")
        store = get_store()
        queues = views.admin_queues(store)
        queue = self._queue(request.GET.get("queue"), queues)
        if queue not in queues:
            queues.append(queue)
        task = request.GET.get("task", "").strip()[:300]
        per_page = int_param(request.GET.get("per_page"), views.PER_PAGE, 1, views.MAX_PER_PAGE)
        query = search.clean_query(request.GET.get("q"))
        listing = Listing(status, queue, task, per_page, query)
        now = store.server_time()
        total = sets.size(store, queue, status)
        in_database = outbox_count(queue) if status == PENDING and views.outbox_shown() else 0
        context: dict[str, Any] = {"show_where": status == PENDING and views.outbox_shown()}
        purge = status == DEAD and total and self._perm(request, "delete_job")
        if query:
            raws = self._search_page(request, store, listing, total, context)
            total = len(context["search"].found)
        elif task:
            raws = self._task_page(request, store, listing, total, context)
        else:
            raws = self._page(request, store, listing, total, in_database, context)
            total += in_database
        offered = [a for a in actions.actions_for(status) if self._perm(request, a.permission)]
        rows = [views.make_row(raw, now) for raw in raws]
        for row in rows:
            row.url = self._url("detail", queue, row.job.id)
            if row.job.last_attempt:  # a job that succeeded: its last attempt's run time
                row.took = timeline.seconds_text(row.job.last_attempt["duration"])
        context.update(
            crumbs=[
                (gettext("Dashboard"), self._url("changelist")),
                (self._list_crumb(status, queue)[0], ""),
            ],
            status=status,
            queue=queue,
            queues=[(q, self._url(status, queue=q, task=task)) for q in queues],
            task=task,
            query=query,
            tasks=sorted(registered()),
            total=total,
            total_text=(texts.MATCH_TOTALS if query else texts.TOTALS[status])
            % {"count": Count(total)},
            order_text=texts.ORDERS[status],
            order_more=texts.OUTBOX_LAST if context["show_where"] else "",
            rows=rows,
            actions=offered,
            every_label=every_label(listing, total) if offered else "",
            action_url=self._url("action"),
            next=request.get_full_path(),
            purge_url=self._url("purge", queue=queue) if purge else "",
        )
        title = texts.LIST_TITLES[status] % {"queue": queue}
        return self._render(request, "list.html", self._context(request, title, **context))

    def _task_page(
        self,
        request: HttpRequest,
        store: Store,
        listing: Listing,
        total: int,
        context: dict[str, Any],
    ) -> list[RawJob]:
        """The jobs of one task, scanned from rank ``from`` on; its links go on in the scan."""
        status, params = listing.status, listing.params()
        start = int_param(request.GET.get("from"), 0, 0, max(total, 0))
        scan = views.scan_for_task(
            store, listing.queue, status, listing.task, start, listing.per_page, views.SCAN_BUDGET
        )
        context["scan"] = scan
        context["first_url"] = self._url(status, **params) if start else ""
        context["next_url"] = self._url(status, **params, **{"from": scan.end}) if scan.more else ""
        context["empty"] = texts.EMPTY_TASK_LISTS[status] % {
            "task": listing.task,
            "queue": listing.queue,
        }
        return scan.raws

    def _page(
        self,
        request: HttpRequest,
        store: Store,
        listing: Listing,
        in_redis: int,
        in_database: int,
        context: dict[str, Any],
    ) -> list[RawJob]:
        """Page ``p`` of the set (pending: of Redis, then of the database outbox)."""
        status, queue, params = listing.status, listing.queue, listing.params()
        jobs = (
            views.PendingSlice(store, queue, in_redis, in_database)
            if in_database
            else views.SortedSetSlice(store, queue, status, in_redis)
        )
        raws = self._paginate(request, jobs, listing, params, context)
        context["empty"] = texts.EMPTY_LISTS[status] % {"queue": queue}
        return raws

    def _paginate(
        self,
        request: HttpRequest,
        jobs: Any,
        listing: Listing,
        params: dict[str, Any],
        context: dict[str, Any],
    ) -> list[RawJob]:
        """Page ``p`` of ``jobs`` (a lazy sequence), its links keeping ``params``."""
        status = listing.status
        paginator = Paginator(jobs, listing.per_page)
        page = paginator.get_page(int_param(request.GET.get("p"), 1, 1, 10**9))
        raws = list(page.object_list)
        context["page"] = page
        context["page_links"] = [
            (n, self._url(status, **params, p=n) if n != paginator.ELLIPSIS else "")
            for n in paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
        ]
        if page.has_previous():
            context["prev_url"] = self._url(status, **params, p=page.previous_page_number())
        if page.has_next():
            context["next_url"] = self._url(status, **params, p=page.next_page_number())
        return raws

    def _search_page(
        self,
        request: HttpRequest,
        store: Store,
        listing: Listing,
        total: int,
        context: dict[str, Any],
    ) -> list[RawJob]:
        """A page of the jobs matching ``q``, of a search from rank ``from`` (search.py:
        it reads at most SEARCH_LIMIT jobs; its links go on from where it stopped)."""
        status, queue, params = listing.status, listing.queue, listing.params()
        start = int_param(request.GET.get("from"), 0, 0, max(total, 0))
        found = search.search(store, queue, status, listing.query, listing.task, start)
        jobs = search.Found(store, queue, status, found.found)
        raws = self._paginate(request, jobs, listing, {**params, "from": start or None}, context)
        limit = Count(search.SEARCH_LIMIT)
        context.update(
            search=found,
            start=start,
            matches_text=texts.MATCHES % {"count": Count(len(found.found)), "query": found.query},
            searched_text=searched_text(found, status),
            window_url=self._url(status, **params, **{"from": found.end}) if found.more else "",
            window_label=texts.SEARCH_NEXT % {"count": limit},
            first_window_url=self._url(status, **params) if start else "",
            elsewhere=[
                (texts.ELSEWHERE[shown] % {"id": raw.id}, self._url("detail", queue, raw.id))
                for raw in found.elsewhere
                if (shown := sets.list_of(raw)) in texts.ELSEWHERE
            ],
            empty=texts.MATCHES % {"count": Count(0), "query": found.query},
        )
        return raws


def searched_text(found: search.Search, status: str) -> str:
    """How much of the set a search read: all of it, the first N of M, or a window."""
    values = {
        "count": Count(found.total),
        "searched": Count(found.searched),
        "limit": Count(search.SEARCH_LIMIT),
        "first": Count(found.start + 1),
        "last": Count(found.end),
    }
    if found.start:
        return texts.SEARCHED_RANKS % values
    if found.more:
        return texts.SEARCHED_FIRST[status] % values
    return texts.SEARCHED_ALL[status] % values
