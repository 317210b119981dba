"""The django-delayq dashboard, inside the Django admin.

The unmanaged :class:`~django_delayq.models.Job` model gives the admin an entry and
the permissions; :class:`JobAdmin` replaces the model's URLs with the dashboard, the
pending / running / dead lists, the job detail page, the actions and the purge page.
Every view runs through ``admin_site.admin_view`` (active staff only, CSRF, never
cached) and checks its own ``django_delayq.*`` permission; every change is a POST.
What the pages read and do is in :mod:`django_delayq.admin_views`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from . import admin_views as views
from .connection import get_store
from .job import DEAD, PENDING, RUNNING, STATUSES, to_datetime
from .models import Job
from .registry import registered
from .store import check_queue_name

URL_PREFIX = "django_delayq_job"
STATUS_TITLES = {PENDING: "Pending", RUNNING: "In progress", DEAD: "Dead"}


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
            path("purge/<str:queue>/", view(self.purge_view), name=f"{URL_PREFIX}_purge"),
            path(
                "job/<str:queue>/<str:job_id>/",
                view(self.detail_view),
                name=f"{URL_PREFIX}_detail",
            ),
            *(
                path(
                    f"{status}/",
                    view(self.list_view),
                    {"status": status},
                    name=f"{URL_PREFIX}_{status}",
                )
                for status in STATUSES
            ),
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

    # -- dashboard -----------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        self._require(request, "view_job")
        store = get_store()
        now = store.server_time()
        summaries = []
        for queue in views.admin_queues(store):
            summary = views.queue_summary(store, queue, now)
            summary["urls"] = {s: self._url(s, queue=queue) for s in STATUSES}
            summary["purge_url"] = self._url("purge", queue)
            summaries.append(summary)
        context = self._context(
            request,
            "Delayed jobs",
            crumbs=[("Dashboard", "")],
            queues=summaries,
            chart_minutes=views.CHART_MINUTES,
            can_purge=self._perm(request, "delete_job"),
            now=to_datetime(now),
        )
        return self._render(request, "dashboard.html", context)

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
        context: dict[str, Any] = {}
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
        else:
            paginator = Paginator(views.SortedSetSlice(store, queue, status, total), per_page)
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
        actions = [a for a in views.actions_for(status) if self._perm(request, a.permission)]
        rows = [views.make_row(raw, now) for raw in raws]
        for row in rows:
            row.url = self._url("detail", queue, row.job.id)  # type: ignore[attr-defined]
        context.update(
            crumbs=[
                ("Dashboard", self._url("changelist")),
                (f"{STATUS_TITLES[status]} · {queue}", ""),
            ],
            status=status,
            status_title=STATUS_TITLES[status],
            queue=queue,
            queues=[(q, self._url(status, queue=q, task=task)) for q in queues],
            task=task,
            tasks=sorted(registered()),
            total=total,
            rows=rows,
            actions=actions,
            action_url=self._url("action"),
            next=request.get_full_path(),
            all_limit=views.ALL_MATCHING_LIMIT,
            purge_url=self._url("purge", queue)
            if status == DEAD and total and self._perm(request, "delete_job")
            else "",
        )
        title = f"{STATUS_TITLES[status]} jobs in {queue}"
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
        if raw is not None:
            return HttpResponseRedirect(self._url("detail", raw.queue, raw.id))
        for queue in queues:
            job_id = store.id_for_key(queue, q[:1024])
            if job_id is not None:
                return HttpResponseRedirect(self._url("detail", queue, job_id))
        messages.warning(
            request,
            f"No job has the id or unique key “{q[:200]}” (finished, cancelled, or never "
            "scheduled).",
        )
        return HttpResponseRedirect(self._url("changelist"))

    def detail_view(self, request: HttpRequest, queue: str, job_id: str) -> HttpResponse:
        self._require(request, "view_job")
        queue = self._queue(queue, [])
        store = get_store()
        raw = store.fetch(queue, job_id)
        context = self._context(request, f"Job {job_id}", queue=queue, job_id=job_id)
        crumbs = [("Dashboard", self._url("changelist"))]
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
            args_json=views.pretty(row.job.args),
            kwargs_json=views.pretty(row.job.kwargs),
            errors=views.detail_errors(row.job),
            actions=[a for a in views.actions_for(status) if self._perm(request, a.permission)],
            action_url=self._url("action"),
            here=request.get_full_path(),
            list_url=self._url(status, queue=queue) if status in STATUSES else "",
        )
        if status in STATUSES:
            crumbs.append((f"{STATUS_TITLES[status]} · {queue}", context["list_url"]))
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
        # A row's own button posts one="<action>:<id>"; the bulk form posts action + ids.
        one_action, _, one_id = request.POST.get("one", "").partition(":")
        action = views.ACTIONS.get(one_action or request.POST.get("action", ""))
        if action is None:
            messages.error(request, "Choose an action.")
            return HttpResponseRedirect(self._safe_next(request, self._url("changelist")))
        self._require(request, action.permission)
        store = get_store()
        queue = self._queue(request.POST.get("queue"), views.admin_queues(store))
        fallback = self._url(action.status, queue=queue)
        searched = None
        if one_action:
            ids, capped = [one_id] if one_id else [], False
        elif request.POST.get("select_across") == "1":
            task = request.POST.get("task", "").strip()[:300]
            matching = views.matching_ids(
                store, queue, action.status, task, skip_due=action.name == "run_now"
            )
            ids, capped, searched = matching.ids, matching.limited, matching.searched
        else:
            ids, capped = request.POST.getlist("ids")[: views.MAX_POSTED_IDS], False
        if not ids and searched is None:
            across = request.POST.get("select_across") == "1" and not one_action
            messages.warning(
                request,
                f"No {action.status} jobs matched."
                if across
                else "No jobs were selected: tick the jobs to act on.",
            )
            return HttpResponseRedirect(self._safe_next(request, fallback))
        applied = views.apply_action(store, action, queue, ids)
        done, missed = applied.done, applied.missed
        running = views.running_among(store, queue, missed) if action.status == PENDING else 0
        level = messages.SUCCESS if done else messages.WARNING
        messages.add_message(
            request,
            level,
            views.action_message(action, done, len(missed), running, applied.key_held),
        )
        if capped:
            messages.warning(
                request,
                f"Stopped after {views.ALL_MATCHING_LIMIT:,} jobs; run the action again for "
                "the rest.",
            )
        if searched:
            messages.warning(
                request,
                f"Only the first {searched:,} {action.status} jobs of queue {queue} were "
                f"searched for {task}; jobs further back were not touched.",
            )
        target = self._safe_next(request, fallback)
        if done and action.name in ("cancel", "delete") and request.POST.get("from_detail"):
            target = fallback
        return HttpResponseRedirect(target)

    def purge_view(self, request: HttpRequest, queue: str) -> HttpResponse:
        self._require(request, "delete_job")
        queue = self._queue(queue, [])
        store = get_store()
        dead_url = self._url(DEAD, queue=queue)
        if request.method == "POST":
            # Only the jobs that had died when the confirmation page was shown.
            try:
                died_before = float(request.POST.get("died_before", ""))
            except ValueError:
                died_before = store.server_time()
            purged = store.purge_dead(queue, died_before=died_before)
            messages.success(
                request, f"Purged {purged} dead job{'' if purged == 1 else 's'} of queue {queue}."
            )
            return HttpResponseRedirect(dead_url)
        context = self._context(
            request,
            f"Purge the dead jobs of {queue}",
            crumbs=[
                ("Dashboard", self._url("changelist")),
                (f"Dead · {queue}", dead_url),
                ("Purge", ""),
            ],
            queue=queue,
            dead=store.size(queue, DEAD),
            died_before=repr(store.server_time()),
            dead_url=dead_url,
        )
        return self._render(request, "purge_confirm.html", context)
