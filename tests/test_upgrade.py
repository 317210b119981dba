"""Upgrading from django-delayq 0.1 (Redis layout 1): ``upgrade.lua``, ``delayq_upgrade``, the
worker's refusal and ``delayq.W004``, on fakeredis and on the real server.

The 0.1 data is written key by key here, exactly as 0.1's scripts and producers wrote it
(commit 9134992): scores in float epoch seconds formatted ``%.6f``, records as JSON (format 1
``{"t", "a", "k", "u", "r"}`` and format 2 ``[head, args...]``), and a ``meta`` hash of
cjson-encoded ``{n, t, w, s, e}`` per claimed job. No code of 0.1 is imported.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest
import redis
from django.core.checks import registry as checks_registry
from django.core.management import call_command

from django_delayq import cancel, get_job, signals
from django_delayq.checks import check_layout
from django_delayq.jobs.record import decode_record
from django_delayq.jobs.state import parse_state
from django_delayq.storage.scripts import lib_constant
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.upgrade import reencode, refusal, refuse_old_layout, upgrade_queue
from tests.conftest import more_settings
from tests.test_command import ROOT
from tests.test_worker import Recorder
from tests.testapp import tasks as t

Q = "default"
DAY = 86400.0
REMEMBER = "tests.testapp.tasks.remember"
OLD_WORKER = "web-1:4242:ab12"


class Old:
    """Writes one queue's keys as django-delayq 0.1 did."""

    def __init__(self, store, queue: str = Q) -> None:
        self.client = store.client
        self.prefix = store.prefix
        self.queue = queue
        self.client.sadd(f"{self.prefix}:queues", queue)

    def key(self, kind: str) -> str:
        return f"{self.prefix}:{{{self.queue}}}:{kind}"

    def job(self, job_id: str, kind: str, score: float, record: bytes, meta=None, key=None):
        self.client.hset(self.key("jobs"), job_id, record)
        # 0.1's Lua wrote scores with fmt(): string.format('%.6f', x)
        self.client.execute_command("ZADD", self.key(kind), f"{score:.6f}", job_id)
        if meta is not None:  # cjson.encode of 0.1's meta table
            self.client.hset(self.key("meta"), job_id, json.dumps(meta, separators=(",", ":")))
        if key is not None:
            self.client.hset(self.key("keys"), key, job_id)
        return job_id


def short(task: str, *args) -> bytes:
    """Format 2 with the task name as head (no kwargs, key or max_retries)."""
    return json.dumps([task, *args], separators=(",", ":")).encode()


def with_options(head: dict, kwargs=None, key=None, max_retries=None) -> dict:
    """0.1's optional fields of a record (format 1) or an object head (format 2)."""
    if kwargs:
        head["k"] = kwargs
    if key is not None:
        head["u"] = key
    if max_retries is not None:
        head["r"] = max_retries
    return head


def headed(task: str, *args, key=None, max_retries=None, **kwargs) -> bytes:
    """Format 2 with an object head."""
    head = with_options({"t": task}, kwargs, key, max_retries)
    return json.dumps([head, *args], separators=(",", ":"), ensure_ascii=False).encode()


def format1(task: str, args, kwargs=None, key=None, max_retries=None) -> bytes:
    record = with_options({"t": task, "a": list(args)}, kwargs, key, max_retries)
    return json.dumps(record, separators=(",", ":")).encode()


def old_error(attempt: int, at: float, message: str = "boom") -> dict:
    """An error as 0.1's worker recorded it (worker._error_info)."""
    return {
        "type": "builtins.ValueError",
        "message": message,
        "traceback": 'Traceback (most recent call last):\n  File "x.py"\nValueError: boom\n',
        "attempt": attempt,
        "at": at,
        "worker": OLD_WORKER,
    }


def running_meta(n: int, now: float) -> dict:
    return {"n": n, "t": f"{OLD_WORKER}:9f8e7d6c:{n}", "w": OLD_WORKER, "s": now - 90}


