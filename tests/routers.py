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
