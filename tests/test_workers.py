"""The roster of live workers (roster.py, presence.py), the queues' health (health.py) and
``manage.py delayq_status`` in process, on fakeredis and the real server. Real worker
processes, a stopped Redis and the exit codes of the command as a process are in
tests/reliability/test_operators.py."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from django.core.management import call_command

from django_delayq import schedule
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.monitoring import health
from django_delayq.storage.roster import FORGET_AFTER, decode_description, encode_description
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.presence import MISSED_BEATS, beat_interval
from tests.conftest import more_settings
from tests.testapp import tasks as t

Q = "default"


def describe(**overrides) -> bytes:
    fields = {
        "name": "web-1",
        "host": "web-1.internal",
        "pid": 4242,
        "queues": ["default", "emails"],
        "concurrency": 4,
        "version": "0.1.0",
        "uptime": 120.0,
        "every": 5.0,
        "ttl": 15.0,
        "running": [("default", "01JOB", "shop.tasks.sync", 2.5)],
        "done": 17,
        "failed": 2,
        "stopping": False,
        "burst": False,
    }
    return encode_description(**{**fields, **overrides})


def beat(store, instance: str, ttl: float = 15.0, **overrides) -> None:
    ops = store.roster.beat_ops(instance, describe(ttl=ttl, **overrides), ttl, time.time())
    assert all(not isinstance(r, Exception) for r in store.run(ops))


def members(store) -> list[str]:
    return [m.decode() for m in store.client.zrange(store.workers_key, 0, -1)]


# -- the roster in Redis -----------------------------------------------------------


def test_a_beating_worker_is_listed_with_its_description(store):
    before = store.server_time()
    beat(store, "web-1~abcd")
    now = store.server_time()
    (worker,) = store.roster.live(now)
    read = store.server_time() - now  # how long after ``now`` the key's TTL was read
    assert worker.instance == "web-1~abcd" and worker.name == "web-1"
    assert worker.host == "web-1.internal" and worker.pid == 4242
    assert worker.queues == ("default", "emails") and worker.concurrency == 4
    assert worker.version == "0.1.0" and worker.every == 5.0
    assert worker.done == 17 and worker.failed == 2 and not worker.stopping
    # The beat's time: ``now`` less the key's age (its TTL read, in ms), so earlier by as
    # long as the read came after ``now``; not an elapsed time with a margin.
    assert before - read - 0.002 <= worker.beat <= now + 0.002
    assert worker.started == pytest.approx(worker.beat - 120.0)
    (job,) = worker.running
    assert (job.queue, job.id, job.task) == ("default", "01JOB", "shop.tasks.sync")
    assert job.since == pytest.approx(worker.beat - 2.5)
    # the keys are outside every queue's slot, built by the store
    assert store.client.exists(f"{store.prefix}:worker:web-1~abcd")
    assert members(store) == ["web-1~abcd"]


def test_a_stopping_worker_takes_itself_off(store):
    beat(store, "web-1~abcd")
    beat(store, "web-2~ef01", queues=["emails"])
    store.run(store.roster.gone_ops("web-1~abcd"))
    assert [w.instance for w in store.roster.live(store.server_time())] == ["web-2~ef01"]
    assert members(store) == ["web-2~ef01"]


def test_a_description_that_expired_leaves_the_roster(store):
    """A SIGKILLed worker writes nothing more: its description expires, and the next reader
    drops its member."""
    beat(store, "gone~1", ttl=0.05)
    beat(store, "alive~2")
    deadline = time.monotonic() + 10
    while store.client.exists(store.worker_key("gone~1")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [w.instance for w in store.roster.live(store.server_time())] == ["alive~2"]
    assert members(store) == ["alive~2"]


def test_members_older_than_a_day_are_forgotten_unread(store):
    now = store.server_time()
    store.client.zadd(store.workers_key, {"ancient~1": round((now - FORGET_AFTER - 60) * 1000)})
    assert store.roster.live(now) == [] and members(store) == []


def test_garbage_descriptions_show_as_workers_without_details(store):
    store.client.set(store.worker_key("odd~1"), b"\xff not json", px=10_000)
    store.client.set(store.worker_key("odd~2"), b'{"pid": "x", "queues": 7, "running": [1]}')
    store.client.set(store.worker_key("odd~3"), b"[" * 100_000, px=10_000)
    now = time.time() * 1000
    store.client.zadd(store.workers_key, {"odd~1": now, "odd~2": now, "odd~3": now})
    odd1, odd2, odd3 = store.roster.live(store.server_time())
    assert (odd1.name, odd1.queues, odd1.pid, odd1.running) == ("odd", (), None, ())
    assert (odd2.name, odd2.queues, odd2.pid, odd2.running) == ("odd", (), None, ())
    assert (odd3.name, odd3.queues, odd3.pid, odd3.running) == ("odd", (), None, ())


def test_the_age_of_a_beat_comes_from_the_keys_time_to_live():
    """Placed on Redis's clock by PTTL: the worker's own clock never matters."""
    raw = describe(ttl=15.0, uptime=100.0)
    worker = decode_description("w~1", raw, pttl=11_000, now=1000.0)
    assert worker.beat == pytest.approx(996.0) and worker.started == pytest.approx(896.0)
    assert worker.running[0].since == pytest.approx(996.0 - 2.5)


# -- presence: a worker keeps itself on the roster -----------------------------------


def test_beat_interval_and_expiry_follow_the_visibility_timeout():
    assert beat_interval(60) == 5.0 and beat_interval(3) == 1.0 and beat_interval(0.01) == 0.05
    assert MISSED_BEATS == 3  # the docs: a killed worker leaves within 3 beats (15 s by default)


def test_a_running_worker_is_on_the_roster_with_its_running_jobs(store):
    gate = f"g-{uuid.uuid4().hex[:8]}"
    job = t.wait_for_gate.schedule(gate)
    worker = Worker([Q, "emails"], concurrency=2, name="roster-test")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:

        def running():
            listed = store.roster.live(store.server_time())
            # a claimed job shows with its task once its runner has read the record
            if listed and listed[0].running and listed[0].running[0].task:
                return listed[0]
            worker.parts.presence.beat()  # the loop beats every 5 s: do not wait for it
            return None

        listed = wait_until(running)
        assert listed.instance == worker.instance and listed.name == "roster-test"
        assert listed.queues == (Q, "emails") and listed.concurrency == 2
        assert listed.pid == worker.parts.presence.pid and listed.host == worker.parts.presence.host
        (entry,) = listed.running
        assert (entry.queue, entry.id, entry.task) == (Q, job.id, t.wait_for_gate.name)
        t.gate(gate).set()
        wait_until(lambda: worker.processed == 1)
        worker.parts.presence.beat()
        (listed,) = store.roster.live(store.server_time())
        assert listed.running == () and listed.done == 1 and listed.failed == 0
        worker.request_stop()
        thread.join(10)
        assert not thread.is_alive()
        assert store.roster.live(store.server_time()) == [] and members(store) == []
    finally:
        t.gate(gate).set()
        worker.request_stop(force=True)


def test_a_burst_worker_registers_and_leaves(store):
    seen = []
    t.remember.schedule(1)
    worker = Worker([Q], burst=True, name="burst-test")
    original = worker.parts.executor.run

    def run(attempt):  # the presence thread's first beat may land after the claim
        seen.extend(wait_until(lambda: store.roster.live(store.server_time())))
        return original(attempt)

    worker.parts.executor.run = run
    assert worker.run() == 0
    assert [(w.name, w.burst) for w in seen] == [("burst-test", True)]
    assert store.roster.live(store.server_time()) == []


def wait_until(predicate, timeout: float = 20.0):
    """Wait for ``predicate``; its timeout only guards against a hang (what the tests wait for takes
    milliseconds to a second), so it is many times that, for a loaded machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")