def dataset(store, queue: str = Q, now: float | None = None) -> dict[str, str]:
    """A queue of 0.1 with one job in each situation; the ids by role."""
    now = time.time() if now is None else now
    old = Old(store, queue)
    ids = {}
    ids["later"] = old.job(
        "01OLDLATER000000000000000A", "pending", now + 7 * DAY, short(REMEMBER, 1)
    )
    ids["due"] = old.job(
        "01OLDDUE00000000000000000A", "pending", now - 5, headed(REMEMBER, 2, why="due")
    )
    ids["retrying"] = old.job(
        "01OLDRETRY000000000000000A",
        "pending",
        now + 60,
        format1(REMEMBER, [3], max_retries=4),
        meta={"n": 2, "e": [old_error(1, now - 200), old_error(2, now - 100)]},
    )
    ids["keyed"] = old.job(
        "01OLDKEYED000000000000000A",
        "pending",
        now + DAY,
        format1(REMEMBER, [4], {"x": "y"}, key="order:9:autocancel"),
        key="order:9:autocancel",
    )
    ids["running"] = old.job(
        "01OLDRUNNING0000000000000A",
        "running",
        now - 30,  # its lease expired 30 s ago: the worker died
        headed(REMEMBER, 5, max_retries=3),
        meta=running_meta(1, now),
    )
    ids["last_try"] = old.job(
        "01OLDLASTTRY0000000000000A",
        "running",
        now - 30,
        headed(REMEMBER, 6, max_retries=1),  # MAX_RETRIES (5) would retry it: the record wins
        meta=running_meta(2, now),
    )
    ids["dead"] = old.job(
        "01OLDDEAD0000000000000000A",
        "dead",
        now - 3600,
        headed(REMEMBER, 7, key="report:7", max_retries=0),
        meta={"n": 1, "e": [old_error(1, now - 3600, "ünïcode / message")]},
    )
    old.client.hset(old.key("stats"), f"d:{int(now // 60) % 60}", f"{int(now // 60)}:3")
    return ids


def snapshot(store, queue: str = Q) -> dict:
    """Every key of the queue, by kind, with its whole content."""
    out = {}
    for key in store.client.scan_iter(match=f"{store.prefix}:{{{queue}}}:*"):
        kind = key.decode().rsplit(":", 1)[1]
        kind_type = store.client.type(key).decode()
        if kind_type == "zset":
            out[kind] = store.client.zrange(key, 0, -1, withscores=True)
        elif kind_type == "hash":
            out[kind] = store.client.hgetall(key)
        elif kind_type == "list":
            out[kind] = store.client.lrange(key, 0, -1)
        else:
            out[kind] = kind_type
    return out


def run_burst(**kwargs) -> Worker:
    worker = Worker([Q], burst=True, **kwargs)
    assert worker.run() == 0
    return worker


# -- what upgrade.lua converts ----------------------------------------------------------


def test_a_job_due_in_7_days_keeps_its_due_time_and_one_due_now_runs_once(store):
    now = time.time()
    ids = dataset(store, now=now)
    report = upgrade_queue(store, Q)
    assert (report.pending, report.running, report.dead) == (4, 2, 1)
    assert report.records == 7 and report.kept == 0 and report.orphans == 0
    later = get_job(ids["later"])
    assert later.status == "pending"
    assert later.due_at.timestamp() == pytest.approx(now + 7 * DAY, abs=0.001)
    run_burst()
    ran = sorted(args for args, _ in t.CALLS)
    # due now, and the two in-progress jobs of the dead worker (recovered, retried at once)
    assert ran == [(2,), (5,)], ran
    assert get_job(ids["later"]).status == "pending"  # not early
    assert get_job(ids["retrying"]).status == "pending"  # its retry is due in a minute
    t.CALLS.clear()
    run_burst()  # nothing more is due: nothing runs twice
    assert t.CALLS == []
    run_burst(clock=lambda: time.time() + 7 * DAY + 1)
    assert sorted(args for args, _ in t.CALLS) == [(1,), (3,), (4,)]
    assert get_job(ids["later"]) is None


def test_records_become_format_3_with_key_and_max_retries_in_the_header(store):
    ids = dataset(store)
    upgrade_queue(store, Q)
    jobs = store.client.hgetall(store.key(Q, "jobs"))
    assert all(record[:1].isdigit() for record in jobs.values()), jobs
    keyed = decode_record(jobs[ids["keyed"].encode()])
    assert (keyed.task, keyed.args, keyed.kwargs) == (REMEMBER, [4], {"x": "y"})
    assert (keyed.key, keyed.max_retries) == ("order:9:autocancel", 5)  # MAX_RETRIES
    assert decode_record(jobs[ids["retrying"].encode()]).max_retries == 4
    assert decode_record(jobs[ids["due"].encode()]).kwargs == {"why": "due"}
    dead = decode_record(jobs[ids["dead"].encode()])
    assert (dead.key, dead.max_retries) == ("report:7", 0)


