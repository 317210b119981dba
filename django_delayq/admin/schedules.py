"""The Schedules page of the admin: recurring schedules stored in the database
(django_delayq.models.Schedule), with their next run, last run and last outcome, enable and
disable, run now, and a form that refuses a bad cron expression, zone or task name with the
error beside the field. Running workers pick up a change within RECONCILE_INTERVAL.

Below the rows, the schedules of ``DELAYQ["SCHEDULES"]``, read-only (settings_schedules).
A row whose name the settings use is ignored by workers: its next run says why, and its
last run and outcome stay empty (the recorded state of that name is the settings
schedule's)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_delayq.admin import settings_schedules as shown
from django_delayq.exceptions import NotMigrated
from django_delayq.models import Schedule, ScheduleState
from django_delayq.recurring import definitions
from django_delayq.recurring.tables import migrated_tables


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = [
            "name",
            "task",
            "cron",
            "every",
            "args",
            "kwargs",
            "queue",
            "tz",
            "missed",
            "enabled",
        ]

    # Schedule.clean() refuses a bad row (definitions.check_row); ModelForm calls it.


def breakable(text: str, after: str) -> SafeString:
    """``text`` escaped, with a line break allowed after each ``after`` (a dotted name's
    dots, a zone's slash), so a narrow column wraps there and not inside a word."""
    separator = format_html("{}<wbr>", after)
    return format_html_join(separator, "{}", ((part,) for part in text.split(after)))


def migrated_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``view``'s response, rendered here (a list reads rows while it renders); while the
    schedules' tables are missing (``migrate`` not run), the admin's index with a message
    naming the command to run, not a server error."""

    @wraps(view)
    def page(owner: admin.ModelAdmin, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        try:
            with migrated_tables():
                response = view(owner, request, *args, **kwargs)
                if isinstance(response, TemplateResponse) and not response.is_rendered:
                    response.render()
                return response
        except NotMigrated as exc:
            owner.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(reverse(f"{owner.admin_site.name}:index"))

    return page


def invalid(reason: str) -> str:
    return gettext("invalid: %(reason)s") % {"reason": reason}


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    change_list_template = "django_delayq/admin/schedule_change_list.html"
    list_display = [
        "name",
        "task_name",
        "timing",
        "next_run",  # says "disabled" for a disabled one (the settings' table does too)
        "last_run",
        "last_outcome",
    ]
    list_filter = ["enabled", "missed"]
    search_fields = ["name", "task"]
    actions = ["enable", "disable", "run_now"]

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The list, each row of its page given its recorded state (one query for the page:
        kept on the row objects, which are this request's own, never on this admin, which
        every request shares)."""
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        found = ScheduleState.objects.filter(name__in=[row.name for row in rows])
        states = {state.name: state for state in found}
        for row in rows:
            row.recorded_state = states.get(row.name)
        return changelist

    @migrated_page
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The rows' list (Django's), and under it the settings' schedules: read only for
        a user Django lets see the list (it refuses the others after this)."""
        context = dict(extra_context or {})
        if self.has_view_or_change_permission(request):
            names = list(definitions.from_settings()[0])
            clashing = Schedule.objects.filter(name__in=names).values_list("name", flat=True)
            states = {s.name: s for s in ScheduleState.objects.filter(name__in=names)}
            context.setdefault("settings_schedules", shown.settings_rows(states, set(clashing)))
            context.setdefault("settings_version_differs", shown.workers_version_differs())
            context.setdefault("current_zone", shown.zone_of(None))
        return super().changelist_view(request, context)

    changeform_view = migrated_page(admin.ModelAdmin.changeform_view)

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> list:
        return ["problem"] if obj is not None else []

    def _state(self, obj: Schedule) -> ScheduleState | None:
        """The row's recorded state; none for a row whose name the settings use (the
        state of that name is the settings schedule's, which workers run instead)."""
        if obj.name in definitions.from_settings()[0]:  # parsed once per settings
            return None
        if not hasattr(obj, "recorded_state"):  # not from the list's page
            obj.recorded_state = ScheduleState.objects.filter(name=obj.name).first()
        return obj.recorded_state

    def _check(self, obj: Schedule) -> definitions.Definition | str:
        """The row's Definition, or why workers leave it out or cannot run its task."""
        try:
            return definitions.check_row(obj)
        except definitions.ScheduleError as exc:
            return str(exc)

    @admin.display(description=_("problem"))
    def problem(self, obj: Schedule) -> str:
        """The change page's line: the error workers report for this row (the admin
        escapes it, as every text of a display function)."""
        found = self._check(obj)
        return invalid(found) if isinstance(found, str) else "-"

    @admin.display(description=_("task"), ordering="task")
    def task_name(self, obj: Schedule) -> str:
        """The dotted name, its middle cut when long (whole in the title), so that the
        list fits the window; it may wrap after a dot, never inside a word."""
        short = breakable(shown.short_task(obj.task), ".")
        return format_html('<span class="dq-task" title="{}">{}</span>', obj.task, short)

    @admin.display(description=_("timing"))
    def timing(self, obj: Schedule) -> str:
        if obj.cron:
            zone = breakable(obj.tz or definitions.default_zone(), "/")
            return format_html('{} <span class="dq-zone">({})</span>', obj.cron, zone)
        return gettext("every %(seconds)s s") % {"seconds": obj.every}

    @admin.display(description=_("next run"))
    def next_run(self, obj: Schedule) -> str:
        definition = self._check(obj)
        if isinstance(definition, str):
            return invalid(definition)
        if not obj.enabled:
            return gettext("disabled")
        fire = shown.next_run_ms(definition, self._state(obj), shown.now_ms())
        return self._time(fire, definition)

    @admin.display(description=_("last run"))
    def last_run(self, obj: Schedule) -> str | None:
        state = self._state(obj)
        if state is None or state.last_fire_ms is None:
            return None
        definition = self._check(obj)
        return self._time(state.last_fire_ms, None if isinstance(definition, str) else definition)

    def _time(self, ms: int, definition: definitions.Definition | None) -> str:
        """A fire time in the schedule's zone (settings_schedules.zone_of), its name in the
        title."""
        zone = shown.zone_of(definition)
        return format_html('<span title="{}">{}</span>', zone, shown.schedule_time(ms, zone))

    @admin.display(description=_("last outcome"))
    def last_outcome(self, obj: Schedule) -> str:
        state = self._state(obj)
        return (state.last_outcome if state else "") or "-"

    @admin.action(description=_("Enable the selected schedules"), permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet) -> None:
        for row in queryset:  # save() per row: updated_at, and signals of the model
            row.enabled = True
            row.save()
        self.message_user(request, f"{len(queryset)} schedule(s) enabled.", messages.SUCCESS)

    @admin.action(description=_("Disable the selected schedules"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet) -> None:
        for row in queryset:
            row.enabled = False
            row.save()
        self.message_user(request, f"{len(queryset)} schedule(s) disabled.", messages.SUCCESS)

    @admin.action(
        description=_("Run the selected schedules' task now (once, extra)"), permissions=["change"]
    )
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        """An extra job of the task with the schedule's arguments: not an occurrence, so the
        schedule's own occurrences are untouched. The arguments are data: a Call keeps them
        apart from the options (a kwarg named ``delay`` or ``queue`` is the task's)."""
        from django_delayq.scheduling.api import call

        for row in queryset:
            options = {"queue": row.queue} if row.queue else {}
            job = call(row.task, *(row.args or []), **(row.kwargs or {})).schedule(**options)
            self.message_user(
                request, f"{row.name}: job {job.id} of {row.task} scheduled now.", messages.SUCCESS
            )
