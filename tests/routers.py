"""The test settings' database router: which aliases may hold outbox rows.

``outbox.aliases()`` asks ``allow_migrate``. While pytest-django migrates the test databases
every alias is allowed, so the outbox table exists on SQLite and on PostgreSQL; after that
only "default", unless a test turns PostgreSQL on (tests/test_outbox.py does), so tests that
never name the "pg" alias never query it."""

from __future__ import annotations

from typing import Any


class OutboxDatabases:
    extra: set[str] = {"pg"}  # aliases besides "default" that may hold rows now

    def allow_migrate(self, db: str, app_label: str, model_name: Any = None, **hints: Any) -> Any:
        if app_label == "django_delayq" and model_name == "outboxjob" and db != "default":
            return db in self.extra
        return None