def test_max_retries_without_r_is_the_tasks_then_the_setting():
    """What a 0.1 worker retried a failure up to: the record's r, the task's, MAX_RETRIES."""
    fails = "tests.testapp.tasks.always_fails"  # @task(max_retries=2)
    assert decode_record(reencode(short(fails))).max_retries == 2
    assert decode_record(reencode(headed(fails, max_retries=7))).max_retries == 7
    assert decode_record(reencode(short("elsewhere.tasks.unknown", 1))).max_retries == 5
    assert reencode(b"[not json") is None and reencode(b"[42]") is None


def test_attempts_and_errors_move_from_meta_to_state_and_errors(store):
    now = time.time()
    ids = dataset(store, now=now)
    upgrade_queue(store, Q)
    assert not store.client.exists(f"{store.prefix}:{{{Q}}}:meta")
    retrying = get_job(ids["retrying"])
    assert retrying.attempts == 2 and retrying.max_retries == 4
    assert [e["attempt"] for e in retrying.errors] == [1, 2]
    assert retrying.errors[0]["traceback"].endswith("ValueError: boom\n")
    assert retrying.errors[0]["at"] == pytest.approx(now - 200, abs=0.01)
    dead = get_job(ids["dead"])
    assert dead.status == "dead" and dead.attempts == 1
    assert dead.died_at.timestamp() == pytest.approx(now - 3600, abs=0.001)
    assert dead.last_error == "builtins.ValueError: ünïcode / message"
    assert dead.errors[0]["worker"] == OLD_WORKER
    # a pending job never claimed had no meta, and gets no state
    assert store.client.hget(store.key(Q, "state"), ids["later"]) is None
    running = get_job(ids["running"])  # a started lease, expired, of the 0.1 worker
    assert running.status == "running" and running.attempts == 1
    assert running.lease_until.timestamp() == pytest.approx(now - 30, abs=0.001)
    assert parse_state(store.client.hget(store.key(Q, "state"), ids["running"])) == (
        0,
        f"{OLD_WORKER}#0.1",
    )


def test_an_in_progress_job_of_a_dead_worker_is_recovered_with_its_attempt_counted(store):
    """0.1 counted the attempt at claim; its recovery retried while n <= max_retries, with
    the record's max_retries. The converted job gets the same outcome from recover.lua."""
    ids = dataset(store)
    upgrade_queue(store, Q)
    worker = Worker([Q], burst=True)
    with Recorder(signals.job_failed, signals.job_dead) as rec:
        assert worker.parts.recovery.run_pass() == 2
    recovered = get_job(ids["running"])
    assert recovered.status == "pending" and recovered.attempts == 1
    assert "LeaseLost" in recovered.last_error and OLD_WORKER in recovered.last_error
    last = get_job(ids["last_try"])  # 2 attempts made, max_retries 1 from the record
    assert last.status == "dead" and last.attempts == 2
    assert [kw["job"].id for kw in rec.of(signals.job_dead)] == [ids["last_try"]]
    with Recorder(signals.job_started) as rec:
        run_burst()
    started = {kw["job"].id: kw["job"].attempts for kw in rec.of(signals.job_started)}
    assert started[ids["running"]] == 2  # its second attempt
    assert get_job(ids["running"]) is None


def test_a_lease_that_had_not_expired_is_recovered_when_it_expires(store):
    """A 0.1 worker may still be running it: recovery waits for the lease it had."""
    now = time.time()
    job_id = Old(store).job(
        "01OLDBUSY0000000000000000A", "running", now + 600, short(REMEMBER, 8), running_meta(1, now)
    )
    upgrade_queue(store, Q)
    assert Worker([Q], burst=True).parts.recovery.run_pass() == 0
    assert Worker([Q], burst=True, clock=lambda: time.time() + 601).parts.recovery.run_pass() == 1
    assert get_job(job_id).status == "pending"


