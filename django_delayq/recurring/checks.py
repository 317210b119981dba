"""System checks of recurring schedules (docs/reference/checks.rst lists them).

delayq.E020  an entry of DELAYQ['SCHEDULES'] is not valid (the message names it and the
             bad value), or SCHEDULES is not a dict
delayq.E021  a schedule of DELAYQ['SCHEDULES'] names a task no @task registered
delayq.E022  RECONCILE_INTERVAL is not a number of seconds from 0.1 to 3600
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, register

from django_delayq.conf import delayq_settings
from django_delayq.recurring import definitions
from django_delayq.recurring.definitions import task_error

__all__ = ["check_schedules", "task_error"]


@register(Tags.compatibility)
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list:
    if not isinstance(delayq_settings.user_settings(), dict):
        return []  # delayq.E006 says so
    found, errors = definitions.from_settings()
    out = [Error(str(error), id="delayq.E020") for error in errors]
    for name, definition in found.items():
        problem = task_error(definition.task)
        if problem:
            out.append(
                Error(
                    f"schedule {name!r} of DELAYQ['SCHEDULES'] runs {definition.task!r}, "
                    f"which is not a task: {problem}",
                    id="delayq.E021",
                )
            )
    interval = delayq_settings.RECONCILE_INTERVAL
    if (
        not isinstance(interval, (int, float))
        or isinstance(interval, bool)
        or not 0.1 <= interval <= 3600
    ):
        out.append(
            Error(
                f"DELAYQ['RECONCILE_INTERVAL'] must be a number of seconds from 0.1 to 3600, "
                f"got {interval!r}.",
                id="delayq.E022",
            )
        )
    return out
