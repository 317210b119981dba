"""The test settings' database router: which aliases the outbox table may migrate to.

While pytest-django migrates the test databases every alias is allowed, so the outbox table
exists on SQLite and on PostgreSQL; after that only "default", unless a test turns PostgreSQL
on (tests/test_outbox.py does). It routes no writes, so ``outbox.aliases()`` (with routers:
the one db_for_write() gives the table) is "default" and tests that never name the "pg" alias
never query it; DELAYQ["OUTBOX_DATABASES"] naming "pg" needs "pg" allowed (delayq.E009)."""

from __future__ import annotations

import sys
from typing import Any


class OutboxDatabases:
    # Aliases besides "default" that may hold rows now. Processes the tests start (workers,
    # producers) never import pytest: their relays leave PostgreSQL alone.
    extra: set[str] = {"pg"} if "pytest" in sys.modules else set()

    def allow_migrate(self, db: str, app_label: str, model_name: Any = None, **hints: Any) -> Any:
        if app_label == "django_delayq" and model_name == "outboxjob" and db != "default":
            return db in self.extra
        return None


class OutboxTo:
    """A router that puts the outbox table's rows on one alias (the one under test; the
    table may migrate where OutboxDatabases says)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_write(self, model: Any, **hints: Any) -> Any:
        from django_delayq.models import OutboxJob

        return self.alias if model is OutboxJob else None

    db_for_read = db_for_write


class OutboxOnly(OutboxTo):
    """A router that puts the outbox table's rows on one alias, the only one it may migrate
    to (a test about that database alone)."""

    def allow_migrate(self, db: str, app_label: str, model_name: Any = None, **hints: Any) -> Any:
        if model_name == "outboxjob":
            return db == self.alias
        return None
