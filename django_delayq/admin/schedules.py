"""The Schedules page of the admin: recurring schedules stored in the database
(django_delayq.models.Schedule), with their next run, last run and last outcome, enable and
disable, run now, and a form that refuses a bad cron expression, zone or task name with the
error beside the field. Running workers pick up a change within RECONCILE_INTERVAL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_delayq.models import Schedule, ScheduleState
from django_delayq.recurring import definitions
from django_delayq.recurring.checks import task_error
from django_delayq.recurring.times import fire_after


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

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        spec = {
            "task": data.get("task"),
            "args": data.get("args") if data.get("args") is not None else [],
            "kwargs": data.get("kwargs") or {},
            "queue": data.get("queue") or None,
            "tz": data.get("tz") or None,
            "missed": data.get("missed") or "once",
            "enabled": bool(data.get("enabled")),
        }
        if data.get("cron"):
            spec["cron"] = data["cron"]
        if data.get("every") is not None:
            spec["every"] = data["every"]
        try:
            definition = definitions.parse(data.get("name") or "", spec, "database")
        except definitions.ScheduleError as exc:
            message = str(exc).split(": ", 1)[-1] if exc.field and exc.field != "name" else str(exc)
            field = exc.field if exc.field in self.fields else None
            if field == "cron" and "exactly one of" in str(exc):
                field = None
            self.add_error(field, message)
            return data
        problem = task_error(definition.task)
        if problem:
            self.add_error("task", problem)
        if definition.name in (definitions.from_settings()[0]):
            self.add_error("name", "DELAYQ['SCHEDULES'] already has a schedule of this name")
        if definition.cron:
            data["cron"] = definition.cron
        return data


def _when(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ["name", "task", "timing", "enabled", "next_run", "last_run", "last_outcome"]
    list_filter = ["enabled", "missed"]
    search_fields = ["name", "task"]
    actions = ["enable", "disable", "run_now"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        self._states = {s.name: s for s in ScheduleState.objects.all()}
        return queryset

    def _state(self, obj: Schedule) -> ScheduleState | None:
        return getattr(self, "_states", {}).get(obj.name)

    @admin.display(description=_("timing"))
    def timing(self, obj: Schedule) -> str:
        if obj.cron:
            return f"{obj.cron} ({obj.tz or definitions.default_zone()})"
        return f"every {obj.every} s"

    @admin.display(description=_("next run"))
    def next_run(self, obj: Schedule) -> datetime | str | None:
        if not obj.enabled:
            return "-"
        try:
            definition = definitions.parse(obj.name, definitions.row_spec(obj), "database")
        except definitions.ScheduleError as exc:
            return str(exc)
        state = self._state(obj)
        now = int(datetime.now(UTC).timestamp() * 1000)
        floor = max(now, state.since_ms, state.last_fire_ms or 0) if state else now
        return _when(fire_after(definition, floor))

    @admin.display(description=_("last run"))
    def last_run(self, obj: Schedule) -> datetime | None:
        state = self._state(obj)
        return _when(state.last_fire_ms) if state else None

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
        from django_delayq.api import call

        for row in queryset:
            options = {"queue": row.queue} if row.queue else {}
            job = call(row.task, *(row.args or []), **(row.kwargs or {})).schedule(**options)
            self.message_user(
                request, f"{row.name}: job {job.id} of {row.task} scheduled now.", messages.SUCCESS
            )
