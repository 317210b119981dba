from __future__ import annotations

import contextlib
import uuid
from datetime import datetime

import fakeredis
import pytest
import redis
from django.conf import settings
from django.test import override_settings

from django_delayq.outbox import relay as relaying
from django_delayq.storage import connection
from django_delayq.storage.store import Store
from tests.testapp import tasks as testtasks


def real_redis() -> redis.Redis:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:  # fail loudly: never skip
        pytest.fail(
            f"the test suite needs a real Redis at {settings.REDIS_URL} ({exc}); start one with "
            "redis-server --daemonize yes --port 6379 --bind 127.0.0.1 --save ''"
        )
    return client


def pytest_configure(config):
    """Every run sets up the "default" test database, even one whose collected tests carry
    no django_db mark (a single file of the reliability suite): get_job() and the keyed
    schedule() read the outbox table there (outbox_reads below). pytest-django sets up only
    the databases the collected tests' marks name, through this function."""
    import pytest_django.fixtures

    marked = pytest_django.fixtures._get_databases_for_setup

    def with_default(items):
        aliases, serialized = marked(items)
        return {*aliases, "default"}, serialized

    pytest_django.fixtures._get_databases_for_setup = with_default


# Fixtures through which a test talks to the real server at REDIS_URL (besides the "real"
# side of redis_client): such tests are marked real_redis (what runs where: contributing.rst).
REAL_SERVER_FIXTURES = frozenset({"real_client", "real_store", "proxied"})


def _starts_its_own_server(item: pytest.Item) -> bool:
    return "own_server" in getattr(item, "fixturenames", ()) or (
        getattr(item, "callspec", None) is not None
        and item.callspec.params.get("flushable_client") == "own"
    )