# -- health and delayq_status ---------------------------------------------------------


def overdue(store, queue: str, seconds: float) -> None:
    """A job due ``seconds`` ago (the store takes a `now` to place it in the past)."""
    record = encode_record(t.add.name, [1, 2], {})
    store.schedule(queue, new_job_id(), record, now=time.time() - seconds)


def test_health_per_queue(store):
    placed = time.time()
    overdue(store, Q, 120)
    t.send_mail.schedule("a@b.c", delay=3600)  # emails: pending, nothing due
    beat(store, "web-1~1", queues=["emails"])
    beat(store, "web-2~2", name="web-2", queues=["emails", "reports"])
    report = health.report(store, max_lag=60)
    reported = time.time()
    by_queue = {q.queue: q for q in report.queues}
    default, emails = by_queue[Q], by_queue["emails"]
    assert (default.pending, default.due, default.workers) == (1, 1, 0)
    assert 120 - 0.01 <= default.lag <= reported - placed + 120 + 0.01
    assert default.problems == (health.LAG, health.NO_WORKER) and not report.healthy
    assert (emails.pending, emails.due, emails.lag, emails.workers) == (1, 0, 0.0, 2)
    assert emails.healthy
    assert by_queue["reports"].workers == 1  # served by a live worker: listed
    assert [w.name for w in report.workers] == ["web-1", "web-2"]
    beat(store, "web-3~3", queues=[Q])
    again = health.report(store, [Q])
    assert [q.queue for q in again.queues] == [Q] and again.queues[0].problems == ()
    assert health.report(store, [Q], max_lag=60).queues[0].problems == (health.LAG,)


