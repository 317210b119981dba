"""Scenarios 29-33: the promises of a job scheduled inside a transaction (issue 17, items 1-4
and 9), on the real PostgreSQL with real redis-server and delayq_worker processes. A cancel
or a replace inside the transaction is what the commit applies; a relayed row is never
stored again however long its delete is refused; due times never come from a producer's
clock; the id schedule() returns is the id the job runs under. Each job records its runs
in the separate "runs" Redis (tasks.whoami records the id it ran under too)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter

import psycopg
import pytest
from django.db import connections, transaction

from django_delayq import cancel, get_job
from django_delayq.models import OutboxJob
from django_delayq.storage.store import Store
from tests.reliability import test_outbox
from tests.reliability.harness import ROOT, installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import whoami
from tests.reliability.test_outbox import SETTLE, finish, row_count, workers_env

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
]

HORIZON = 5
B_FIRST_DELAY = 10.0  # test_replace_inside_and_across_transactions
pg = test_outbox.pg  # the fixture: the outbox on PostgreSQL, here and in worker processes


def runs_server_now(client) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def ran_once(lines: list[str]) -> tuple[Counter, dict[str, tuple[str, float]]]:
    """Runs of whoami: how many per value, and the (job id, time) of each value's last run."""
    count: Counter = Counter()
    last: dict[str, tuple[str, float]] = {}
    for line in lines:
        value, job_id, at = line.split(" ")
        count[value] += 1
        last[value] = (job_id, float(at))
    return count, last


def producer(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.promise_producer", *args],
        cwd=ROOT,
        env=workers_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ended(proc: subprocess.Popen, timeout: float = 60) -> str:
    """The producer's output once it exited 0."""
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def signal(client, tag: str, name: str, what: str, proc: subprocess.Popen) -> str:
    """The next value producer ``proc`` pushed to promise:<tag>:<name>:<what>."""

    def pop() -> object:
        got = client.blpop([f"promise:{tag}:{name}:{what}"], timeout=1)
        if got is None and proc.poll() is not None:
            raise AssertionError(f"producer {name} exited: {proc.communicate()[0]}")
        return got

    return wait_until(pop, 60, f"producer {name} to send {what!r}", step=0)[1].decode()


def test_cancel_inside_the_scheduling_transaction(
    servers, runs_server, runs_client, workers, prefix, tag, pg, report
):
    """Item 1: orders are placed and each one's auto-cancel scheduled on commit; in the same
    transaction half of the orders are paid and their auto-cancels cancelled, a quarter by
    the id schedule() returned, a quarter by the unique key. After the commit none of the
    cancelled jobs runs and every other runs once."""
    count = 40
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="orders")
    cancelled: dict[str, str] = {}
    with installed(store), connections["pg"].cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE shop_order (id int PRIMARY KEY, paid bool)")
        with transaction.atomic(using="pg"):
            jobs = {}
            for i in range(count):
                cursor.execute("INSERT INTO shop_order VALUES (%s, false)", [i])
                jobs[str(i)] = whoami.schedule(
                    tag, str(i), key=f"auto-cancel-{i}", delay=1.0, on_commit="pg"
                )
            for i in range(0, count, 2):  # paid: no auto-cancel
                cursor.execute("UPDATE shop_order SET paid = true WHERE id = %s", [i])
                if i % 4 == 0:
                    cancelled[str(i)] = "id"
                    assert cancel(jobs[str(i)].id) is True
                else:
                    cancelled[str(i)] = "key"
                    assert cancel(key=f"auto-cancel-{i}") is True
        committed = runs_server_now(runs_client)
        expected = {v for v in jobs if v not in cancelled}
        wait_until(lambda: runs_client.llen(f"runs:{tag}") >= len(expected), 30, "the runs")
        # Every job was due 1 s after its schedule(): a cancelled one would have run by now.
        wait_until(lambda: runs_server_now(runs_client) > committed + 1 + SETTLE, 10, "settle")
        wait_until(lambda: row_count() == 0, 30, "the rows' deletes")
    count_of, last = ran_once(runs(runs_client, tag))
    (code,) = finish([proc], workers)
    ran_cancelled = sorted((v for v in count_of if v in cancelled), key=int)
    report(
        scenario="29. outbox: on_commit jobs cancelled in their transaction (PostgreSQL)",
        jobs=count,
        lost=len(expected - set(count_of)),
        duplicates=sum(n - 1 for n in count_of.values()),
        cancelled_in_transaction=len(cancelled),
        cancelled_ran=len(ran_cancelled),
    )
    assert not ran_cancelled, f"cancelled, then ran: {ran_cancelled}"
    assert set(count_of) == expected and set(count_of.values()) == {1}, count_of
    assert all(last[v][0] == jobs[v].id for v in expected)
    assert sizes(store)["pending"] == 0
    assert code == 0, workers.outputs()


