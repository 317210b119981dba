"""The schedules' tables (``Schedule``, ``ScheduleState``): where they are,
and the error a pass, the admin's page or ``delayq_status`` gives while they are not there
yet (:class:`~django_delayq.exceptions.NotMigrated`, naming ``migrate``)."""

from __future__ import annotations

from contextlib import AbstractContextManager

from django_delayq.exceptions import migrated

WHAT = "the recurring schedules (DELAYQ['SCHEDULES'] and the Schedule rows)"


def databases() -> list[str]:
    """The database of the schedules' tables (the routers' choice for their writes)."""
    from django.db import router

    from django_delayq.models import ScheduleState

    return [router.db_for_write(ScheduleState)]


def migrated_tables() -> AbstractContextManager[None]:
    """A context manager: NotMigrated instead of the database's error when a
    table of the schedules (or a column) is missing."""
    return migrated(WHAT, databases)
