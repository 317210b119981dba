"""System checks. Ids are stable; docs/reference/checks.rst lists them all. The ids below
are defined here; the others live beside their feature: the outbox's (E009-E011, W003,
W005) in ``outbox/checks.py``, the recurring schedules' (E020-E022) in
``recurring/checks.py``, the Sentry settings' (E014, W007) in ``monitoring/checks.py``, the
``TASKS`` ones (E101, E102, W101) in ``django_tasks/backend.py``.

delayq.E001  the Redis connection cannot be built from CACHE (missing alias, or not Redis)
delayq.E002  REDIS_URL is not a redis://, rediss:// or unix:// URL
delayq.E003  PREFIX is not a non-empty string without braces
delayq.E004  a number setting has the wrong type or range (numbers must be finite and below
             10**9); CLUSTER, CHECK_NAMES or HISTORY is not a bool
delayq.E005  QUEUES / DEFAULT_QUEUE are not valid queue names
delayq.E006  DELAYQ is not a dict
delayq.E007  METRICS_TOKEN is neither None nor a string of at least 16 characters
delayq.E008  HORIZON is neither None nor a number of seconds >= 5
delayq.E009  OUTBOX_DATABASES is neither None nor a non-empty list of aliases in DATABASES
             that the routers let the outbox table migrate to
delayq.E010  the routers write the outbox table to a database outside the outbox's databases
             (OUTBOX_DATABASES), so rows written there (DELAYQ['HORIZON']) would never be
             relayed
delayq.E011  (deploy, --database) the outbox table (migration django_delayq 0002) is missing
             from a database that holds or relays rows
delayq.E012  an option of a queue in DELAYQ['QUEUES'] (a dict) has a bad value: concurrency
             is neither None nor an int >= 1; finished_max_age / finished_max_count neither
             None nor a number >= 0
delayq.E013  DELAYQ['QUEUES'] (a dict) gives a queue options that are not a dict (or None),
             or an option django-delayq does not know
delayq.W001  DELAYQ has a key django-delayq does not know (a typo?)
delayq.W002  (deploy) Redis does not answer, or is older than 6.2
delayq.W003  (deploy, --database) a database that may hold outbox rows does not support
             transactions, so on_commit=True cannot make a job commit or roll back with the
             caller's data
delayq.W004  (deploy) a queue holds data in the Redis layout of 0.1: run delayq_upgrade
delayq.W005  a SQLite file that may hold outbox rows runs deferred transactions (no
             OPTIONS transaction_mode "IMMEDIATE"): concurrent writers fail at once
delayq.W006  a registered task has a parameter named like an option of schedule() (delay,
             queue, priority...): schedule(task, ..., delay=...) refuses it
delayq.W009  (--database, and migrate) a database the app's tables may migrate to lacks
             some of django_delayq's migrations
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from django_delayq.conf import DEFAULTS, delayq_settings
from django_delayq.conf import queues as queue_settings
from django_delayq.exceptions import ConfigurationError, migrate_command
from django_delayq.outbox.checks import check_outbox_databases, check_sqlite_locking
from django_delayq.scheduling.registry import registered, shadowing
from django_delayq.wording import article, closest

MAXIMUM = 10**9
MIN_TOKEN = 16  # characters of a METRICS_TOKEN, at least
MIN_HORIZON = 5  # seconds: a relay pass runs every second and rows move HORIZON ahead
NUMBERS = {
    # name: (types, minimum, must be above the minimum)
    "VISIBILITY_TIMEOUT": ((int, float), 0, True),
    "MAX_RETRIES": ((int,), 0, False),
    "RETRY_BACKOFF": ((int, float), 0, False),
    "RETRY_BACKOFF_MAX": ((int, float), 0, False),
    "DEAD_MAX_AGE": ((int, float), 0, True),
    "DEAD_MAX_COUNT": ((int,), 0, False),
    "FINISHED_MAX_AGE": ((int, float), 0, False),
    "FINISHED_MAX_COUNT": ((int,), 0, False),
    "MAX_ERRORS_KEPT": ((int,), 1, False),
    "MAX_SLEEP": ((int, float), 0, True),
    "SHUTDOWN_TIMEOUT": ((int, float), 0, False),
}


# The queues the command running the checks will serve (delayq_worker --queues): a queue a
# warning would call unserved is not, in that process.
_serving: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "delayq_serving", default=frozenset()
)


@contextmanager
def serving(queues: Iterable[str]) -> Iterator[None]:
    """Run system checks knowing this process serves ``queues`` (delayq_worker --queues)."""
    reset = _serving.set(frozenset(queues))
    try:
        yield
    finally:
        _serving.reset(reset)


def served(queue: str) -> bool:
    """Whether workers run ``queue`` by default (DELAYQ['QUEUES']) or this process will."""
    return queue in delayq_settings.QUEUES or queue in _serving.get()


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list:
    raw = getattr(settings, "DELAYQ", {})
    if not isinstance(raw, dict):
        return [Error(f"DELAYQ must be a dict, got {type(raw).__name__}.", id="delayq.E006")]
    errors: list = []
    for name in sorted(set(raw) - set(DEFAULTS), key=str):
        meant = closest(name, DEFAULTS) if isinstance(name, str) else None
        errors.append(
            Warning(
                f"DELAYQ[{name!r}] is not a django-delayq setting and is ignored.",
                # the list of every setting only when no one is close (issue 33: it
                # followed each suggestion, 26 names long)
                hint=f"Did you mean {meant!r}?"
                if meant
                else f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="delayq.W001",
            )
        )
    errors += _check_connection()
    errors += _check_prefix()
    errors += _check_numbers()
    errors += _check_token()
    errors += _check_queues()
    errors += _check_horizon()
    errors += check_outbox_databases()
    errors += check_sqlite_locking()
    return errors


def _check_prefix() -> list:
    prefix = delayq_settings.PREFIX
    if isinstance(prefix, str) and prefix and "{" not in prefix and "}" not in prefix:
        return []
    return [
        Error(
            f"DELAYQ['PREFIX'] must be a non-empty string without braces, got {prefix!r}.",
            id="delayq.E003",
        )
    ]


def _check_numbers() -> list:
    """E004: the number settings (NUMBERS) and the two booleans."""
    errors = []
    for name, (types, minimum, strict) in NUMBERS.items():
        value = getattr(delayq_settings, name)
        ok = isinstance(value, types) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and value < MAXIMUM
        ok = ok and (value > minimum if strict else value >= minimum)
        if not ok:
            kind = " or ".join(t.__name__ for t in types)
            bound = ">" if strict else ">="
            errors.append(
                Error(
                    f"DELAYQ[{name!r}] must be a finite {kind} {bound} {minimum} and below "
                    f"{MAXIMUM:.0e}, got {value!r}.",
                    id="delayq.E004",
                )
            )
    age = delayq_settings.FINISHED_MAX_AGE  # a number (else reported above) of 0 ms: none kept
    if type(age) in (int, float) and 0 < age < 0.001:
        errors.append(
            Error(
                f"DELAYQ['FINISHED_MAX_AGE'] must be 0 (keep no finished jobs) or at least "
                f"0.001 (a millisecond), got {age!r}.",
                id="delayq.E004",
            )
        )
    for name in ("CLUSTER", "CHECK_NAMES", "HISTORY"):
        value = getattr(delayq_settings, name)
        if not isinstance(value, bool):
            errors.append(
                Error(f"DELAYQ[{name!r}] must be True or False, got {value!r}.", id="delayq.E004")
            )
    return errors


def _check_token() -> list:
    token = delayq_settings.METRICS_TOKEN
    if token is None or (isinstance(token, str) and len(token) >= MIN_TOKEN):
        return []
    shown = article(type(token).__name__) if not isinstance(token, str) else "too short"
    return [
        Error(
            f"DELAYQ['METRICS_TOKEN'] must be None or a string of at least {MIN_TOKEN} "
            f"characters, got {shown}.",
            hint="Make one with: python -c 'import secrets; print(secrets.token_urlsafe())'",
            id="delayq.E007",
        )
    ]


def _check_horizon() -> list:
    value = delayq_settings.HORIZON
    if value is None:
        return []
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and math.isfinite(value) and MIN_HORIZON <= value < MAXIMUM:
        return []
    return [
        Error(
            f"DELAYQ['HORIZON'] must be None (off) or a number of seconds >= {MIN_HORIZON} and "
            f"below {MAXIMUM:.0e}, got {value!r}.",
            hint="Jobs due later than now + HORIZON wait in the database; a day (86400) suits "
            "reminders scheduled days ahead.",
            id="delayq.E008",
        )
    ]


def _check_connection() -> list:
    url = delayq_settings.REDIS_URL
    if url:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            return [
                Error(
                    "DELAYQ['REDIS_URL'] must be a redis://, rediss:// or unix:// URL, "
                    f"got {url!r}.",
                    id="delayq.E002",
                )
            ]
        return []
    from django_delayq.storage.connection import _cache_client

    alias = delayq_settings.CACHE
    if not isinstance(alias, str) or not alias:
        return [
            Error(
                f"DELAYQ['CACHE'] must be the alias of a Redis cache in CACHES, got {alias!r}.",
                hint="Or set DELAYQ['REDIS_URL'] to a redis:// URL.",
                id="delayq.E001",
            )
        ]
    try:
        _cache_client(delayq_settings.CACHE)  # builds a client; does not connect
    except ConfigurationError as exc:
        return [
            Error(
                str(exc),
                hint=CACHE_HINT,
                id="delayq.E001",
            )
        ]
    return []


# What a project installed from a wheel can do (it has no docs/ folder to look in).
CACHE_HINT = (
    "Add the alias to CACHES with BACKEND 'django.core.cache.backends.redis.RedisCache' "
    "(or django-redis's 'django_redis.cache.RedisCache') and LOCATION "
    "'redis://127.0.0.1:6379/0', or drop DELAYQ['CACHE'] and set DELAYQ['REDIS_URL'] = "
    "'redis://127.0.0.1:6379/0'."
)


def _check_queues() -> list:
    from django_delayq.storage.queues import check_queue_name

    names = delayq_settings.QUEUES
    if not isinstance(names, (list, tuple, dict)) or not names:
        return [
            Error(
                f"DELAYQ['QUEUES'] must be a non-empty list of queue names, or a dict of queue "
                f"name -> options, got {names!r}.",
                id="delayq.E005",
            )
        ]
    errors = [Error(f"{exc}.", id=exc.check_id) for exc in queue_settings.problems()]
    for setting, name in [("DEFAULT_QUEUE", delayq_settings.DEFAULT_QUEUE)] + [
        ("QUEUES", name) for name in names
    ]:
        try:
            check_queue_name(name)
        except ValueError as exc:
            errors.append(Error(f"DELAYQ[{setting!r}]: {exc}.", id="delayq.E005"))
    return errors


@register(Tags.compatibility)
def check_tasks(app_configs: Any = None, **kwargs: Any) -> list:
    """delayq.W006: registered tasks with a parameter named like one of schedule()'s options
    (the apps' tasks.py modules are imported when the checks run)."""
    return [
        Warning(
            f"{shadowing(task.name, name)}.",
            hint=f"Rename the parameter, or schedule {task.name} with .call(...).schedule(...) "
            f"(schedule({task.name}, ..., {name}=...) raises TypeError).",
            id="delayq.W006",
        )
        for task in registered().values()
        for name in sorted(task.shadowed)
    ]


@register(Tags.database, deploy=True)
def check_redis(app_configs: Any = None, **kwargs: Any) -> list:
    from django_delayq.storage.connection import get_store

    try:
        store = get_store()
        info = store.client.info("server")
    except Exception as exc:
        return [Warning(f"django-delayq cannot reach Redis: {exc}", id="delayq.W002")]
    versions = info.get("redis_version", "0") if isinstance(info, dict) else "0"
    major_minor = tuple(int(p) for p in str(versions).split(".")[:2] if p.isdigit())
    if major_minor and major_minor < (6, 2):
        return [
            Warning(
                f"Redis {versions} is older than 6.2, which django-delayq needs.", id="delayq.W002"
            )
        ]
    return []


@register(Tags.database, deploy=True)
def check_layout(app_configs: Any = None, **kwargs: Any) -> list:
    """delayq.W004: a known queue holds 0.1's layout (upgrade.refusal: what a worker refuses
    to start on). Silent when Redis cannot be read: W002 says so."""
    from django_delayq.monitoring.health import iter_known_queues
    from django_delayq.storage.connection import get_store
    from django_delayq.worker.upgrade import refusal

    try:
        store = get_store()
        refused = refusal(store, list(iter_known_queues(store)))
    except Exception:
        return []
    if not refused:
        return []
    return [
        Warning(
            f"django-delayq: {refused}.",
            hint="See docs/howto/upgrading.rst.",
            id="delayq.W004",
        )
    ]


@register(Tags.database)
def check_migrations(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list:
    """delayq.W009: a database named (``check --database``, ``migrate``) that django_delayq's
    tables may migrate to has not applied all of its migrations: the outbox, keyed
    schedules, get_job() misses and the recurring schedules would fail with a missing table.
    A warning, not an error: migrate runs it before it migrates, and an error would stop it.
    Silent for a database that does not answer (Django's own checks say so)."""
    from django.apps import apps
    from django.db import DatabaseError, connections, router
    from django.db.migrations.loader import MigrationLoader

    tables = [m for m in apps.get_app_config("django_delayq").get_models() if m._meta.managed]
    found = []
    for alias in databases or ():
        if alias not in connections or not any(
            router.allow_migrate_model(alias, model) for model in tables
        ):
            continue
        try:
            loader = MigrationLoader(connections[alias], ignore_no_migrations=True)
        except DatabaseError:
            continue
        ours = {key for key in loader.graph.nodes if key[0] == "django_delayq"}
        missing = sorted(name for app, name in ours - set(loader.applied_migrations))
        if missing:
            found.append(
                Warning(
                    f"database {alias!r} lacks {len(missing)} of django_delayq's "
                    f"{len(ours)} migrations ({', '.join(missing)}): until they are applied, "
                    "schedule(on_commit=True), jobs beyond DELAYQ['HORIZON'], keyed "
                    "schedule(), get_job() and cancel() of a job not in Redis, and the "
                    "recurring schedules fail with a missing table or column.",
                    hint=f"Run: {migrate_command(alias)} (migrate shows this warning "
                    "before it applies them).",
                    id="delayq.W009",
                )
            )
    return found
