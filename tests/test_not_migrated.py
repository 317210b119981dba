"""Before ``migrate`` (issue 33): what needs django-delayq's tables says so and names the
command to run, instead of a bare ``OperationalError: no such table`` (SQLite) or
``ProgrammingError: relation ... does not exist`` (PostgreSQL): the outbox (on_commit,
HORIZON rows, keyed schedules, get_job() of a job not in Redis), the recurring schedules'
pass, ``delayq_status``'s report, and the admin's Recurring schedules page (a message, not a
500). delayq.W009 (tests/test_checks.py) says it before anything runs.

A test drops the table (or a column) inside its own transaction: the rollback after it puts
it back."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, transaction
from django.test import override_settings
from django.urls import reverse

from django_delayq import DelayQError, NotMigrated, get_job
from django_delayq.exceptions import schema_missing
from django_delayq.models import OutboxJob, Schedule, ScheduleState
from django_delayq.recurring import passes, status
from django_delayq.storage import connection
from django_delayq.worker.duties import DutyLoop
from tests.routers import OutboxDatabases, OutboxTo
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(databases=["default", "pg"])
COMMAND = {"default": "python manage.py migrate", "pg": "migrate django_delayq --database pg"}


@pytest.fixture(params=["default", "pg"])
def alias(request, real_store):
    """The outbox on SQLite, then PostgreSQL, with DELAYQ["HORIZON"] = 60 s."""
    assert (
        connections[request.param].vendor
        == {"default": "sqlite", "pg": "postgresql"}[request.param]
    )
    routers = [OutboxTo(request.param), OutboxDatabases()]
    with (
        override_settings(DATABASE_ROUTERS=routers),
        override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 60}),
    ):
        connection._stores[(None, False, "default", real_store.prefix)] = real_store
        OutboxDatabases.extra = {"pg"}
        try:
            yield request.param
        finally:
            OutboxDatabases.extra = set()


def drop(alias: str, table: str, column: str | None = None) -> None:
    """Drop ``table`` (or its ``column``) in the test's transaction on ``alias``."""
    with connections[alias].cursor() as cursor:
        if column is None:
            cursor.execute(f"DROP TABLE {table}")
        else:
            cursor.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


def refused(alias: str, call) -> NotMigrated:
    """The NotMigrated ``call()`` raises, in a savepoint (PostgreSQL aborts the transaction
    of a failed statement: the test's own goes on)."""
    with pytest.raises(NotMigrated) as raised, transaction.atomic(using=alias):
        call()
    return raised.value


def on_commit(alias: str) -> None:
    with transaction.atomic(using=alias):
        t.add.schedule(1, 2, on_commit=alias)


def beyond_horizon(alias: str) -> None:
    t.add.schedule(1, 2, delay=timedelta(hours=2))


def keyed(alias: str) -> None:
    t.add.schedule(1, 2, key="order:1")  # is a row holding the key?


def not_in_redis(alias: str) -> None:
    get_job("0" * 26)  # is it a row?


@pytest.mark.parametrize(
    ("column", "call"),
    [
        (None, on_commit),
        (None, beyond_horizon),
        (None, keyed),
        (None, not_in_redis),
        ("link", on_commit),  # a later migration's column (0006)
        ("link", beyond_horizon),
    ],
)
def test_the_outbox_s_missing_table_or_column_names_migrate(alias, column, call):
    drop(alias, OutboxJob._meta.db_table, column)
    error = refused(alias, lambda: call(alias))
    text = str(error)
    assert f"database {alias!r} lacks one" in text and COMMAND[alias] in text
    assert text.startswith("the outbox (jobs scheduled with on_commit=True")
    # what the database said is kept, in the text and as the cause
    assert isinstance(error.__cause__, DatabaseError) and str(error.__cause__) in text
    # code that caught the database's error, or ImproperlyConfigured, still does
    assert isinstance(error, DatabaseError) and isinstance(error, ImproperlyConfigured)
    assert isinstance(error, DelayQError)


def test_other_database_errors_are_not_taken_for_a_missing_migration(alias):
    """A database error that is not about a missing table stays what it was."""
    with (
        pytest.raises(DatabaseError) as raised,
        transaction.atomic(using=alias),
        connections[alias].cursor() as cursor,
    ):
        cursor.execute("SELEC 1")
    assert not isinstance(raised.value, NotMigrated) and not schema_missing(raised.value)


def test_the_recurring_pass_names_migrate_and_is_no_redis_outage(real_store, caplog):
    """A worker's recurring pass before migrate: its failure line names the command; the
    error is the database's, so it does not start the worker's Redis outage."""
    caplog.set_level(logging.INFO, logger="django_delayq")
    drop("default", ScheduleState._meta.db_table)
    duty = passes.duty(real_store, None)
    loop = DutyLoop(duty, threading.Event())
    with transaction.atomic():
        assert loop.turn() == passes.DATABASE_RETRY + duty.reconciler.interval
    (line,) = [r.getMessage() for r in caplog.records if r.name == "django_delayq.recurring"]
    assert line.startswith("recurring schedules: the recurring schedules (DELAYQ['SCHEDULES']")
    assert "database 'default' lacks one" in line and "Run: python manage.py migrate" in line
    assert "Redis" not in line.split("(DELAYQ['SCHEDULES']")[0]
    assert loop.backoff.outage.since is None  # not a Redis outage


def test_delayq_status_s_schedules_report_names_migrate(real_store, caplog):
    caplog.set_level(logging.WARNING, logger="django_delayq")
    drop("default", Schedule._meta.db_table)
    with transaction.atomic():
        assert status.safe_report(real_store) == []
    assert "Run: python manage.py migrate" in caplog.text


@pytest.mark.parametrize("method", ["get", "post"])
def test_the_schedules_admin_page_says_to_migrate_instead_of_a_500(admin_client, method):
    """The list (GET), or a new row saved (POST of the add form)."""
    drop("default", Schedule._meta.db_table)
    page = "changelist" if method == "get" else "add"
    data = {"name": "nightly", "task": "tests.testapp.tasks.add", "every": "60"}
    data.update(args="[1, 2]", kwargs="{}", missed="once", enabled="on")
    with transaction.atomic():
        send = getattr(admin_client, method)
        url = reverse(f"admin:django_delayq_schedule_{page}")
        response = send(url, data, follow=True) if method == "post" else send(url, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(reverse("admin:index"), 302)]
    (message,) = [str(m) for m in response.context["messages"]]
    assert "database 'default' lacks one" in message and "python manage.py migrate" in message
    assert "python manage.py migrate" in response.content.decode()