def test_replace_inside_and_across_transactions(
    servers, runs_server, runs_client, workers, prefix, tag, pg, report
):
    """Item 2, three keys. A: two schedule(key=A, on_commit=True) in one transaction. B: two
    producer processes each schedule key B in a transaction; both are open at once, the
    second commits last (the second's INSERT may wait on the first's row lock: the test
    waits until it is either done or waiting, reading pg_stat_activity). C: near then far
    (beyond HORIZON) in one transaction. Each key's last call runs, once, with its
    arguments, not before its due time, under the id that call returned."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg, HORIZON=HORIZON)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="replace")
    due: dict[str, float] = {}  # the winners' earliest due times, runs server's clock
    ids: dict[str, str] = {}
    key_a, key_b, key_c = (f"{tag}-{name}" for name in "abc")
    with installed(store, HORIZON=HORIZON):
        # B-first is due 10 s after its schedule(): B-second's commit must replace it while
        # it is pending (due in 1 s, a loaded machine let it run before B-second committed:
        # right by the API, and no race left to test); the settle below waits past its due
        # time, so a B-first the replace missed runs and fails the test.
        first = producer(env, "race", tag, "B-first", key_b, str(B_FIRST_DELAY))
        # Due times are bounded below by the runs server's time before the transaction
        # (the database may take its start as "now"; the machine's one clock is shared).
        before = runs_server_now(runs_client)
        with transaction.atomic(using="pg"):
            whoami.schedule(tag, "A-first", key=key_a, delay=1.0, on_commit="pg")
            a = whoami.schedule(tag, "A-second", key=key_a, delay=3.0, on_commit="pg")
            whoami.schedule(tag, "C-near", key=key_c, delay=1.0, on_commit="pg")
            c = whoami.schedule(tag, "C-far", key=key_c, delay=HORIZON + 3.0, on_commit="pg")
        ids.update({"A-second": a.id, "C-far": c.id})
        due.update({"A-second": before + 3.0, "C-far": before + HORIZON + 3.0})
        # The race: B-first's transaction holds key B; B-second's is open too, its
        # schedule() done or waiting for B-first's row lock; B-first commits, then B-second.
        signal(runs_client, tag, "B-first", "scheduled", first)
        b_first_due = runs_server_now(runs_client) + B_FIRST_DELAY  # at or after its due time
        second = producer(env, "race", tag, "B-second", key_b, "2")
        due["B-second"] = float(signal(runs_client, tag, "B-second", "before", second)) + 2.0
        pid = int(signal(runs_client, tag, "B-second", "pid", second))
        wait_until(
            lambda: runs_client.llen(f"promise:{tag}:B-second:scheduled") or waits_for_lock(pid),
            30,
            "B-second's schedule() done or waiting on a lock",
        )
        runs_client.rpush(f"promise:{tag}:B-first:go", 1)
        signal(runs_client, tag, "B-first", "committed", first)
        # (B-first's commit hook may wait for B-second's row lock: B-second goes on now.)
        ids["B-second"] = signal(runs_client, tag, "B-second", "scheduled", second)
        runs_client.rpush(f"promise:{tag}:B-second:go", 1)
        ended(first)
        ended(second)
        wait_until(lambda: runs_client.llen(f"runs:{tag}") >= 3, 40, "the three winners' runs")
        latest = max(*due.values(), b_first_due)
        wait_until(lambda: runs_server_now(runs_client) > latest + SETTLE, 20, "settle")
        wait_until(lambda: row_count() == 0, 30, "the rows' deletes")
    count_of, last = ran_once(runs(runs_client, tag))
    (code,) = finish([proc], workers)
    winners = {"A-second", "B-second", "C-far"}
    lateness = {v: last[v][1] - due[v] for v in winners if v in last}
    report(
        scenario="30. outbox: on_commit replace: one transaction, 2 racing, near then far "
        "(PostgreSQL)",
        jobs=3,
        lost=len(winners - set(count_of)),
        duplicates=sum(n - 1 for n in count_of.values()),
        superseded_ran=sorted(set(count_of) - winners),
        **({"min_lateness_ms": round(min(lateness.values()) * 1000, 1)} if lateness else {}),
    )
    assert set(count_of) == winners and set(count_of.values()) == {1}, count_of
    assert {v: last[v][0] for v in winners} == {v: ids[v] for v in winners}
    assert all(late >= -0.01 for late in lateness.values()), lateness
    assert code == 0, workers.outputs()


def advisory_waiters() -> int:
    """Backends of the test database waiting for an advisory lock."""
    with connections["pg"].cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
        )
        return cursor.fetchone()[0]


def waits_for_lock(pid: int, kind: str | None = None) -> bool:
    """Whether backend ``pid`` waits for a lock (of that ``kind``, pg_stat_activity's
    wait_event: "advisory", "relation", "transactionid"...)."""
    with connections["pg"].cursor() as cursor:
        cursor.execute(
            "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", [pid]
        )
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock" and kind in (None, row[1])


LOCK_TIMEOUT = 3  # seconds: the producer's PostgreSQL lock_timeout


def test_relayed_row_never_stored_again_while_its_delete_is_refused(
    servers, runs_server, runs_client, workers, prefix, tag, pg, report
):
    """Item 3: a producer with ``lock_timeout = 3s`` (the worker's database settings too)
    commits on_commit jobs; its commit hooks (or a worker's relay, whichever takes the rows)
    relay them to Redis, and their DELETE is refused: a test trigger makes every DELETE of
    the outbox table wait for an advisory lock the test holds, so the DELETE fails after
    3 s (the relay's transaction, if any, rolls back). Meanwhile another
    connection asks for LOCK TABLE ... IN ACCESS EXCLUSIVE MODE, as a migration or a VACUUM
    FULL would, and holds it once granted: the worker's relay waits. While the table is
    locked the jobs, in Redis, run; then the ``done`` set is emptied, which is what
    DONE_TTL (120 s, a Lua constant with no setting) passing does to the tombstones: so
    the lock is held ~5-10 s, not 120. Then the lock goes, the rows left behind are
    relayed by the worker, and still every job runs once."""
    count = 3
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    impatient = {**json.loads(pg), "OPTIONS": {"options": f"-c lock_timeout={LOCK_TIMEOUT}s"}}
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=json.dumps(impatient))
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="relay")
    with refused_deletes(OutboxJob._meta.db_table) as locks:
        made = producer(env, "locked", tag, str(count))
        signal(runs_client, tag, "producer", "committed", made)
        # The first relay's DELETE (the producer's commit hook, or a worker's relay if it
        # took the rows first) waits; the table lock is asked for behind it.
        wait_until(lambda: advisory_waiters() > 0, 30, "a relay's DELETE to wait")
        locked_at = time.monotonic()
        locks.table()  # granted once the producer's DELETE gave up
        out = ended(made)
        waiting = ("pending", "running")
        wait_until(lambda: not any(sizes(store)[k] for k in waiting), 30, "the jobs in Redis")
        ran_while_locked = runs_client.llen(f"runs:{tag}")
        assert locks.rows() == count  # the rows stayed, their jobs ran
        tombstones = store.client.zcard(store.key("default", "done"))
        store.client.delete(store.key("default", "done"))
        held = time.monotonic() - locked_at
    wait_until(lambda: row_count() == 0, 30, "the rows' relay and delete")
    wait_until(lambda: runs_client.llen(f"runs:{tag}") >= count, 30, "the jobs' runs")
    time.sleep(SETTLE)  # a duplicate would come late
    ran = Counter(runs(runs_client, tag))
    (code,) = finish([proc], workers)
    report(
        scenario="31. outbox: relayed rows' DELETE refused, table locked past the tombstones "
        "(PostgreSQL)",
        jobs=count,
        lost=count - len(ran),
        duplicates=sum(n - 1 for n in ran.values()),
        lock_held_seconds=round(held, 1),
        ran_while_locked=ran_while_locked,
        tombstones_dropped=tombstones,
    )
    # A job reached Redis and ran while its row stayed: the case this scenario is about (the
    # rows whose relay met the table lock first wait for the worker instead).
    assert ran_while_locked >= 1, (ran_while_locked, out)
    assert sorted(ran) == [str(i) for i in range(count)] and set(ran.values()) == {1}, (ran, out)
    assert sizes(store)["pending"] == 0
    assert code == 0, workers.outputs()


class Locks:
    """What refused_deletes() hands the test while the outbox's DELETEs are refused."""

    def __init__(self, locker: psycopg.Connection, quoted: str) -> None:
        self.locker = locker
        self.quoted = quoted
        self.thread: threading.Thread | None = None
        self.granted = threading.Event()

    def table(self) -> None:
        """LOCK TABLE ... IN ACCESS EXCLUSIVE MODE on the locker connection, in a thread (it
        waits for the statements before it); returns once granted."""

        def take() -> None:
            self.locker.execute(f"LOCK TABLE {self.quoted} IN ACCESS EXCLUSIVE MODE")
            self.granted.set()

        self.thread = threading.Thread(target=take, daemon=True)
        self.thread.start()
        assert self.granted.wait(60), "LOCK TABLE was not granted within 60 s"

    def rows(self) -> int:
        """The outbox's rows, counted through the connection holding the lock (any other
        waits for it)."""
        return self.locker.execute(f"SELECT COUNT(*) FROM {self.quoted}").fetchone()[0]

    def release(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.locker.cancel()  # the LOCK TABLE still waits: end it
            self.thread.join(10)
        self.locker.rollback()


@contextlib.contextmanager
def refused_deletes(table: str):
    """While inside: every DELETE of ``table`` waits for an advisory lock held here (a
    statement trigger); the block gets a :class:`Locks` to lock the table with. Afterwards
    the table lock and the advisory lock are released and the trigger dropped."""
    conf = connections["pg"].settings_dict
    params = {"host": conf["HOST"], "port": conf["PORT"], "user": conf["USER"]}
    holder = psycopg.connect(**params, dbname=conf["NAME"], autocommit=True)
    locks = Locks(psycopg.connect(**params, dbname=conf["NAME"]), f'"{table}"')
    key = zlib.crc32(table.encode())
    function = f"{table}_test_hold"
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", [key])
        holder.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_advisory_xact_lock_shared({key}); RETURN NULL; END $$"
        )
        holder.execute(
            f"CREATE TRIGGER {function} BEFORE DELETE ON {locks.quoted} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )
        yield locks
    finally:
        # The locks first (a relay's DELETE waiting for them goes on), then the trigger.
        try:
            locks.release()
            holder.execute("SELECT pg_advisory_unlock(%s)", [key])
            holder.execute(f"DROP TRIGGER IF EXISTS {function} ON {locks.quoted}")
            holder.execute(f"DROP FUNCTION IF EXISTS {function}()")
        finally:
            locks.locker.close()
            holder.close()


SKEW = -30.0


def test_producer_clock_behind_runs_nothing_early(
    servers, runs_server, runs_client, workers, prefix, tag, pg, report
):
    """Item 4: a producer whose clock is 30 s behind (skewed.py) schedules with delay=:
    on_commit jobs within the horizon, on_commit jobs beyond it, plain jobs beyond it
    (HORIZON = 5 s). None runs before the runs server's time before its schedule() call (or
    its transaction) plus its delay: Redis's and the database's clock decide, not the
    producer's."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg, HORIZON=HORIZON)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="ontime")
    ended(producer(env, "skewed", tag, str(SKEW), "4"))
    due = {
        value: float(at)
        for value, at in (
            line.decode().split(" ") for line in runs_client.lrange(f"promise:{tag}:due", 0, -1)
        )
    }
    assert len(due) == 12
    wait_until(lambda: runs_client.llen(f"runs:{tag}") >= len(due), 40, "the jobs' runs")
    time.sleep(SETTLE)
    lines = runs(runs_client, tag)
    (code,) = finish([proc], workers)
    ran = Counter(line.split(" ")[0] for line in lines)
    at = {line.split(" ")[0]: float(line.split(" ")[1]) for line in lines}
    lateness = {v: at[v] - due[v] for v in due if v in at}
    early = sorted(v for v, late in lateness.items() if late < -0.01)
    report(
        scenario="32. outbox: producer clock 30 s behind, on_commit and HORIZON jobs (PostgreSQL)",
        jobs=len(due),
        lost=len(set(due) - set(ran)),
        duplicates=sum(n - 1 for n in ran.values()),
        ran_early=len(early),
        max_lateness_ms=round(max(lateness.values()) * 1000, 1),
        min_lateness_ms=round(min(lateness.values()) * 1000, 1),
    )
    assert not early, {v: round(lateness[v], 3) for v in early}
    assert set(ran) == set(due) and set(ran.values()) == {1}, ran
    # Nor late by the skew (a remaining delay counted on the producer's clock would be 30 s
    # late): a third of it leaves room for a loaded machine, as in test_clock_skew.
    assert max(lateness.values()) < abs(SKEW) / 3, lateness
    assert row_count() == 0 and sizes(store)["pending"] == 0
    assert code == 0, workers.outputs()


def test_on_commit_replace_of_a_redis_job_keeps_the_returned_id(
    servers, runs_server, runs_client, workers, prefix, tag, pg, report
):
    """Item 9: two pending Redis jobs with unique keys; in a transaction,
    schedule(key=K, on_commit=True) over each. After the commit get_job(returned id) finds
    the first with its new arguments, cancel(returned id) cancels the second, and (workers
    started only then) the first runs once under the returned id; nothing else runs."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg)
    with installed(store):
        before = runs_server_now(runs_client)
        for name in ("found", "cancelled"):
            held = whoami.schedule(tag, f"old-{name}", key=f"{tag}-{name}", delay=1.0)
            assert held.waits_in == "redis"
        with transaction.atomic(using="pg"):
            new = {
                name: whoami.schedule(
                    tag, f"new-{name}", key=f"{tag}-{name}", delay=1.0, on_commit="pg"
                )
                for name in ("found", "cancelled")
            }
        found = get_job(new["found"].id)
        cancelled = cancel(new["cancelled"].id)
        proc = workers.start(env, "--concurrency", "2", "-v", "1", name="adopt")
        wait_until(lambda: runs_client.llen(f"runs:{tag}") >= 1, 30, "a run")
        wait_until(lambda: runs_server_now(runs_client) > before + 1 + SETTLE, 20, "settle")
        wait_until(lambda: row_count() == 0, 30, "the rows' deletes")
    count_of, last = ran_once(runs(runs_client, tag))
    (code,) = finish([proc], workers)
    ran_under = last.get("new-found", ("-",))[0]
    report(
        scenario="33. outbox: on_commit replace of a Redis job: the returned id is the job's "
        "(PostgreSQL)",
        jobs=2,
        lost=int("new-found" not in count_of),
        duplicates=sum(n - 1 for n in count_of.values()),
        get_job_found=found is not None,
        cancel_returned=cancelled,
        ran_under_returned_id=ran_under == new["found"].id,
    )
    assert found is not None and found.id == new["found"].id, found
    assert found.args == [tag, "new-found"] and found.status == "pending", found
    assert cancelled is True
    assert dict(count_of) == {"new-found": 1}, count_of
    assert ran_under == new["found"].id
    assert sizes(store)["pending"] == 0
    assert code == 0, workers.outputs()
