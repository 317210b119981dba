"""The django-delayq dashboard, inside the Django admin.

The unmanaged :class:`~django_delayq.models.Job` model gives the admin an entry and
the permissions; :class:`JobAdmin` replaces the model's URLs with the dashboard, the
pending / running / dead lists, the job pages, the actions and the purge page:

    <admin>/django_delayq/job/                       dashboard
    <admin>/django_delayq/job/pending/?queue=q       lists (also running/, dead/, finished/;
                                                     &q=... searches them: admin/search.py)
    <admin>/django_delayq/job/<queue>/<job id>/      a job's page
    <admin>/django_delayq/job/find/?q=...            find by id or unique key
    <admin>/django_delayq/job/action/                the actions (POST)
    <admin>/django_delayq/job/purge/?queue=q         purge a queue's dead jobs
    <admin>/django_delayq/job/workers/               the live workers and their jobs
    <admin>/django_delayq/job/batches/               the batches (django_delayq.batch())
    <admin>/django_delayq/job/batch/?id=...          a batch's page
    <admin>/django_delayq/job/cancel-batch/?id=...   cancel a batch (asks first)

Every path but a job page's has one segment, so no queue name can shadow another page.
Every view runs through ``admin_site.admin_view`` (active staff only, CSRF, never
cached) and checks its own ``django_delayq.*`` permission; every change is a POST, and
cancel and delete (they destroy data) ask on a confirmation page first.

This module holds the URL table and the pages that only read: the dashboard, the
Workers tab, find and the job pages. :class:`JobAdmin` inherits the rest:

- :mod:`django_delayq.admin.pages`: the permissions, URLs, context and rendering every
  page shares;
- :mod:`django_delayq.admin.list_pages`: the pending / running / dead lists;
- :mod:`django_delayq.admin.action_pages`: the action endpoint, its confirmation page and
  the purge page;
- :mod:`django_delayq.admin.batch_pages`: the Batches pages.

What the pages read is in :mod:`django_delayq.admin.views`, what the actions do in
:mod:`django_delayq.admin.actions`, their texts in :mod:`django_delayq.admin.texts`;
every text shown goes through Django's translation functions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
)
from django.urls import NoReverseMatch, path
from django.utils.translation import gettext

from django_delayq.admin import actions as actions
from django_delayq.admin import audit as audit
from django_delayq.admin import search as search
from django_delayq.admin import sets as sets
from django_delayq.admin import steer as steer
from django_delayq.admin import timeline as timeline
from django_delayq.admin import views as views
from django_delayq.admin.action_pages import ActionPages
from django_delayq.admin.batch_pages import BatchPages
from django_delayq.admin.batch_views import job_link
from django_delayq.admin.history import history_context
from django_delayq.admin.list_pages import ListPages
from django_delayq.admin.pages import LISTS, URL_PREFIX
from django_delayq.admin.texts import STATUS_TITLES
from django_delayq.admin.workers import attempt_started, worker_rows
from django_delayq.jobs.job import PENDING, RUNNING, STATUSES, to_datetime
from django_delayq.models import Job
from django_delayq.monitoring.health import workers_per_queue
from django_delayq.storage.connection import get_store


@admin.register(Job)
class JobAdmin(ListPages, ActionPages, BatchPages):
    """The dashboard and its pages (see the module docstring)."""

    # -- urls ------------------------------------------------------------------

    def get_urls(self) -> list:
        view = self._view
        return [
            path("", view(self.changelist_view), name=f"{URL_PREFIX}_changelist"),
            path("find/", view(self.find_view), name=f"{URL_PREFIX}_find"),
            path("action/", view(self.action_view), name=f"{URL_PREFIX}_action"),
            path("purge/", view(self.purge_view), name=f"{URL_PREFIX}_purge"),
            path("workers/", view(self.workers_view), name=f"{URL_PREFIX}_workers"),
            path("queue/", view(self.queue_view), name=f"{URL_PREFIX}_queue"),
            path("batches/", view(self.batches_view), name=f"{URL_PREFIX}_batches"),
            path("batch/", view(self.batch_view), name=f"{URL_PREFIX}_batch"),
            path("cancel-batch/", view(self.cancel_batch_view), name=f"{URL_PREFIX}_cancel_batch"),
            *(
                path(
                    f"{status}/",
                    view(self.list_view),
                    {"status": status},
                    name=f"{URL_PREFIX}_{status}",
                )
                for status in LISTS
            ),
            path(
                "<str:queue>/<str:job_id>/",
                view(self.detail_view),
                name=f"{URL_PREFIX}_detail",
            ),
            # Before 0.2 a job's page was .../job/job/<queue>/<id>/: keep old links working.
            path("job/<str:queue>/<str:job_id>/", view(self.old_detail_view)),
        ]

    # -- dashboard -----------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        self._require(request, "view_job")
        store = get_store()
        now = store.server_time()
        served = workers_per_queue(store.roster.live(now))
        summaries = []
        for queue in views.admin_queues(store):
            summary = views.queue_summary(store, queue, now)
            summary["urls"] = {s: self._url(s, queue=queue) for s in LISTS}
            summary["purge_url"] = self._url("purge", queue=queue)
            summary["workers"] = served.get(queue, 0)  # live workers serving it
            summary["unserved"] = bool(summary["due"]) and not summary["workers"]
            summary["unserved"] = summary["unserved"] and not summary["paused"]
            summaries.append(summary)
        context = self._context(
            request,
            gettext("Delayed jobs"),
            crumbs=[(gettext("Dashboard"), "")],
            queues=summaries,
            unserved=[s["name"] for s in summaries if s["unserved"]],
            chart_minutes=views.CHART_MINUTES,
            can_purge=self._perm(request, "delete_job"),
            can_pause=self._perm(request, "pause_queue"),
            queue_url=self._url("queue"),
            now=to_datetime(now),
            **history_context(
                store, [s["name"] for s in summaries], now, request.GET.get("history")
            ),
        )
        return self._render(request, "dashboard.html", context)

    # -- workers ---------------------------------------------------------------

    def workers_view(self, request: HttpRequest) -> HttpResponse:
        """The live workers (the roster, roster.py), each with the jobs it is running."""
        self._require(request, "view_job")
        store = get_store()
        now = store.server_time()

        def job_url(queue: str, job_id: str) -> str:
            try:
                return self._url("detail", queue, job_id)
            except NoReverseMatch:  # an id no URL can carry (garbage in a description)
                return ""

        unreadable: list[str] = []
        rows = worker_rows(
            store,
            store.roster.live(now, unreadable),
            now,
            job_url,
            lambda queue: self._url(PENDING, queue=queue),
        )
        context = self._context(
            request,
            gettext("Workers"),
            crumbs=[(gettext("Dashboard"), self._url("changelist")), (gettext("Workers"), "")],
            workers_page=True,
            rows=rows,
            unreadable=", ".join(sorted(unreadable)),
            unreadable_count=len(unreadable),
            busy=sum(len(r.running) for r in rows),
            now=to_datetime(now),
        )
        return self._render(request, "workers.html", context)

    # -- find and detail ---------------------------------------------------------

    def find_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request, "view_job")
        q = request.GET.get("q", "").strip()
        if not q:
            return HttpResponseRedirect(self._url("changelist"))
        store = get_store()
        queues = views.admin_queues(store)
        raw = store.find(q, queues, finished=True) if len(q) <= 64 else None
        raw = raw or (views.find_in_outbox(q) if len(q) <= 64 else None)
        if raw is not None:
            return HttpResponseRedirect(self._url("detail", raw.queue, raw.id))
        for queue in queues:
            job_id = store.id_for_key(queue, q[:1024])
            if job_id is not None:
                return HttpResponseRedirect(self._url("detail", queue, job_id))
        for queue in queues:  # a finished job's key was freed: its kept record says it
            job_id = search.finished_by_key(store, queue, q[:1024])
            if job_id is not None:
                return HttpResponseRedirect(self._url("detail", queue, job_id))
        messages.warning(
            request,
            gettext(
                "No job has the id or unique key “%(query)s” (it finished and is no longer "
                "kept, was deleted, or was never scheduled)."
            )
            % {"query": q[:200]},
        )
        return HttpResponseRedirect(self._url("changelist"))

    def old_detail_view(self, request: HttpRequest, queue: str, job_id: str) -> HttpResponse:
        self._require(request, "view_job")
        return HttpResponsePermanentRedirect(self._url("detail", self._queue(queue, []), job_id))

    def detail_view(self, request: HttpRequest, queue: str, job_id: str) -> HttpResponse:
        self._require(request, "view_job")
        queue = self._queue(queue, [])
        store = get_store()
        # A finished job kept a while (status None, its kept entry) is shown too.
        raw = store.fetch(queue, job_id, finished=True) or views.find_in_outbox(job_id, queue)
        title = gettext("Job %(id)s") % {"id": job_id}
        context = self._context(request, title, queue=queue, job_id=job_id)
        crumbs = [(gettext("Dashboard"), self._url("changelist"))]
        entries = audit.entries_for(job_id)  # what the admin did to it, and who
        if raw is None:  # the admin log may still say who deleted or cancelled it
            context["list_url"] = self._url(PENDING, queue=queue)
            context["crumbs"] = [*crumbs, (job_id, "")]
            context["timeline"] = timeline.timeline(None, entries)
            return self._render(request, "detail.html", context, status=404)
        now = store.server_time()
        row = views.make_row(raw, now)
        status = row.job.status if raw.status is None else raw.status
        context.update(
            row=row,
            job=row.job,
            status_title=STATUS_TITLES.get(status, ""),  # a damaged kept entry: none
            finished=sets.is_finished(status),
            took=timeline.seconds_text((row.job.last_attempt or {}).get("duration")),
            args_json=views.pretty(row.job.args),
            kwargs_json=views.pretty(row.job.kwargs),
            timeline=timeline.timeline(
                row.job,
                entries,
                attempt_started(store, now, queue, job_id) if status == RUNNING else None,
            ),
            actions=[a for a in actions.actions_for(status) if self._perm(request, a.permission)],
            action_url=self._url("action"),
            here=request.get_full_path(),
            link=job_link(store, raw),  # its batch or chain: one HGET, for a linked job only
            fire_time=row.job.fire_time,  # an occurrence of a recurring schedule
            **steer.fields_shown(store, row.job, raw.record),  # max_wait, group (issue 36)
        )
        if row.job.fire_time is not None:
            context["schedule_name"] = row.job.schedule  # one indexed query
        if context["link"] is not None and context["link"].batch_id:
            context["batch_url"] = self._url("batch", id=context["link"].batch_id)
        if status in STATUSES or sets.is_finished(status):
            crumbs.append(
                self._list_crumb(sets.FINISHED if sets.is_finished(status) else status, queue)
            )
        context["crumbs"] = [*crumbs, (job_id, "")]
        return self._render(request, "detail.html", context)