def _talks_to_the_real_server(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("redis_client") == "real":
        return True
    return bool(REAL_SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def _longest_first(item: pytest.Item) -> int:
    """The slow tests (minute-long scenarios, the longest state machines), then the rest of
    the reliability suite (real worker processes, seconds each), then the rest, each group in
    file order: with ``--dist load`` (./runtests) every process takes the next test as it
    frees, so the longest start first and overlap the short tests, and no process is left
    running one of them alone at the end (test_api_model, 40-90 s a database, started after
    the reliability suite, ended the run a minute after the others)."""
    if item.get_closest_marker("slow"):
        return 0
    return 1 if item.get_closest_marker("reliability") else 2


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _talks_to_the_real_server(item):
            item.add_marker(pytest.mark.real_redis)
        if _starts_its_own_server(item):
            item.add_marker(pytest.mark.redis_server)
    items.sort(key=_longest_first)  # stable: file order within each group


@pytest.fixture(scope="session", autouse=True)
def outbox_on_default_only(request):
    """Once the test databases exist (the outbox table on every alias), outbox rows may live
    only on "default" unless a test turns PostgreSQL on (tests/routers.py)."""
    from tests.routers import OutboxDatabases

    request.getfixturevalue("django_db_setup")
    OutboxDatabases.extra = set()


@pytest.fixture(autouse=True)
def outbox_reads(django_db_blocker):
    """get_job() and the plain keyed schedule() read the outbox table (a miss in Redis may
    be a row: outbox promise I1, I3, I8), so every test may read the test databases; tests that
    write rows carry the django_db mark (their rows are flushed after them)."""
    with django_db_blocker.unblock():
        yield


def real_redis_proxy():
    """A fault proxy (tests/reliability/faults.py) in front of the Redis at REDIS_URL, whose
    url names the same database: whatever server and port REDIS_URL names, never 6379."""
    from tests.reliability.faults import FaultProxy

    where = redis.connection.parse_url(settings.REDIS_URL)
    host = where.get("host", "127.0.0.1")
    return FaultProxy(
        where.get("port", 6379),
        "127.0.0.1" if host == "localhost" else host,
        db=int(where.get("db", 0)),
    )


@pytest.fixture(params=["fake", "real"])
def redis_client(request):
    """A Redis client: fakeredis, then the real server (the store contract runs on both)."""
    if request.param == "fake":
        yield fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        yield real_redis()


@pytest.fixture
def real_client():
    return real_redis()


@pytest.fixture(scope="session")
def own_server(tmp_path_factory):
    """A redis-server of this test process's own (a few ms to start), for a test that does
    to its server what would disturb the tests other processes run on the shared one at the
    same moment: a SCRIPT FLUSH there makes any test that counts what it sends see a
    NOSCRIPT and a re-send (CI saw test_transport's lost-reply count go from 2 to 3)."""
    from tests.reliability.harness import Servers

    started = Servers(tmp_path_factory.mktemp("own-redis"))
    try:
        yield started.redis("own")
    finally:
        started.close()


@pytest.fixture(params=["fake", "own"])
def flushable_client(request):
    """Like redis_client, its real side a server of this process's own (own_server)."""
    if request.param == "fake":
        yield fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        client = request.getfixturevalue("own_server").client()
        yield client
        client.close()


@pytest.fixture
def flushable_store(flushable_client):
    """The store fixture on flushable_client: for tests that SCRIPT FLUSH their server."""
    yield from _installed(flushable_client)


def _use_store(client: redis.Redis) -> Store:
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    return Store(client, prefix=prefix)


def delete_keys(client: redis.Redis, prefix: str) -> None:
    """Delete the keys under ``prefix`` (a test's own: never another run's)."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


def _cleanup(store: Store) -> None:
    delete_keys(store.client, store.prefix)


@pytest.fixture
def store(redis_client):
    """A Store with a unique prefix, installed as the one the API and worker use."""
    yield from _installed(redis_client)


@pytest.fixture
def real_store(real_client):
    yield from _installed(real_client)


@pytest.fixture
def fake_store():
    yield from _installed(fakeredis.FakeRedis(server=fakeredis.FakeServer()))


def _installed(client):

    relaying._fast_failed_at = -relaying.FAST_PAUSE  # a test's failed fast path pauses no other
    store = _use_store(client)
    with override_settings(DELAYQ={"PREFIX": store.prefix, "RETRY_BACKOFF": 0}):
        connection._stores[(None, False, "default", store.prefix)] = store
        testtasks.CALLS.clear()
        try:
            yield store
        finally:
            _cleanup(store)
            connection.reset()


@contextlib.contextmanager
def more_settings(store: Store, **delayq):
    """``delayq`` on top of the ``store`` fixture's DELAYQ settings, ``store`` still the one
    the API and worker use; the fixture's settings and store again afterwards."""
    key = (None, False, "default", store.prefix)
    with override_settings(DELAYQ={**settings.DELAYQ, **delayq}):
        connection._stores[key] = store
        yield
    connection._stores[key] = store


def names_unchecked(store: Store):
    """DELAYQ["CHECK_NAMES"] = False: the opt-out of producers that schedule tasks another
    code base defines."""
    return more_settings(store, CHECK_NAMES=False)


@pytest.fixture
def proxied():
    """(proxy, store): the API's store talks to the real Redis (REDIS_URL) through a fault
    proxy (tests/reliability/faults.py), for the transport's sync and async tests."""
    with real_redis_proxy() as proxy:
        client = redis.Redis.from_url(proxy.url, socket_timeout=5)
        installed = _installed(client)
        store = next(installed)
        try:
            yield proxy, store
        finally:
            store.client = real_redis()  # the cleanup must not go through the proxy
            installed.close()


def run_machine(machine: type, examples: int, steps: int = 40) -> None:
    """Run a hypothesis state machine ``examples`` times, ``steps`` steps each, no deadline
    (a shared machine's pauses are not the code's speed)."""
    from hypothesis import HealthCheck
    from hypothesis import settings as hypothesis_settings
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        machine,
        settings=hypothesis_settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


def between(moment: float | datetime, before: float | datetime, after: float | datetime) -> bool:
    """Whether ``moment`` lies between two reads of the clock (epoch seconds or aware
    datetimes): an order on one clock, not a margin of time. 10 ms of slack: due times are
    milliseconds, and Redis's clock is read apart from this process's."""

    def seconds(t: float | datetime) -> float:
        return t.timestamp() if isinstance(t, datetime) else t

    return seconds(before) - 0.01 <= seconds(moment) <= seconds(after) + 0.01
