"""What every page of the dashboard shares: the permission checks, the URLs of the pages,
the context of the admin's base template, rendering, and reading the queue a page names.

:class:`AdminPages` is the base of :class:`~django_delayq.admin.dashboard.JobAdmin` and of
the classes that give it its list pages (:mod:`django_delayq.admin.list_pages`) and its
action and purge pages (:mod:`django_delayq.admin.action_pages`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

import django
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext

from django_delayq.admin.sets import FINISHED
from django_delayq.admin.texts import STATUS_TITLES
from django_delayq.exceptions import DelayQError
from django_delayq.jobs.job import STATUSES
from django_delayq.storage.queues import check_queue_name

logger = logging.getLogger("django_delayq.admin")

URL_PREFIX = "django_delayq_job"
# The lists, each a tab: the three sets of a queue, then its finished jobs kept a while.
LISTS = (*STATUSES, FINISHED)


def int_param(value: str | None, default: int, low: int, high: int) -> int:
    """A number from a query or form field, ``default`` if it is none, within low..high."""
    try:
        number = int(value) if value is not None else default
    except ValueError:
        number = default
    return min(max(number, low), high)


class AdminPages(admin.ModelAdmin):
    """The permissions and the helpers of the dashboard's pages (not registered itself)."""

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

    def _view(self, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        """``view`` as an admin view whose Redis failing (down, refusing, no answer) gives
        a page saying so, status 503, rather than a server error: the response is rendered
        here, as list pages read Redis while they render. The error is logged."""

        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                response = view(request, *args, **kwargs)
                if isinstance(response, TemplateResponse) and not response.is_rendered:
                    response.render()
                return response
            except DelayQError as exc:
                logger.warning("django-delayq admin: %s %s: %s", request.method, request.path, exc)
                context = self._context(request, gettext("Redis cannot be read"), error=str(exc))
                context["crumbs"] = [(gettext("Dashboard"), self._url("changelist"))]
                return self._render(request, "unavailable.html", context, status=503).render()

        return self.admin_site.admin_view(guarded)

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
            "list_urls": [(s, STATUS_TITLES[s], self._url(s)) for s in LISTS],
            "workers_url": self._url("workers"),
            "batches_url": self._url("batches"),
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
