"""One test per system check id, and one that `manage.py check` runs them."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_delayq.checks import check_migrations, check_redis, check_settings
from django_delayq.outbox.checks import check_outbox


def ids(**delayq):
    with override_settings(DELAYQ=delayq):
        return [e.id for e in check_settings()]


def test_defaults_pass():
    assert ids() == []


def test_e001_cache_is_not_redis():
    with override_settings(DELAYQ={"CACHE": "locmem"}):
        (error,) = check_settings()
    assert error.id == "delayq.E001" and "LocMemCache" in error.msg and "REDIS_URL" in error.msg


def test_e001_missing_cache_alias():
    assert ids(CACHE="nope") == ["delayq.E001"]
    with override_settings(DELAYQ={"CACHE": "nope"}):
        (error,) = check_settings()
    # Issue 26: the hint named docs/tutorial.rst, which a project installed from a wheel
    # does not have; it says what to write instead.
    assert "docs/" not in error.hint
    assert "django.core.cache.backends.redis.RedisCache" in error.hint
    assert "DELAYQ['REDIS_URL'] = 'redis://127.0.0.1:6379/0'" in error.hint


@pytest.mark.parametrize("alias", [5, None, ""])
def test_e001_cache_alias_of_the_wrong_type(alias):
    with override_settings(DELAYQ={"CACHE": alias}):
        (error,) = check_settings()
    assert error.id == "delayq.E001" and "DELAYQ['CACHE']" in error.msg and repr(alias) in error.msg


def test_e002_bad_url():
    assert ids(REDIS_URL="http://x") == ["delayq.E002"]
    assert ids(REDIS_URL="redis://127.0.0.1:6379/1") == []


def test_e003_prefix():
    assert ids(PREFIX="") == ["delayq.E003"]
    assert ids(PREFIX="a{b}") == ["delayq.E003"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("VISIBILITY_TIMEOUT", 0),
        ("VISIBILITY_TIMEOUT", "60"),
        ("MAX_RETRIES", -1),
        ("MAX_RETRIES", 2.5),
        ("RETRY_BACKOFF", -1),
        ("DEAD_MAX_AGE", 0),
        ("DEAD_MAX_COUNT", True),
        ("FINISHED_MAX_AGE", -1),
        ("FINISHED_MAX_AGE", "1h"),
        ("FINISHED_MAX_AGE", 0.0001),  # 0 ms: would keep none, silently
        ("FINISHED_MAX_COUNT", 2.5),
        ("FINISHED_MAX_COUNT", -10),
        ("MAX_ERRORS_KEPT", 0),
        ("MAX_SLEEP", 0),
        ("SHUTDOWN_TIMEOUT", None),
        ("CLUSTER", "yes"),
        ("CHECK_NAMES", 0),
        ("HISTORY", "off"),
        ("HISTORY", None),
    ],
)
def test_e004_numbers(name, value):
    with override_settings(DELAYQ={name: value}):
        (error,) = check_settings()
    assert error.id == "delayq.E004" and name in error.msg and repr(value) in error.msg


def test_keeping_no_finished_job_is_allowed():
    assert ids(FINISHED_MAX_AGE=0, FINISHED_MAX_COUNT=0) == []
    assert ids(FINISHED_MAX_AGE=0.001) == [] and ids(FINISHED_MAX_AGE=0.0) == []


def test_e005_queues():
    assert ids(QUEUES=[]) == ["delayq.E005"]
    assert ids(QUEUES=["ok", "not ok"]) == ["delayq.E005"]
    assert ids(DEFAULT_QUEUE="{x}") == ["delayq.E005"]
    with override_settings(DELAYQ={"QUEUES": ["ok", "not ok"], "DEFAULT_QUEUE": "{x}"}):
        messages = [e.msg for e in check_settings()]
    assert messages[0].startswith("DELAYQ['DEFAULT_QUEUE']: invalid queue name '{x}'")
    assert messages[1].startswith("DELAYQ['QUEUES']: invalid queue name 'not ok'")


def test_e006_not_a_dict():
    with override_settings(DELAYQ=["PREFIX"]):
        assert [e.id for e in check_settings()] == ["delayq.E006"]


@pytest.mark.parametrize("token", ["s3cr3t", 12345678901234567890, b"0123456789abcdefgh"])
def test_e007_metrics_token(token):
    with override_settings(DELAYQ={"METRICS_TOKEN": token}):
        (error,) = check_settings()
    assert error.id == "delayq.E007" and "METRICS_TOKEN" in error.msg
    assert str(token) not in error.msg  # a secret is never printed, even a bad one
    assert ids(METRICS_TOKEN=None) == ids(METRICS_TOKEN="0123456789abcdef") == []


def test_w001_unknown_key():
    with override_settings(DELAYQ={"VISIBLITY_TIMEOUT": 5}):
        (warning,) = check_settings()
    assert warning.id == "delayq.W001" and "VISIBLITY_TIMEOUT" in warning.msg
    # Issue 33: the suggestion alone; the 26 settings only when no one is close
    assert warning.hint == "Did you mean 'VISIBILITY_TIMEOUT'?"


def test_w001_suggests_the_setting_meant():
    """Issue 26: DELAYQ["QUEUE"] warned with the list of settings and no suggestion."""
    with override_settings(DELAYQ={"QUEUE": ["default"], "ZZZ": 1, 5: 1}):
        warnings = check_settings()
    assert [w.id for w in warnings] == ["delayq.W001"] * 3
    assert [w.hint.split("?")[0] for w in warnings if "Did you" in w.hint] == [
        "Did you mean 'QUEUES'"
    ]
    unmatched = [w.hint for w in warnings if "Did you" not in w.hint]
    assert len(unmatched) == 2 and all(h.startswith("Known settings: CACHE, ") for h in unmatched)


def test_w002_redis_unreachable_is_a_deploy_check():
    with override_settings(DELAYQ={"REDIS_URL": "redis://127.0.0.1:1/0"}):
        assert [w.id for w in check_redis()] == ["delayq.W002"]
    assert check_redis() == []


@pytest.mark.parametrize("value", [0, 4.9, -1, "60", True, float("inf"), 10**9])
def test_e008_horizon_invalid(value):
    with override_settings(DELAYQ={"HORIZON": value}):
        (error,) = check_settings()
    assert error.id == "delayq.E008" and "HORIZON" in error.msg and repr(value) in error.msg


def test_e008_horizon_valid():
    assert ids(HORIZON=None) == [] and ids(HORIZON=5) == [] and ids(HORIZON=86400.0) == []


@pytest.mark.django_db(databases=["default", "pg"])
def test_e011_outbox_table_missing_is_a_deploy_check(monkeypatch):
    from django.db import connections

    assert check_outbox() == []
    monkeypatch.setattr(connections["default"].introspection, "table_names", lambda: ["x"])
    (error,) = check_outbox()
    assert error.id == "delayq.E011" and "django_delayq_outbox" in error.msg
    assert "'default'" in error.msg and "migrate django_delayq" in error.hint


@pytest.mark.django_db(databases=["default", "pg"])
def test_w009_a_database_that_lacks_some_of_the_migrations():
    """Issue 33: before migrate, `check` said nothing while schedule(on_commit=True) and the
    schedules page failed with 'no such table'. W009 has the database tag (Django runs it for
    `check --database X`, and in migrate: a warning, so migrate goes on)."""
    from django.core.checks import Tags, registry
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    assert Tags.database in check_migrations.tags
    assert check_migrations in registry.registry.get_checks()  # not a deploy check
    assert check_migrations(databases=["default", "pg"]) == []
    assert check_migrations() == []  # no database named: none looked at
    recorded = MigrationRecorder(connections["pg"]).migration_qs
    recorded.filter(app="django_delayq", name__gte="0004").delete()  # the test's transaction
    (warning,) = check_migrations(databases=["default", "pg"])
    assert warning.id == "delayq.W009" and warning.msg.startswith(
        "database 'pg' lacks 4 of django_delayq's 7 migrations "
        "(0004_schedules, 0005_pause_permission, 0006_outbox_link, 0007_outbox_steering)"
    )
    assert warning.hint.startswith("Run: python manage.py migrate django_delayq --database pg")


@pytest.mark.django_db
def test_w009_runs_with_check_database(capsys):
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    MigrationRecorder(connections["default"]).migration_qs.filter(app="django_delayq").delete()
    call_command("check", databases=["default"])  # a warning: no SystemCheckError
    printed = capsys.readouterr().err
    assert "delayq.W009" in printed and "HINT: Run: python manage.py migrate" in printed


@pytest.mark.django_db(databases=["default", "pg"])
def test_w003_a_database_without_transactions(monkeypatch):
    from django.db import connections

    from tests.routers import OutboxDatabases

    monkeypatch.setattr(OutboxDatabases, "extra", {"pg"})
    monkeypatch.setattr(connections["pg"].features, "supports_transactions", False)
    assert check_outbox() == []  # rows go to "default" only (the routers' db_for_write)
    with override_settings(DELAYQ={"OUTBOX_DATABASES": ["default", "pg"]}):
        (warning,) = check_outbox()
    assert warning.id == "delayq.W003" and "'pg'" in warning.msg


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("default", "'default'"),
        ([], "[]"),
        ([1], "[1]"),
        (["nowhere"], "'nowhere', which is not in DATABASES"),
        (["pg"], "'pg', but the routers' allow_migrate() keeps"),  # tests/routers.py
        (["default", "nowhere"], "'nowhere'"),
    ],
)
def test_e009_outbox_databases(value, shown):
    with override_settings(DELAYQ={"OUTBOX_DATABASES": value}):
        (error,) = check_settings()
    assert error.id == "delayq.E009" and "OUTBOX_DATABASES" in error.msg and shown in error.msg


def test_e009_outbox_databases_valid(monkeypatch):
    from tests.routers import OutboxDatabases

    assert ids(OUTBOX_DATABASES=None) == [] and ids(OUTBOX_DATABASES=["default"]) == []
    monkeypatch.setattr(OutboxDatabases, "extra", {"pg"})
    assert ids(OUTBOX_DATABASES=("pg", "default")) == []


def test_e010_routers_write_the_outbox_outside_the_outbox_databases(monkeypatch):
    from tests.routers import OutboxDatabases

    monkeypatch.setattr(OutboxDatabases, "extra", {"pg"})
    # The test settings' router writes the table to "default".
    with override_settings(DELAYQ={"OUTBOX_DATABASES": ["pg"]}):
        (error,) = check_settings()
    assert error.id == "delayq.E010" and "'default'" in error.msg and "['pg']" in error.msg
    assert "OUTBOX_DATABASES" in error.hint
    # Without routers HORIZON rows go to "default": an error only when HORIZON is on.
    with override_settings(DATABASE_ROUTERS=[]):
        assert ids(OUTBOX_DATABASES=["pg"]) == []
        assert ids(OUTBOX_DATABASES=["pg"], HORIZON=60) == ["delayq.E010"]
        assert ids(OUTBOX_DATABASES=["pg", "default"], HORIZON=60) == []


def test_manage_py_check_runs_them():
    from django.core.management.base import SystemCheckError

    with (
        override_settings(DELAYQ={"MAX_RETRIES": "five"}),
        pytest.raises(SystemCheckError, match=r"delayq\.E004.*MAX_RETRIES"),
    ):
        call_command("check")
    call_command("check")


def test_the_packages_own_tasks_pass_its_task_checks():
    """django-delayq's internal tasks (a batch member's end in the outbox) are registered for
    every project: a check of theirs would show in every ``manage.py check``."""
    from django_delayq.checks import check_tasks
    from django_delayq.scheduling.registry import registered

    own = [name for name in registered() if name.startswith("django_delayq.")]
    assert own, "no internal task registered"
    assert [w for w in check_tasks() if any(name in w.msg for name in own)] == []


@pytest.mark.django_db
def test_outbox_checks_run_with_check_deploy_database(monkeypatch):
    from django.core.management.base import SystemCheckError
    from django.db import connections

    call_command("check", deploy=True, databases=["default"], fail_level="ERROR")
    monkeypatch.setattr(connections["default"].introspection, "table_names", lambda *cursor: [])
    with pytest.raises(SystemCheckError, match=r"delayq\.E011"):
        call_command("check", deploy=True, databases=["default"], fail_level="ERROR")
    assert check_outbox(databases=["pg"]) == []  # only the databases named are looked at


def test_the_migrations_describe_the_models():
    """A model change without its migration (0006 added the outbox's link column) fails
    here, not in a user's `migrate`."""
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("makemigrations", "django_delayq", "--check", "--dry-run", verbosity=0)
    finally:
        connections.close_all()  # it checked every database's history: leave no session open
