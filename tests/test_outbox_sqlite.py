"""The outbox on a SQLite file shared by processes (what the example project runs): a
relay's pass holds the database's write lock, and a producer that must read a row before
it writes (a keyed save, a cancel) waits for it instead of failing at once with "database
is locked" (stop 24's CI failure). delayq.W005 names the case the library cannot cover: a
caller's own deferred transaction that read first.

Each case runs in a fresh interpreter on its own file (the suite's default database is in
memory and one process's), against the real Redis."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings

from django_delayq.outbox.checks import sqlite_warning
from tests.conftest import delete_keys

ROOT = Path(__file__).resolve().parent.parent

# A stand-in for a relay's pass in another process: BEGIN IMMEDIATE holds the write lock
# (as the relay's no-op DELETE does) for a second, then commits.
SCRIPT = textwrap.dedent(
    """
    import sqlite3, sys, threading, time
    from datetime import timedelta
    import tests.settings as s

    path, mode, call = sys.argv[1:4]
    s.DATABASES = {"default": {**s.DATABASES["default"], "OPTIONS": {}}}
    if mode != "deferred":
        s.DATABASES["default"]["OPTIONS"]["transaction_mode"] = mode
    s.DELAYQ = {**s.DELAYQ, "HORIZON": 60}
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django_delayq import cancel, schedule
    from django_delayq.models import OutboxJob
    from tests.testapp import tasks as t

    call_command("migrate", verbosity=0)
    far = timedelta(days=1)  # beyond HORIZON: a row in the outbox
    first = schedule(t.record, "a", "1", key="order:1", delay=far)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    threading.Timer(1.0, holder.execute, ["COMMIT"]).start()
    started = time.monotonic()
    if call == "replace":
        job = schedule(t.record, "a", "2", key="order:1", delay=far, on_conflict="replace")
        assert job.id == first.id, (job.id, first.id)
    elif call == "cancel":
        assert cancel(key="order:1")
    else:  # a caller's transaction that reads, then schedules (on_commit)
        with transaction.atomic():
            OutboxJob.objects.count()
            schedule(t.record, "a", "3", key="order:2", delay=far, on_commit=True)
    print(f"ok after {time.monotonic() - started:.1f} s; rows {OutboxJob.objects.count()}")
    """
)


def run(tmp_path: Path, mode: str, call: str) -> subprocess.CompletedProcess:
    db = tmp_path / "shop.sqlite3"
    prefix = f"dqt-sqlite-{uuid.uuid4().hex[:8]}"
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DELAYQ_TEST_DB": str(db),
        "DELAYQ_PREFIX": prefix,
        "REDIS_URL": settings.REDIS_URL,  # the suite's Redis, not tests.settings' default
        "PATH": "/usr/bin:/bin",
    }
    try:
        return subprocess.run(
            [sys.executable, "-c", SCRIPT, str(db), mode, call],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        with contextlib.closing(redis.Redis.from_url(settings.REDIS_URL)) as client:
            delete_keys(client, prefix)


@pytest.mark.parametrize("call", ["replace", "cancel"])
def test_a_keyed_save_or_cancel_waits_for_a_relay_pass_under_deferred_transactions(tmp_path, call):
    """Django's default (deferred) transactions: the library's own read-then-write takes
    the write lock first, so it waits for the pass and succeeds."""
    done = run(tmp_path, "deferred", call)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok after "), done.stdout
    assert float(done.stdout.split()[2]) >= 0.5  # it waited for the lock; it did not skip


def test_a_callers_reading_transaction_needs_immediate_mode(tmp_path):
    """The case delayq.W005 warns about: a caller's transaction that read first cannot
    wait for the lock under deferred transactions; with transaction_mode IMMEDIATE it does,
    and its job commits with it."""
    for name in ("deferred", "immediate"):
        (tmp_path / name).mkdir()
    deferred = run(tmp_path / "deferred", "deferred", "transaction")
    assert deferred.returncode != 0
    assert "database is locked" in deferred.stderr
    immediate = run(tmp_path / "immediate", "IMMEDIATE", "transaction")
    assert immediate.returncode == 0, immediate.stderr[-3000:]
    assert immediate.stdout.strip().endswith("rows 2"), immediate.stdout


@pytest.mark.parametrize(
    ("database", "warned"),
    [
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/db.sqlite3"}, True),
        (
            {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": "/srv/db.sqlite3",
                "OPTIONS": {"transaction_mode": "DEFERRED"},
            },
            True,
        ),
        (
            {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": "/srv/db.sqlite3",
                "OPTIONS": {"transaction_mode": "IMMEDIATE"},
            },
            False,
        ),
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, False),
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": "file:x?mode=memory"}, False),
        ({"ENGINE": "django.db.backends.postgresql", "NAME": "shop"}, False),
    ],
)
def test_w005_names_a_shared_sqlite_file_without_immediate_transactions(database, warned):
    warning = sqlite_warning("default", database)
    assert (warning is not None) is warned
    if warning is not None:
        assert warning.id == "delayq.W005"
        assert "'default'" in warning.msg and "transaction_mode" in warning.hint
