"""The test settings' database router: which aliases may hold outbox rows.

``outbox.aliases()`` asks ``allow_migrate``. While pytest-django migrates the test databases
every alias is allowed, so the outbox table exists on SQLite and on PostgreSQL; after that
only "default", unless a test turns PostgreSQL on (tests/test_outbox.py does), so tests that
never name the "pg" alias never query it."""

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
