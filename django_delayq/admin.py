"""The django-delayq dashboard, inside the Django admin.

The unmanaged :class:`~django_delayq.models.Job` model gives the admin an entry and
the permissions; :class:`JobAdmin` replaces the model's URLs with the dashboard, the
pending / running / dead lists, the job pages, the actions and the purge page:

    <admin>/django_delayq/job/                       dashboard
    <admin>/django_delayq/job/pending/?queue=q       lists (also running/, dead/)
    <admin>/django_delayq/job/<queue>/<job id>/      a job's page
    <admin>/django_delayq/job/find/?q=...            find by id or unique key
    <admin>/django_delayq/job/action/                the actions (POST)
    <admin>/django_delayq/job/purge/?queue=q         purge a queue's dead jobs
    <admin>/django_delayq/job/workers/               the live workers and their jobs

Every path but a job page's has one segment, so no queue name can shadow another page.
Every view runs through ``admin_site.admin_view`` (active staff only, CSRF, never
cached) and checks its own ``django_delayq.*`` permission; every change is a POST, and
cancel and delete (they destroy data) ask on a confirmation page first. What the pages
read and do is in :mod:`django_delayq.admin_views`, their texts in
:mod:`django_delayq.admin_texts`; every text shown goes through Django's translation
functions.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.views.decorators.http import require_POST

from . import admin_texts as texts
from . import admin_views as views
from .admin_texts import STATUS_TITLES, Count
from .admin_workers import worker_rows
from .connection import get_store
from .health import workers_per_queue
from .job import DEAD, PENDING, STATUSES, to_datetime
from .models import Job
from .outbox import count as outbox_count
from .registry import registered
from .store import check_queue_name

URL_PREFIX = "django_delayq_job"


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        number = default
    return min(max(number, low), high)


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """The dashboard and its pages (see the module docstring)."""

    # -- permissions ---------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        # Listed on the admin index only for those who may open it: view_job. (Django
        # would also list it for delete_job alone, and every page would then be a 403.)
        return {
            "add": False,
            "change": False,
            "delete": False,
            "view": self._perm(request, "view_job"),
        }

    def _perm(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def _require(self, request: HttpRequest, codename: str) -> None:
        if not self._perm(request, codename):
            raise PermissionDenied(f"django-delayq: needs the {codename} permission")

    # -- urls and shared context --------------------------------------------

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name=f"{URL_PREFIX}_changelist"),
            path("find/", view(self.find_view), name=f"{URL_PREFIX}_find"),
            path("action/", view(self.action_view), name=f"{URL_PREFIX}_action"),
            path("purge/", view(self.purge_view), name=f"{URL_PREFIX}_purge"),
            path("workers/", view(self.workers_view), name=f"{URL_PREFIX}_workers"),
            *(
                path(
                    f"{status}/",
                    view(self.list_view),
                    {"status": status},
                    name=f"{URL_PREFIX}_{status}",
                )
                for status in STATUSES
            ),
            path(
                "<str:queue>/<str:job_id>/",
                view(self.detail_view),
                name=f"{URL_PREFIX}_detail",
            ),
            # Before 0.2 a job's page was .../job/job/<queue>/<id>/: keep old links working.
            path("job/<str:queue>/<str:job_id>/", view(self.old_detail_view)),
        ]

    def _url(self, name: str, *args: Any, **query: Any) -> str:
        url = reverse(f"{self.admin_site.name}:{URL_PREFIX}_{name}", args=args)
        query = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{url}?{urlencode(query)}" if query else url

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": title,
            "dashboard_url": self._url("changelist"),
            "find_url": self._url("find"),
            "list_urls": [(s, STATUS_TITLES[s], self._url(s)) for s in STATUSES],
            "workers_url": self._url("workers"),
            # Django 6.1's admin has <ol class="breadcrumbs">; earlier ones a <div>.
            "ol_breadcrumbs": django.VERSION >= (6, 1),
            **extra,
        }

    def _render(
        self, request: HttpRequest, template: str, context: dict, status: int = 200
    ) -> TemplateResponse:
        return TemplateResponse(request, f"django_delayq/admin/{template}", context, status=status)

    def _queue(self, name: str | None, queues: list[str]) -> str:
        if not name:
            return queues[0] if queues else check_queue_name("default")
        try:
            return check_queue_name(name)
        except ValueError:
            raise Http404(f"no queue named {name!r}") from None

    def _list_crumb(self, status: str, queue: str) -> tuple[str, str]:
        label = gettext("%(status)s · %(queue)s") % {
            "status": STATUS_TITLES[status],
            "queue": queue,
        }
        return label, self._url(status, queue=queue)

    # -- dashboard -----------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        self._require(request, "view_job")
        store = get_store()
        now = store.server_time()
        served = workers_per_queue(store.live_workers(now))
        summaries = []
        for queue in views.admin_queues(store):
            summary = views.queue_summary(store, queue, now)
            summary["urls"] = {s: self._url(s, queue=queue) for s in STATUSES}
            summary["purge_url"] = self._url("purge", queue=queue)
            summary["workers"] = served.get(queue, 0)  # live workers serving it
            summary["unserved"] = bool(summary["due"]) and not summary["workers"]
            summaries.append(summary)
        context = self._context(
            request,
            gettext("Delayed jobs"),
            crumbs=[(gettext("Dashboard"), "")],
            queues=summaries,
            unserved=[s["name"] for s in summaries if s["unserved"]],
            chart_minutes=views.CHART_MINUTES,
            can_purge=self._perm(request, "delete_job"),
            now=to_datetime(now),
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
            store.live_workers(now, unreadable),
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

    # -- lists -----------------------------------------------------------------

    def list_view(self, request: HttpRequest, status: str) -> HttpResponse:
        self._require(request, "view_job")
        store = get_store()
        queues = views.admin_queues(store)
        queue = self._queue(request.GET.get("queue"), queues)
        if queue not in queues:
            queues.append(queue)
        task = request.GET.get("task", "").strip()[:300]
        per_page = _int(request.GET.get("per_page"), views.PER_PAGE, 1, views.MAX_PER_PAGE)
        now = store.server_time()
        params = {"queue": queue, "task": task}
        if per_page != views.PER_PAGE:
            params["per_page"] = per_page
        total = store.size(queue, status)
        in_database = outbox_count(queue) if status == PENDING and views.outbox_shown() else 0
        context: dict[str, Any] = {"show_where": status == PENDING and views.outbox_shown()}
        if task:
            start = _int(request.GET.get("from"), 0, 0, max(total, 0))
            scan = views.scan_for_task(
                store, queue, status, task, start, per_page, views.SCAN_BUDGET
            )
            raws = scan.raws
            context["scan"] = scan
            context["first_url"] = self._url(status, **params) if start else ""
            context["next_url"] = (
                self._url(status, **params, **{"from": scan.end}) if scan.more else ""
            )
            context["empty"] = texts.EMPTY_TASK_LISTS[status] % {"task": task, "queue": queue}
        else:
            jobs = (
                views.PendingSlice(store, queue, total, in_database)
                if in_database
                else views.SortedSetSlice(store, queue, status, total)
            )
            total += in_database
            paginator = Paginator(jobs, per_page)
            page = paginator.get_page(_int(request.GET.get("p"), 1, 1, 10**9))
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
            context["empty"] = texts.EMPTY_LISTS[status] % {"queue": queue}
        actions = [a for a in views.actions_for(status) if self._perm(request, a.permission)]
        rows = [views.make_row(raw, now) for raw in raws]
        for row in rows:
            row.url = self._url("detail", queue, row.job.id)
        if actions and task:
            every = gettext("every job of this task in %(queue)s (at most %(limit)s)") % {
                "queue": queue,
                "limit": Count(views.ALL_MATCHING_LIMIT),
            }
        elif actions and total > views.ALL_MATCHING_LIMIT:
            every = texts.FIRST_JOBS[status] % {
                "count": Count(total),
                "limit": Count(views.ALL_MATCHING_LIMIT),
                "queue": queue,
            }
        elif actions:
            every = texts.EVERY_JOB[status] % {"count": Count(total), "queue": queue}
        else:
            every = ""
        context.update(
            crumbs=[
                (gettext("Dashboard"), self._url("changelist")),
                (self._list_crumb(status, queue)[0], ""),
            ],
            status=status,
            queue=queue,
            queues=[(q, self._url(status, queue=q, task=task)) for q in queues],
            task=task,
            tasks=sorted(registered()),
            total=total,
            total_text=texts.TOTALS[status] % {"count": Count(total)},
            rows=rows,
            actions=actions,
            every_label=every,
            action_url=self._url("action"),
            next=request.get_full_path(),
            purge_url=self._url("purge", queue=queue)
            if status == DEAD and total and self._perm(request, "delete_job")
            else "",
        )
        title = texts.LIST_TITLES[status] % {"queue": queue}
        return self._render(request, "list.html", self._context(request, title, **context))

    # -- find and detail ---------------------------------------------------------

    def find_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request, "view_job")
        q = request.GET.get("q", "").strip()
        if not q:
            return HttpResponseRedirect(self._url("changelist"))
        store = get_store()
        queues = views.admin_queues(store)
        raw = store.find(q, queues) if len(q) <= 64 else None
        raw = raw or (views.find_in_outbox(q) if len(q) <= 64 else None)
        if raw is not None:
            return HttpResponseRedirect(self._url("detail", raw.queue, raw.id))
        for queue in queues:
            job_id = store.id_for_key(queue, q[:1024])
            if job_id is not None:
                return HttpResponseRedirect(self._url("detail", queue, job_id))
        messages.warning(
            request,
            gettext(
                "No job has the id or unique key “%(query)s” (finished, cancelled, or never "
                "scheduled)."
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
        raw = store.fetch(queue, job_id) or views.find_in_outbox(job_id, queue)
        title = gettext("Job %(id)s") % {"id": job_id}
        context = self._context(request, title, queue=queue, job_id=job_id)
        crumbs = [(gettext("Dashboard"), self._url("changelist"))]
        if raw is None:
            context["list_url"] = self._url(PENDING, queue=queue)
            context["crumbs"] = [*crumbs, (job_id, "")]
            return self._render(request, "detail.html", context, status=404)
        now = store.server_time()
        row = views.make_row(raw, now)
        status = raw.status or ""
        context.update(
            row=row,
            job=row.job,
            status_title=STATUS_TITLES.get(status, status),
            args_json=views.pretty(row.job.args),
            kwargs_json=views.pretty(row.job.kwargs),
            errors=views.detail_errors(row.job),
            actions=[a for a in views.actions_for(status) if self._perm(request, a.permission)],
            action_url=self._url("action"),
            here=request.get_full_path(),
        )
        if status in STATUSES:
            crumbs.append(self._list_crumb(status, queue))
        context["crumbs"] = [*crumbs, (job_id, "")]
        return self._render(request, "detail.html", context)

    # -- actions -----------------------------------------------------------------

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
        # (or select_across); a confirmation page posts action + job_ids + confirmed.
        post = request.POST
        one_action, _, one_id = post.get("one", "").partition(":")
        action = views.ACTIONS.get(one_action or post.get("action", ""))
        if action is None:
            messages.error(request, gettext("Choose an action."))
            return HttpResponseRedirect(self._safe_next(request, self._url("changelist")))
        self._require(request, action.permission)
        store = get_store()
        queue = self._queue(post.get("queue"), views.admin_queues(store))
        fallback = self._url(action.status, queue=queue)
        task = post.get("task", "").strip()[:300]
        confirmed = action.confirm and post.get("confirmed") == "yes"
        across = post.get("select_across") == "1" and not one_action and not confirmed
        capped, searched = False, None
        if confirmed:  # exactly the jobs the confirmation page counted
            ids = post.get("job_ids", "").split()[: views.ALL_MATCHING_LIMIT]
            capped = post.get("capped") == "1"
            searched = _int(post.get("searched"), 0, 0, 10**9) or None
        elif one_action:
            ids = [one_id] if one_id else []
        elif across:
            matching = views.matching_ids(
                store, queue, action.status, task, skip_due=action.name == "run_now"
            )
            ids, capped, searched = matching.ids, matching.limited, matching.searched
        else:
            ids = post.getlist("ids")[: views.MAX_POSTED_IDS]
        if not ids:
            messages.warning(
                request,
                texts.NONE_MATCHED[action.status]
                if across
                else gettext("No jobs were selected: tick the jobs to act on."),
            )
            for warning in self._cap_warnings(action, queue, task, capped, searched):
                messages.warning(request, warning)
            return HttpResponseRedirect(self._safe_next(request, fallback))
        if action.confirm and not confirmed:
            return self._confirm(request, action, queue, ids, task, capped, searched)
        applied = views.apply_action(store, action, queue, ids)
        done, missed = applied.done, applied.missed
        running = views.running_among(store, queue, missed) if action.status == PENDING else 0
        level = messages.SUCCESS if done else messages.WARNING
        messages.add_message(
            request,
            level,
            views.action_message(action, done, len(missed), running, applied.held_keys),
        )
        for warning in self._cap_warnings(action, queue, task, capped, searched):
            messages.warning(request, warning)
        if done and post.get("from_detail"):
            # The job left the page's state (cancelled, deleted, or due now and likely
            # claimed at once): its page would say "No job ...". Show its list instead.
            return HttpResponseRedirect(self._url(action.lands_on, queue=queue))
        return HttpResponseRedirect(self._safe_next(request, fallback))

    @staticmethod
    def _cap_warnings(
        action: views.Action, queue: str, task: str, capped: bool, searched: int | None
    ) -> list[str]:
        out = []
        if capped:
            out.append(texts.STOPPED % {"count": Count(views.ALL_MATCHING_LIMIT)})
        if searched:
            searched_text = texts.SEARCHED[action.status]
            out.append(searched_text % {"count": Count(searched), "queue": queue, "task": task})
        return out

    def _confirm(
        self,
        request: HttpRequest,
        action: views.Action,
        queue: str,
        ids: list[str],
        task: str,
        capped: bool,
        searched: int | None,
    ) -> HttpResponse:
        """The page that asks before a cancel or delete; its form posts the same action
        with the ids it counted and confirmed=yes. Nothing changes until then."""
        store = get_store()
        ids = list(dict.fromkeys(ids))
        shown = views.fetch_rows(store, queue, ids[: views.CONFIRM_SHOWN], store.server_time())
        for _job_id, row in shown:
            if row is not None:
                row.url = self._url("detail", queue, row.job.id)
        count = Count(len(ids))
        back = self._safe_next(request, self._url(action.status, queue=queue))
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
            notes=self._cap_warnings(action, queue, task, capped, searched),
            button=texts.CONFIRM_BUTTONS[action.name] % {"count": count},
            job_ids=" ".join(ids),
            task=task,
            capped=capped,
            searched=searched or "",
            from_detail=request.POST.get("from_detail", ""),
            next=back,
            back_url=back,
            action_url=self._url("action"),
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
