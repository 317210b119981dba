"""The Batches pages of the dashboard (``django_delayq.batch()``): the list of batches
(``<admin>/django_delayq/job/batches/``), a batch's page (``batch/?id=<id>``: its state,
its callbacks, its members) and its cancel page (``cancel-batch/?id=<id>``: a confirmation
page whose POST runs :func:`django_delayq.batches.api.cancel_batch`).

Each path has one segment and takes the batch's id in the query, so no queue name can
shadow them (a job's page has two). Seeing needs ``view_job``; cancelling ``cancel_job``,
like cancelling a job. What the pages read is in :mod:`django_delayq.admin.batch_views`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import NoReverseMatch
from django.utils.translation import gettext, ngettext

from django_delayq.admin import audit as audit
from django_delayq.admin import batch_views as shown
from django_delayq.admin.pages import AdminPages, int_param
from django_delayq.admin.texts import Count
from django_delayq.batches.api import cancel_batch
from django_delayq.storage.connection import get_store
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.store import Store


class BatchPages(AdminPages):
    """The Batches pages of :class:`~django_delayq.admin.dashboard.JobAdmin`."""

    def batches_view(self, request: HttpRequest) -> HttpResponse:
        """The batches, newest first (those of the last 30 days: forwarding.KEEP_LISTED_MS)."""
        self._require(request, "view_job")
        paginator = Paginator(shown.BatchSlice(get_store()), shown.PER_PAGE)
        page = paginator.get_page(int_param(request.GET.get("p"), 1, 1, 10**9))
        rows = list(page.object_list)
        for row in rows:
            row.url = self._url("batch", id=row.id)
        context = self._context(
            request,
            gettext("Batches"),
            crumbs=[(gettext("Dashboard"), self._url("changelist")), (gettext("Batches"), "")],
            batches_page=True,
            rows=rows,
            page=page,
            total=paginator.count,
            total_text=ngettext("%(count)s batch", "%(count)s batches", paginator.count)
            % {"count": Count(paginator.count)},
            **self._page_links(paginator, page, "batches", {}),
        )
        return self._render(request, "batches.html", context)

    def _page_links(
        self, paginator: Paginator, page: Any, name: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        links: dict[str, Any] = {
            "page_links": [
                (n, self._url(name, **params, p=n) if n != paginator.ELLIPSIS else "")
                for n in paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
            ]
        }
        if page.has_previous():
            links["prev_url"] = self._url(name, **params, p=page.previous_page_number())
        if page.has_next():
            links["next_url"] = self._url(name, **params, p=page.next_page_number())
        return links

    def batch_view(self, request: HttpRequest) -> HttpResponse:
        """A batch's state, callbacks and members (404 for a batch Redis does not know)."""
        self._require(request, "view_job")
        batch_id = request.GET.get("id", "").strip()[:64]
        store = get_store()
        fields = store.batches.read(batch_id) if batch_id else None
        crumbs = [
            (gettext("Dashboard"), self._url("changelist")),
            (gettext("Batches"), self._url("batches")),
            (batch_id, ""),
        ]
        title = gettext("Batch %(id)s") % {"id": batch_id}
        context = self._context(request, title, crumbs=crumbs, batches_page=True, batch_id=batch_id)
        if fields is None:
            return self._render(request, "batch.html", context, status=404)
        row = shown.batch_row(batch_id, None, fields)
        assert row.state is not None
        row.callbacks = shown.callback_rows(
            row.state, fields, lambda job_id: self._url("find", q=job_id)
        )
        shown.read_callback_jobs(store, row.callbacks)
        context.update(
            row=row,
            state=row.state,
            can_cancel=row.cancellable and self._perm(request, "cancel_job"),
            cancel_url=self._url("cancel_batch", id=batch_id),
            **self._members(request, store, batch_id),
        )
        return self._render(request, "batch.html", context)

    def _members(self, request: HttpRequest, store: Store, batch_id: str) -> dict[str, Any]:
        """The batch page's members: a page of them, filtered by outcome."""
        count = store.batches.count_members(batch_id)
        found = {"member_count": count, "members_limit": shown.MEMBERS_READ_LIMIT}
        if count > shown.MEMBERS_READ_LIMIT:
            return found
        queues, outcomes = store.batches.outcomes(batch_id)
        rows = shown.member_rows(queues, outcomes)
        counts = shown.outcome_counts(rows)
        filters = [("all", gettext("all"), len(rows))]
        for key, title in shown.OUTCOMES.items():
            filters.append((key or "pending", str(title), counts[key]))
        outcome = request.GET.get("outcome", "all")
        if outcome in shown.OUTCOMES or outcome == "pending":
            wanted = "" if outcome == "pending" else outcome
            rows = [row for row in rows if row.outcome == wanted]
        else:
            outcome = "all"
        params = {"id": batch_id, "outcome": "" if outcome == "all" else outcome}
        paginator = Paginator(rows, shown.MEMBERS_PER_PAGE)
        page = paginator.get_page(int_param(request.GET.get("p"), 1, 1, 10**9))
        for row in page.object_list:  # an ended one's page shows it while it is kept
            row.url = self._job_url(row.queue, row.id)
        found.update(
            members=page.object_list,
            members_page=page,
            outcome=outcome,
            outcome_links=[
                (key, title, Count(number), self._url("batch", id=batch_id, outcome=key))
                for key, title, number in filters
            ],
            **self._page_links(paginator, page, "batch", params),
        )
        return found

    def _job_url(self, queue: str, job_id: str) -> str:
        try:
            return self._url("detail", check_queue_name(queue), job_id)
        except (ValueError, NoReverseMatch):  # garbage in the members' hash
            return ""

    def cancel_batch_view(self, request: HttpRequest) -> HttpResponse:
        """GET: the page that asks; POST (its form, with the CSRF token): cancel the batch."""
        self._require(request, "cancel_job")
        source = request.POST if request.method == "POST" else request.GET
        batch_id = source.get("id", "").strip()[:64]
        batch_url = self._url("batch", id=batch_id)
        store = get_store()
        fields = store.batches.read(batch_id) if batch_id else None
        if fields is None:
            messages.error(request, gettext("No batch %(id)s.") % {"id": batch_id})
            return HttpResponseRedirect(self._url("batches"))
        if request.method == "POST":
            try:
                cancelled = cancel_batch(batch_id)
            except LookupError:  # expired between the read and the cancel
                messages.error(request, gettext("No batch %(id)s.") % {"id": batch_id})
                return HttpResponseRedirect(self._url("batches"))
            audit.log(request.user, "cancel_batch", [(batch_id, f"batch {batch_id}")])
            messages.success(
                request,
                ngettext(
                    "Batch %(id)s cancelled: %(count)s pending member cancelled.",
                    "Batch %(id)s cancelled: %(count)s pending members cancelled.",
                    cancelled,
                )
                % {"id": batch_id, "count": Count(cancelled)},
            )
            return HttpResponseRedirect(batch_url)
        row = shown.batch_row(batch_id, None, fields)
        context = self._context(
            request,
            gettext("Cancel batch %(id)s?") % {"id": batch_id},
            crumbs=[
                (gettext("Dashboard"), self._url("changelist")),
                (gettext("Batches"), self._url("batches")),
                (batch_id, batch_url),
                (gettext("Cancel"), ""),
            ],
            batches_page=True,
            batch_id=batch_id,
            row=row,
            state=row.state,
            batch_url=batch_url,
        )
        return self._render(request, "batch_cancel.html", context)