def test_dead_jobs_are_listed_kept_and_can_be_requeued(store):
    ids = dataset(store)
    upgrade_queue(store, Q)
    assert store.page_ids(Q, "dead", 0, 10) == [ids["dead"]]
    # fail and recover trim dead jobs older than DEAD_MAX_AGE: one of 0.1 read as dead since
    # 1970 would be deleted by the first recovery pass. Converted, it stays.
    Worker([Q], burst=True).parts.recovery.run_pass()
    assert get_job(ids["dead"]).status == "dead"
    assert store.requeue(Q, [ids["dead"]]) == [1]
    assert store.id_for_key(Q, "report:7") == ids["dead"]  # the key, from the header
    run_burst()
    assert ((7,), {}) in t.CALLS and get_job(ids["dead"]) is None


def test_cancel_by_unique_key_works_after_the_upgrade(store):
    ids = dataset(store)
    upgrade_queue(store, Q)
    assert cancel(key="order:9:autocancel") is True
    assert get_job(ids["keyed"]) is None
    assert store.id_for_key(Q, "order:9:autocancel") is None


def test_a_record_that_does_not_decode_is_kept_and_dead_lettered_by_the_worker(store, caplog):
    now = time.time()
    job_id = Old(store).job("01OLDBROKEN00000000000000A", "pending", now - 1, b'["broken",')
    with caplog.at_level(logging.WARNING, "django_delayq.upgrade"):
        report = upgrade_queue(store, Q)
    assert (report.pending, report.kept, report.records) == (1, 1, 0)
    assert job_id in caplog.text and "does not decode" in caplog.text
    assert store.client.hget(store.key(Q, "jobs"), job_id) == b'["broken",'
    run_burst()
    assert get_job(job_id).status == "dead" and "CorruptJob" in get_job(job_id).last_error


def test_a_call_hands_out_a_bounded_size_of_records(store):
    """Records are returned for Python to re-encode: at least one per call, then no more
    than MAX_HANDED bytes, however large the records of a batch are."""
    size = int(lib_constant("MAX_HANDED", "upgrade")) // 2 - 100
    old = Old(store)
    ids = [
        old.job(
            f"01OLDBIG{i}".ljust(26, "0"), "pending", time.time() + i, short(REMEMBER, "x" * size)
        )
        for i in range(3)
    ]
    step = store.old_layout.step(Q, 10)
    assert [job_id for job_id, _ in step.legacy] == ids[:2]
    report = upgrade_queue(store, Q)
    assert (report.pending, report.records) == (3, 3)
    assert get_job(ids[2]).args == ["x" * size]


def test_garbage_meta_and_orphaned_meta_fields(store):
    now = time.time()
    old = Old(store)
    job_id = old.job("01OLDGARBAGE0000000000000A", "dead", now - 10, short(REMEMBER), meta=None)
    old.client.hset(old.key("meta"), job_id, "{not json")
    old.client.hset(old.key("meta"), "01GONE000000000000000000AA", '{"n":1}')
    report = upgrade_queue(store, Q)
    assert (report.dead, report.orphans) == (1, 1)
    dead = get_job(job_id)
    assert dead.status == "dead" and dead.attempts == 0 and dead.errors == []
    assert not old.client.exists(old.key("meta"))


# -- idempotence, interruption, converted data -------------------------------------------


def test_running_it_twice_changes_nothing(store):
    dataset(store)
    upgrade_queue(store, Q)
    converted = snapshot(store)
    again = upgrade_queue(store, Q)
    assert (again.converted, again.records, again.orphans, again.calls) == (0, 0, 0, 1)
    assert not again.found.found
    assert snapshot(store) == converted
    step = store.old_layout.step(Q, 10)
    assert (step.left, step.legacy) == (0, [])
    assert snapshot(store) == converted


def test_data_of_this_version_is_left_alone(store):
    t.remember.schedule(1, delay=3600)
    t.remember.schedule(2, key="k")
    t.remember.schedule(3)
    claimed = store.claim(Q, 2, lease=30, token="w~1#1", instance="w~1")
    store.call(store.mark_op(Q, claimed.jobs[0].id, claimed.now + 30))  # started
    scores = [s for _, s in store.client.zrange(store.key(Q, "running"), 0, -1, withscores=True)]
    assert min(scores) < 0 < max(scores)  # one reserved (negative score), one started
    store.fail(
        Q,
        claimed.jobs[0].id,
        "w~1#1",
        {"type": "x"},
        delay=60,
        default_max_retries=5,
        dead_max_age=3600,
        dead_max_count=100,
        max_errors=10,
    )
    before = snapshot(store)
    report = upgrade_queue(store, Q)
    assert report.converted == 0 and not report.found.found
    assert snapshot(store) == before


