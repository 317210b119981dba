"""Which databases hold the outbox's rows (``models.OutboxJob``): the aliases every read,
lock, relay and delete of rows uses, the one a row beyond the horizon is written to, and the
check of an ``on_commit=`` alias. Reads the settings and the routers, never the table
(rows.py does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import connections, router

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConfigurationError

if TYPE_CHECKING:
    from django_delayq.models import OutboxJob


def model() -> type[OutboxJob]:
    """The model, imported on first use (the package is imported before the app registry
    is ready: django_delayq/__init__.py imports the API)."""
    from django_delayq.models import OutboxJob

    return OutboxJob


def aliases() -> list[str]:
    """The database aliases that hold outbox rows. Every read, count, lock, relay and delete
    of rows happens on these and nowhere else, so a read replica is never asked (its rows
    are the primary's, and it refuses locks). ``DELAYQ["OUTBOX_DATABASES"]`` when set; else,
    with DATABASE_ROUTERS, the alias the routers' db_for_write() gives the table (a replica
    may let every table migrate to it, so allow_migrate cannot tell it from a primary);
    else every alias the table may migrate to but TEST MIRROR ones (another's database)."""
    named = delayq_settings.OUTBOX_DATABASES
    if named is not None:
        if not isinstance(named, (list, tuple)) or not all(isinstance(a, str) for a in named):
            raise ConfigurationError(
                "DELAYQ['OUTBOX_DATABASES'] must be None or a list of database aliases, got "
                f"{named!r}."
            )
        return list(named)
    if router.routers:
        return [router.db_for_write(model())]
    return [
        a
        for a in connections
        if not connections.settings[a].get("TEST", {}).get("MIRROR")
        and router.allow_migrate_model(a, model())
    ]


def routed_alias() -> str:
    """The alias the routers' db_for_write() gives the outbox table ("default" without
    routers)."""
    return router.db_for_write(model())


def write_alias() -> str:
    """Where a HORIZON row scheduled outside on_commit goes: the routers' choice, which
    must be one of :func:`aliases` (no relay would read a row elsewhere; delayq.E010)."""
    alias = routed_alias()
    held = aliases()
    if alias not in held:
        raise ConfigurationError(
            f"the routers write django_delayq.OutboxJob to database {alias!r}, which is not "
            f"one of the outbox's databases {held}: add {alias!r} to "
            "DELAYQ['OUTBOX_DATABASES'], or route the table's writes to one of them."
        )
    return alias


def check_on_commit(alias: str, on_commit: bool | str) -> None:
    """ValueError unless ``alias``, the database whose transaction
    ``schedule(on_commit=...)`` joins, is one of :func:`aliases` (no relay would read a
    row written elsewhere, and a read replica refuses it)."""
    held = aliases()
    if alias not in held:
        raise ValueError(
            f"schedule(on_commit={on_commit!r}) writes its row to database {alias!r}, which is "
            f"not one of the outbox's databases {held} (a read replica, or a database no "
            f"relay reads): pass on_commit= one of them, or list {alias!r} in "
            "DELAYQ['OUTBOX_DATABASES']."
        )
