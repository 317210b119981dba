"""A read replica beside the outbox's database (issue 17, item 6): the primary/replica router
of Django's multi-db docs, with the replica a TEST MIRROR of the primary (the same database
through another alias) whose connection is read-only, as a hot standby's is. Every outbox
read, count, page, lock and delete happens on the alias that writes (router.db_for_write),
so the replica is never queried: a cancel() does not lock on it, rows are counted, listed
and found once, and a worker's relay reads only the primary. On SQLite and the real
PostgreSQL, over fakeredis and the real Redis. The system checks are in tests/test_checks.py."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.db.backends.signals import connection_created
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_delayq import cancel, get_job
from django_delayq.models import OutboxJob
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.storage import connection
from django_delayq.storage.store import Store
from tests.routers import OutboxDatabases
from tests.testapp import tasks as t

REPLICAS = {"default": "replica", "pg": "pg_replica"}
pytestmark = pytest.mark.django_db(
    transaction=True, databases=["default", "pg", "replica", "pg_replica"]
)


class PrimaryReplicaRouter:
    """Django's multi-db docs' router, for django-delayq's models: reads from the replica,
    writes to the primary, every database may hold every table."""

    def __init__(self, primary: str, replica: str) -> None:
        self.primary, self.replica = primary, replica

    def db_for_read(self, model, **hints):
        return self.replica if model._meta.app_label == "django_delayq" else None

    def db_for_write(self, model, **hints):
        return self.primary if model._meta.app_label == "django_delayq" else None

    def allow_relation(self, obj1, obj2, **hints):
        return True

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return True


def _read_only(conn) -> None:
    with conn.cursor() as cursor:
        if conn.vendor == "sqlite":
            cursor.execute("PRAGMA query_only = ON")
        else:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


def _on_connect(sender, connection, **kwargs) -> None:
    if connection.alias in REPLICAS.values():
        _read_only(connection)


@pytest.fixture(params=["default", "pg"])
def primary(request):
    """The outbox's database (SQLite, then PostgreSQL) routed as the docs' primary, both
    replicas read-only for the test."""
    assert connections[REPLICAS["default"]].vendor == "sqlite"
    assert connections[REPLICAS["pg"]].vendor == "postgresql"
    router = PrimaryReplicaRouter(request.param, REPLICAS[request.param])
    connection_created.connect(_on_connect)
    try:
        for replica in REPLICAS.values():
            _read_only(connections[replica])
        with override_settings(DATABASE_ROUTERS=[router]):
            yield request.param
    finally:
        connection_created.disconnect(_on_connect)
        for replica in REPLICAS.values():
            conn = connections[replica]
            if conn.vendor == "sqlite":  # an in-memory database's connection stays open
                with conn.cursor() as cursor:
                    cursor.execute("PRAGMA query_only = OFF")
            conn.close()
        OutboxJob.objects.using("pg").all().delete()
        OutboxJob.objects.using("default").all().delete()


@pytest.fixture
def horizon(store):
    with override_settings(DELAYQ={**settings.DELAYQ, "HORIZON": 60}):
        connection._stores[(None, False, "default", store.prefix)] = store
        yield 60


@pytest.fixture
def replica_queries():
    """The SQL every replica connection ran during the test (none is the promise)."""
    with ExitStack() as stack:
        seen = [
            stack.enter_context(CaptureQueriesContext(connections[a])) for a in REPLICAS.values()
        ]

        def queries() -> list[str]:
            return [
                q["sql"]
                for ctx in seen
                for q in ctx.captured_queries
                if "PRAGMA" not in q["sql"] and "READ ONLY" not in q["sql"]
            ]

        yield queries


def rows(alias: str) -> list[str]:
    return list(OutboxJob.objects.using(alias).order_by("due_at").values_list("id", flat=True))


def pending_ids(store: Store) -> list[str]:
    return [i.decode() for i in store.client.zrange(store.key("default", "pending"), 0, -1)]


def test_the_replicas_are_read_only_mirrors(primary):
    """The setting under test is what it claims: same rows, no writes through the replica."""
    OutboxJob.objects.using(primary).create(
        id="probe",
        queue="q",
        due_at="2030-01-01T00:00Z",
        relay_at="2030-01-01T00:00Z",
        record=b"{}",
        created_at="2030-01-01T00:00Z",
    )
    replica = REPLICAS[primary]
    assert list(OutboxJob.objects.using(replica).values_list("id", flat=True)) == ["probe"]
    with pytest.raises(Exception, match=r"(?i)read.?only"):
        OutboxJob.objects.using(replica).filter(id="probe").update(queue="r")


def test_outbox_aliases_are_the_write_alias(primary):
    assert outbox.aliases() == [primary] and outbox.write_alias() == primary


def test_cancel_of_a_row_locks_only_the_primary(store, primary, horizon, replica_queries):
    by_id = t.add.schedule(1, 2, delay=3600)
    by_key = t.add.schedule(3, 4, delay=3600, key="order-7")
    assert sorted(rows(primary)) == sorted([by_id.id, by_key.id])
    assert cancel("no-such-job") is False
    assert cancel(by_id.id) is True and cancel(by_id.id) is False
    assert cancel(key="order-7") is True and cancel(key="order-7") is False
    assert rows(primary) == []
    assert replica_queries() == []


def test_cancel_inside_the_primarys_transaction(store, primary, horizon, replica_queries):
    job = t.add.schedule(1, 2, delay=3600)
    with transaction.atomic(using=primary):
        assert cancel(job.id) is True
    assert rows(primary) == [] and pending_ids(store) == []
    assert replica_queries() == []


def test_get_job_finds_a_row_once_on_the_primary(store, primary, horizon, replica_queries):
    job = t.add.schedule(5, 6, delay=3600)
    found = get_job(job.id)
    assert found is not None and found.id == job.id and found.waits_in == "database"
    assert get_job("no-such-job") is None
    assert replica_queries() == []


def test_admin_counts_and_lists_each_row_once(
    store, primary, horizon, admin_client, replica_queries
):
    from django.urls import reverse

    near = t.add.schedule(1, 1, delay=30)
    far = [t.add.schedule(i, i, delay=3600 + i) for i in range(2)]
    response = admin_client.get(reverse("admin:django_delayq_job_pending") + "?queue=default")
    assert response.status_code == 200
    assert response.context["total"] == 3
    assert [row.job.id for row in response.context["rows"]] == [near.id] + [j.id for j in far]
    dashboard = admin_client.get(reverse("admin:django_delayq_job_changelist"))
    (summary,) = [q for q in dashboard.context["queues"] if q["name"] == "default"]
    assert summary["pending"] == 3 and summary["in_database"] == 2
    assert replica_queries() == []


def test_worker_relay_reads_only_the_write_alias(store, primary, horizon, replica_queries):
    jobs = [t.remember.schedule(i, 0, delay=3600) for i in range(3)]
    first = OutboxJob.objects.using(primary).order_by("created_at")[0].created_at
    OutboxJob.objects.using(primary).update(relay_at=first, due_at=first)
    relay = relaying.Relay(store, threading.Event())
    assert relay.turn() == 3  # no error from a read-only replica, nothing relayed twice
    assert relay.turn() == 0
    assert rows(primary) == [] and sorted(pending_ids(store)) == sorted(j.id for j in jobs)
    assert replica_queries() == []


def test_on_commit_to_a_replica_is_refused(store, primary):
    replica = REPLICAS[primary]
    with pytest.raises(ValueError, match=rf"'{replica}'.*OUTBOX_DATABASES"):
        t.add.schedule(1, 2, on_commit=replica)
    with (
        transaction.atomic(using=replica),
        pytest.raises(ValueError, match=rf"'{replica}'.*OUTBOX_DATABASES"),
    ):
        t.add.schedule(1, 2, on_commit=replica)
    assert rows(primary) == [] and pending_ids(store) == []


def test_on_commit_to_the_primary_is_relayed_once(store, primary, replica_queries):
    with transaction.atomic(using=primary):
        job = t.add.schedule(1, 2, delay=30, on_commit=primary)
    assert rows(primary) == [] and pending_ids(store) == [job.id]
    assert replica_queries() == []


# -- outbox.aliases() without a replica router ---------------------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_aliases_without_routers_skip_test_mirrors():
    with override_settings(DATABASE_ROUTERS=[]):
        assert outbox.aliases() == ["default", "pg"]


def test_aliases_with_routers_are_the_write_alias():
    # The test settings' router leaves writes to "default".
    assert outbox.aliases() == ["default"]
    OutboxDatabases.extra = {"pg"}
    try:  # allow_migrate does not widen it: a replica may allow every table too
        assert outbox.aliases() == ["default"]
    finally:
        OutboxDatabases.extra = set()


def test_the_setting_names_the_aliases():
    with override_settings(DELAYQ={**settings.DELAYQ, "OUTBOX_DATABASES": ["pg", "default"]}):
        assert outbox.aliases() == ["pg", "default"]


def test_a_far_job_is_refused_when_the_routers_write_outside_the_outbox_databases(store):
    """delayq.E010's configuration at run time: the row would wait where no relay reads."""
    from django_delayq import ConfigurationError

    delayq = {**settings.DELAYQ, "HORIZON": 60, "OUTBOX_DATABASES": ["pg"]}
    with override_settings(DELAYQ=delayq):
        connection._stores[(None, False, "default", store.prefix)] = store
        with pytest.raises(ConfigurationError, match=r"'default'.*OUTBOX_DATABASES"):
            t.add.schedule(1, 2, delay=3600)
    assert rows("default") == [] and pending_ids(store) == []