def test_an_interrupted_run_converges_to_what_one_run_gives(store):
    now = time.time()
    dataset(store, "whole", now=now)
    dataset(store, "parts", now=now)
    upgrade_queue(store, "whole")
    # One entry per call, then killed: the records the last call handed out are lost.
    records: list = []
    for _ in range(5):
        step = store.old_layout.step("parts", 1, records)
        records = [(job_id, old, reencode(old)) for job_id, old in step.legacy]
        assert step.left > 0
    middle = store.old_layout.data(["parts"])[0]
    assert middle.found and middle.pending < 4  # some entries converted, others not
    report = upgrade_queue(store, "parts", limit=1)
    assert report.calls > 7
    assert snapshot(store, "parts") == snapshot(store, "whole")


def test_a_record_is_replaced_only_while_the_job_holds_the_old_one(store):
    """Between the call that handed a record out and the one that stores its re-encoding,
    the job may have been replaced (a schedule with its key) or deleted."""
    now = time.time()
    old = Old(store)
    job_id = old.job("01OLDSWAP0000000000000000A", "pending", now + 60, short(REMEMBER, 1))
    (handed,) = store.old_layout.step(Q, 10).legacy
    assert handed == (job_id, short(REMEMBER, 1))
    old.client.hset(old.key("jobs"), job_id, short(REMEMBER, 2))  # changed meanwhile
    step = store.old_layout.step(Q, 10, [(job_id, handed[1], reencode(handed[1]))])
    assert step.records == 0 and step.legacy == [(job_id, short(REMEMBER, 2))]
    assert old.client.hget(old.key("jobs"), job_id) == short(REMEMBER, 2)
    upgrade_queue(store, Q)
    assert get_job(job_id).args == [2]


# -- detection: the worker, the system check, the command ---------------------------------


@pytest.mark.parametrize("burst", [True, False])
def test_a_worker_refuses_to_start_on_a_queue_of_0_1(store, caplog, burst):
    dataset(store)
    before = snapshot(store)
    worker = Worker(["emails", Q], burst=burst)
    with caplog.at_level(logging.ERROR, "django_delayq"):
        assert worker.run() == 1
    assert t.CALLS == []
    assert snapshot(store) == before  # no recovery, trim or claim ran
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "'default' (4 pending, 2 in progress, 1 dead, 4 meta fields)" in line
    assert "'emails'" not in line and "delayq_upgrade" in line
    upgrade_queue(store, Q)
    assert Worker([Q], burst=True).run() == 0


def test_each_kind_of_old_entry_is_detected_alone(store):
    now = time.time()
    for kind in ("pending", "running", "dead"):
        Old(store, kind).job("01OLD" + kind.upper().ljust(21, "0"), kind, now, short(REMEMBER))
    Old(store, "meta").client.hset(Old(store, "meta").key("meta"), "x", "{}")
    found = store.old_layout.data(["pending", "running", "dead", "meta", "fresh"])
    assert [d.found for d in found] == [True, True, True, True, False]
    assert refusal(store, ["fresh"]) is None
    assert "queues 'pending'" in refusal(store, ["pending", "dead"])


def test_orphans_and_broken_keys_are_not_taken_for_0_1(store):
    """Low-scored ids without a record, or with this layout's records, and keys of the wrong
    type are garbage the worker's own paths deal with: no reason to refuse to start. A
    0.1 record behind a low score, with no meta hash at all, is."""
    client = store.client
    client.zadd(store.key(Q, "pending"), {"orphan-pending": 0})
    client.zadd(store.key(Q, "running"), {"orphan-running": 0})
    current = t.remember.schedule(1, delay=3600)
    client.zadd(store.key(Q, "dead"), {current.id: 5})  # a record of this layout
    t.remember.schedule(2)
    client.set(store.key("broken", "pending"), "not a sorted set")
    assert [d.found for d in store.old_layout.data([Q, "broken"])] == [True, False]
    assert refusal(store, [Q, "broken"]) is None
    assert Worker([Q], burst=True).run() == 0  # it started, ran the job, dead-lettered orphans
    assert [args for args, _ in t.CALLS] == [(2,)]
    Old(store, "legacy").job("01OLDPENDING".ljust(26, "0"), "pending", time.time(), short(REMEMBER))
    assert "queue 'legacy'" in refusal(store, [Q, "legacy"])


