"""System checks of the Sentry settings (the ids are listed in docs/reference/checks.rst).

delayq.E014  SENTRY_FAILURES is not "dead", "all" or None; or SENTRY_CRONS is not False,
             True, a list of schedule names or a dict of name -> options Sentry knows
delayq.W007  SENTRY_CRONS selects schedules but Sentry is not initialised in this process
             (sentry_sdk not installed, or sentry_sdk.init() not called before Django loaded
             its apps): no check-in is sent
delayq.W008  two schedules SENTRY_CRONS selects would check in to one Sentry monitor (the
             same slug, given or made from their names): their check-ins would mix
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register

from django_delayq.conf import delayq_settings
from django_delayq.monitoring.sentry_client import sdk
from django_delayq.monitoring.sentry_crons import problems, slug_clashes

FAILURE_MODES = ("dead", "all", None)


@register(Tags.compatibility)
def check_sentry(app_configs: Any = None, **kwargs: Any) -> list:
    errors: list = []
    mode = delayq_settings.SENTRY_FAILURES
    if mode not in FAILURE_MODES:
        errors.append(
            Error(
                f"DELAYQ['SENTRY_FAILURES'] must be 'dead', 'all' or None, got {mode!r}.",
                hint="'dead': one Sentry event when a job is dead-lettered (the default); "
                "'all': every failed attempt too; None: no events.",
                id="delayq.E014",
            )
        )
    crons = delayq_settings.SENTRY_CRONS
    for problem in problems(crons):
        errors.append(Error(f"DELAYQ['SENTRY_CRONS']: {problem}.", id="delayq.E014"))
    if crons and not errors:
        for slug, names in slug_clashes(crons, delayq_settings.SCHEDULES):
            errors.append(
                Warning(
                    f"DELAYQ['SENTRY_CRONS']: schedules {', '.join(map(repr, names))} would "
                    f"check in to one Sentry monitor, {slug!r}, mixing their check-ins.",
                    hint="give each its own 'slug' in SENTRY_CRONS (a dict of name -> "
                    "{'slug': ...}).",
                    id="delayq.W008",
                )
            )
    if crons and not errors and sdk() is None:
        errors.append(
            Warning(
                "DELAYQ['SENTRY_CRONS'] selects schedules, but Sentry is not initialised in "
                "this process, so no check-in is sent.",
                hint="pip install 'django-delayq[sentry]' and call sentry_sdk.init(...) in "
                "settings.py.",
                id="delayq.W007",
            )
        )
    return errors
