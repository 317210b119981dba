"""System checks of the database outbox (docs/reference/checks.rst lists every id).

delayq.E009 and E010 (settings; no database touched) run with the other settings checks
(``checks.check_settings`` calls :func:`check_outbox_databases`); delayq.E011 and W003 are
deploy checks that ask each database holding rows (``check --deploy --database``).
delayq.W005 (settings; no database touched) runs with the settings checks too
(:func:`check_sqlite_locking`).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections, router

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConfigurationError


def check_outbox_databases() -> list:
    """E009: OUTBOX_DATABASES names databases that exist and may hold the table. E010: the
    alias the routers write the table to (where HORIZON rows go) is one of the outbox's
    databases. Neither touches a database."""
    from django_delayq.outbox import rows as outbox

    named = delayq_settings.OUTBOX_DATABASES
    if named is not None:
        errors = _check_named_databases(named)
        if errors:
            return errors
    routed = outbox.routed_alias()
    held = outbox.aliases()
    if routed in held or not (router.routers or delayq_settings.HORIZON is not None):
        return []
    return [
        Error(
            f"the routers' db_for_write() sends django_delayq.OutboxJob to database {routed!r}, "
            f"which is not one of the outbox's databases {held}: jobs due beyond "
            "DELAYQ['HORIZON'] would be written there and never relayed.",
            hint=f"Add {routed!r} to DELAYQ['OUTBOX_DATABASES'], or route the table's writes "
            "to one of them (never to a read replica).",
            id="delayq.E010",
        )
    ]


def _check_named_databases(named: Any) -> list:
    """E009 for a set OUTBOX_DATABASES: a non-empty list of aliases in DATABASES, each one
    the routers let the outbox table migrate to."""
    from django_delayq.outbox import rows as outbox

    if (
        not isinstance(named, (list, tuple))
        or not named
        or not all(isinstance(a, str) for a in named)
    ):
        return [
            Error(
                "DELAYQ['OUTBOX_DATABASES'] must be None or a non-empty list of database "
                f"aliases, got {named!r}.",
                id="delayq.E009",
            )
        ]
    errors = []
    for alias in named:
        if alias not in connections:
            errors.append(
                Error(
                    f"DELAYQ['OUTBOX_DATABASES'] names database {alias!r}, which is not in "
                    "DATABASES.",
                    hint=f"Databases: {', '.join(connections)}.",
                    id="delayq.E009",
                )
            )
        elif not router.allow_migrate_model(alias, outbox._model()):
            errors.append(
                Error(
                    f"DELAYQ['OUTBOX_DATABASES'] names database {alias!r}, but the routers' "
                    "allow_migrate() keeps the outbox table (django_delayq.OutboxJob) off it.",
                    hint=f"Let the table migrate to {alias!r}, or leave it out of "
                    "OUTBOX_DATABASES.",
                    id="delayq.E009",
                )
            )
    return errors


def check_sqlite_locking() -> list:
    """W005: a SQLite file that may hold outbox rows, without ``"transaction_mode":
    "IMMEDIATE"``. SQLite's default (deferred) transactions take the write lock at their
    first write: one that read first and then writes while another process (the worker's
    relay, a web process) holds the lock fails at once with "database is locked", without
    waiting for the timeout. The outbox's keyed save and the relay read, then write."""
    from django_delayq.outbox import rows as outbox

    try:
        held = [a for a in outbox.aliases() if a in connections]
    except ConfigurationError:
        return []  # delayq.E009 says why
    return [
        warning for alias in held if (warning := sqlite_warning(alias, connections.settings[alias]))
    ]


def sqlite_warning(alias: str, database: dict) -> Warning | None:
    """delayq.W005 for one entry of DATABASES, or None. An in-memory database is one
    process's, so two processes never share its lock."""
    if not str(database.get("ENGINE", "")).endswith("sqlite3"):
        return None
    name = str(database.get("NAME") or ":memory:")
    if name == ":memory:" or "mode=memory" in name:
        return None
    mode = (database.get("OPTIONS") or {}).get("transaction_mode")
    if str(mode).upper() == "IMMEDIATE":
        return None
    return Warning(
        f"database {alias!r} is a SQLite file with deferred transactions (transaction_mode "
        f"{mode!r}): while a worker relays outbox rows, a schedule(..., key=...) that stores a "
        "row there, or a transaction that reads before it schedules, can fail at once with "
        "'database is locked'.",
        hint=f'Add "OPTIONS": {{"transaction_mode": "IMMEDIATE"}} to '
        f"DATABASES[{alias!r}] (Django 5.1+), as Django's SQLite notes advise for "
        "concurrent writers.",
        id="delayq.W005",
    )


@register(Tags.database, deploy=True)
def check_outbox(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list:
    """E011: the outbox table exists where rows are written; W003: every database that may
    hold rows supports transactions. A database that does not answer is not reported here
    (Django's own checks and the first query say so)."""
    from django_delayq.outbox import rows as outbox

    table = outbox._model()._meta.db_table
    try:  # where rows are written and workers relay from (write_alias() is one: E010)
        held = [a for a in outbox.aliases() if a in connections]
    except ConfigurationError:
        return []  # delayq.E009 says why
    # check --database names the ones to look at
    looked_at = [alias for alias in held if databases is None or alias in databases]
    missing = [_table_missing(connections[alias], table) for alias in looked_at]
    plain = [_without_transactions(connections[alias]) for alias in looked_at]
    return [problem for problem in missing + plain if problem is not None]


def _table_missing(connection: Any, table: str) -> Error | None:
    try:
        tables = connection.introspection.table_names()
    except DatabaseError:
        return None
    if table in tables:
        return None
    alias = connection.alias
    return Error(
        f"the outbox table {table!r} is missing from database {alias!r}: "
        "schedule(..., on_commit=True) in a transaction and DELAYQ['HORIZON'] "
        "store jobs there, and workers relay from it.",
        hint=f"Run: python manage.py migrate django_delayq --database {alias}, or "
        "name the databases that hold rows in DELAYQ['OUTBOX_DATABASES'].",
        id="delayq.E011",
    )


def _without_transactions(connection: Any) -> Warning | None:
    try:
        if connection.features.supports_transactions:
            return None
    except DatabaseError:
        return None
    return Warning(
        f"database {connection.alias!r} does not support transactions: a job scheduled with "
        "on_commit=True is stored at once, whether or not the caller's changes commit.",
        hint="Use a transactional engine (InnoDB on MySQL), or leave this "
        "database out of DELAYQ['OUTBOX_DATABASES'] (and the routers' "
        "db_for_write() for django_delayq.OutboxJob).",
        id="delayq.W003",
    )