def status(*args: str) -> tuple[int, str, str]:
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("delayq_status", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_status_exit_codes_and_output(store):
    code, out, _ = status()
    assert code == 0 and out.splitlines()[-1].startswith("OK: ")
    overdue(store, "emails", 30)
    code, out, _ = status()
    assert code == 1 and "NO WORKER: 1 due, no live worker serves emails" in out
    assert out.splitlines()[-1] == "UNHEALTHY: 1 of 2 queues, 0 live workers"
    assert status("--queues", Q)[0] == 0
    beat(store, "mail-1~1", queues=["emails"])
    code, out, _ = status()
    assert code == 0 and out.splitlines()[-1] == "OK: 2 queues healthy, 1 live worker"
    code, out, _ = status("--max-lag", "10")
    assert code == 1 and "LAG: oldest due job waited" in out and "> 10 s" in out
    assert status("--max-lag", "3600")[0] == 0
    code, out, _ = status("--json", "--max-lag", "10")
    report = json.loads(out)
    assert code == 1 and report["healthy"] is False and report["max_lag"] == 10
    emails = next(q for q in report["queues"] if q["queue"] == "emails")
    assert emails["problems"] == ["lag"] and emails["live_workers"] == 1
    assert emails["due"] == emails["pending"] == 1 and emails["lag_seconds"] >= 30
    assert emails["finished"] == 0
    assert [w["name"] for w in report["workers"]] == ["web-1"]


def test_status_refuses_bad_options(store):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="invalid queue name 'a b'") as raised:
        call_command("delayq_status", "--queues", "a b")
    assert raised.value.returncode == 2  # not the 1 of "unhealthy"
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(CommandError, match=r"argument --max-lag: invalid seconds value"):
            call_command("delayq_status", "--max-lag", bad)


def test_status_calls_a_queue_nothing_names_unhealthy(store):
    """A typo in a probe (--queues defualt) must not pass for a healthy, empty queue."""
    code, out, _ = status("--queues", "defualt")
    assert code == 1 and "UNKNOWN QUEUE: nothing names 'defualt': did you mean 'default'?" in out
    assert out.splitlines()[-1] == "UNHEALTHY: 1 of 1 queue, 0 live workers"
    code, out, _ = status("--json", "--queues", "zzz")
    assert code == 1 and json.loads(out)["queues"][0]["problems"] == ["unknown_queue"]
    assert status("--queues", Q)[0] == 0  # a configured queue, empty: healthy
    beat(store, "w~1", queues=["side"])  # a queue a live worker serves is known
    assert status("--queues", "side")[0] == 0


def test_status_exits_2_when_redis_cannot_be_read(store):
    with more_settings(store, REDIS_URL="redis://127.0.0.1:1/0"):
        code, out, err = status()
        assert code == 2 and err.startswith("ERROR: cannot read the queues from Redis: ")
        # redis-py retries a refused connection for seconds: --timeout cuts that short
        code, out, _ = status("--json", "--timeout", "0.3")
        assert code == 2 and json.loads(out) == {
            "healthy": False,
            "error": "Redis did not answer within 0.3 s",
        }


def test_status_gives_up_on_a_redis_that_never_answers(store, monkeypatch):
    """A Redis that accepts connections and never answers: exit 2 after --timeout."""
    never = threading.Event()
    monkeypatch.setattr(health, "report", lambda *a, **kw: never.wait(30))
    try:
        code, _, err = status("--timeout", "0.2")
    finally:
        never.set()
    assert code == 2 and "Redis did not answer within 0.2 s" in err


def test_a_due_job_on_a_queue_nobody_serves_is_a_problem(store):
    schedule(t.add, 1, 2, queue="lonely")
    (lonely,) = health.report(store, ["lonely"]).queues
    assert lonely.problems == (health.NO_WORKER,)