def test_system_check_w004(store):
    assert check_layout in checks_registry.registry.get_checks(include_deployment_checks=True)
    assert check_layout not in checks_registry.registry.get_checks()
    assert check_layout() == []
    dataset(store)
    (warning,) = check_layout()
    assert warning.id == "delayq.W004" and "delayq_upgrade" in warning.msg
    upgrade_queue(store, Q)
    assert check_layout() == []


def test_an_unreachable_redis_is_waited_out_before_a_worker_starts():
    unreachable = Store(redis.Redis(port=1, socket_connect_timeout=0.1))
    burst = Worker([Q], burst=True, store=unreachable)
    assert refuse_old_layout(burst, 0.0) == 2  # gives up like a --burst claim does
    worker = Worker([Q], store=unreachable)
    threading.Timer(0.5, worker.request_stop).start()
    assert refuse_old_layout(worker, 0.0) == 0  # waited until asked to stop


def test_check_w004_stays_quiet_when_redis_is_unreachable(store):
    with more_settings(store, REDIS_URL="redis://127.0.0.1:1/0", CACHE=None):
        assert check_layout() == []


def test_dry_run_writes_nothing_and_exits_1(store, capsys):
    dataset(store)
    before = snapshot(store)
    with pytest.raises(SystemExit) as exited:
        call_command("delayq_upgrade", "--dry-run")
    assert exited.value.code == 1
    assert snapshot(store) == before
    out = capsys.readouterr().out
    assert "default: 4 pending, 2 in progress, 1 dead, 4 meta fields in the 0.1 layout" in out
    assert "1 of 2 queues need converting" in out  # default, emails
    call_command("delayq_upgrade", "--queues", "default,other", verbosity=1)
    out = capsys.readouterr().out
    assert "default: found 4 pending" in out and "converted 4 pending, 2 in progress" in out
    assert "7 records" in out and "other" not in out
    call_command("delayq_upgrade", "--dry-run", verbosity=2)  # no SystemExit: exit 0
    assert "nothing to convert" in capsys.readouterr().out


def test_verbosity_0_prints_nothing_and_still_exits_1(store, capsys):
    dataset(store)
    with pytest.raises(SystemExit) as exited:
        call_command("delayq_upgrade", "--dry-run", verbosity=0)
    assert exited.value.code == 1 and capsys.readouterr().out == ""
    call_command("delayq_upgrade", verbosity=0)
    assert capsys.readouterr().out == "" and not store.old_layout.data([Q])[0].found


def test_command_refuses_a_bad_queue_name(store):
    with pytest.raises(Exception, match="invalid queue name"):
        call_command("delayq_upgrade", "--queues", "no spaces")


# -- as processes, against the real server --------------------------------------------------


def manage(prefix: str, *args: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "DELAYQ_PREFIX": prefix,
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_worker_process_exits_1_and_says_to_run_delayq_upgrade(real_store):
    dataset(real_store)
    before = snapshot(real_store)
    worker = manage(real_store.prefix, "delayq_worker")  # not --burst: it would run forever
    assert worker.returncode == 1, worker.stdout
    errors = [line for line in worker.stdout.splitlines() if " ERROR " in line]
    assert len(errors) == 1, worker.stdout
    assert "refuses to start" in errors[0] and "'default'" in errors[0]
    assert "python manage.py delayq_upgrade" in errors[0]
    assert snapshot(real_store) == before


@pytest.mark.slow
def test_upgrade_process_in_a_deploy_pipeline(real_store):
    ids = dataset(real_store)
    dry = manage(real_store.prefix, "delayq_upgrade", "--dry-run")
    assert dry.returncode == 1 and "need converting" in dry.stdout, dry.stdout
    done = manage(real_store.prefix, "delayq_upgrade")
    assert done.returncode == 0 and "converted 4 pending" in done.stdout, done.stdout
    dry = manage(real_store.prefix, "delayq_upgrade", "--dry-run")
    assert dry.returncode == 0 and "nothing to convert" in dry.stdout, dry.stdout
    worker = manage(real_store.prefix, "delayq_worker", "--burst")
    assert worker.returncode == 0, worker.stdout
    assert get_job(ids["later"]).status == "pending"
    assert get_job(ids["due"]) is None and get_job(ids["running"]) is None
