"""``manage.py delayq_worker`` as real processes against the real Redis server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command

from django_delayq import get_job, schedule_many
from tests.testapp import tasks as t

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def start_worker(prefix: str, *args: str, **env: str) -> subprocess.Popen:
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "DELAYQ_PREFIX": prefix,
        "DELAYQ_RETRY_BACKOFF": "0",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "django", "delayq_worker", *args],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(predicate, timeout: float = 20.0, step: float = 0.02):
    """Wait for ``predicate``; its timeout only guards against a hang (what the tests wait for takes
    milliseconds to a second), so it is many times that, for a loaded machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")


def runs(client, tag: str) -> list[str]:
    return [v.decode() for v in client.lrange(f"runs:{tag}", 0, -1)]


@pytest.fixture
def tag(real_client):
    name = f"cmd-{uuid.uuid4().hex[:8]}"
    yield name
    real_client.delete(f"runs:{name}", f"runs:{name}:started")


def test_burst_command_in_process_honours_verbosity(real_store, tag, caplog):
    t.record.schedule(tag, "one")
    call_command("delayq_worker", "--burst", verbosity=1)
    assert runs(real_store.client, tag) == ["one"]
    # -v 1 (the default): one line per attempt, when it ends
    assert "tests.testapp.tasks.record succeeded" in caplog.text
    assert "(attempt 1)" in caplog.text and "record started" not in caplog.text
    caplog.clear()
    t.record.schedule(tag, "two")
    call_command("delayq_worker", "--burst", verbosity=2)  # and a line when it starts
    assert "tests.testapp.tasks.record started (attempt 1)" in caplog.text
    caplog.clear()
    t.record.schedule(tag, "three")
    call_command("delayq_worker", "--burst", verbosity=0)
    assert runs(real_store.client, tag) == ["one", "two", "three"]
    assert "succeeded" not in caplog.text


def test_racing_worker_processes_run_each_job_exactly_once(real_store, tag):
    schedule_many(t.record, [(tag, str(i)) for i in range(1000)])
    workers = [
        start_worker(real_store.prefix, "--burst", "--concurrency", str(c), "-v", "0")
        for c in (1, 4, 1, 4)
    ]
    for proc in workers:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
    done = runs(real_store.client, tag)
    assert len(done) == 1000 and sorted(done, key=int) == [str(i) for i in range(1000)]
    assert real_store.client.zcard(real_store.key("default", "pending")) == 0
    assert real_store.client.zcard(real_store.key("default", "running")) == 0


def test_sigkilled_worker_has_its_job_recovered_and_run_again(real_store, tag):
    job = t.sleepy.schedule(tag, "x", 30)
    victim = start_worker(real_store.prefix, DELAYQ_VISIBILITY_TIMEOUT="1")
    wait_for(lambda: runs(real_store.client, f"{tag}:started"))
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert get_job(job.id).status == "running"  # still leased to the dead worker
    # The job now takes no time: a task is looked up by name, so rescheduling the same
    # record is not possible; instead a second worker recovers it once the lease expires.
    real_store.client.hset(
        real_store.key("default", "jobs"),
        job.id,
        f'3\ntests.testapp.tasks.sleepy\n"{tag}","x",0',
    )
    rescuer = start_worker(real_store.prefix, DELAYQ_VISIBILITY_TIMEOUT="1")
    try:
        wait_for(lambda: runs(real_store.client, tag))
    finally:
        rescuer.send_signal(signal.SIGTERM)
        out, _ = rescuer.communicate(timeout=20)
    assert rescuer.returncode == 0, out
    assert runs(real_store.client, f"{tag}:started") == ["x", "x"]
    assert "recovered from a lost worker" in out


def test_sigterm_lets_the_running_job_finish_and_exits_0(real_store, tag):
    t.sleepy.schedule(tag, "y", 1)
    proc = start_worker(real_store.prefix)
    wait_for(lambda: runs(real_store.client, f"{tag}:started"))
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert runs(real_store.client, tag) == ["y"]
    assert "finishing running jobs" in out and "stopped" in out


def test_second_signal_stops_at_once_and_hands_the_job_back(real_store, tag):
    job = t.sleepy.schedule(tag, "z", 30)
    proc = start_worker(real_store.prefix)
    wait_for(lambda: runs(real_store.client, f"{tag}:started"))
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1, out
    back = get_job(job.id)
    assert back.status == "pending" and back.attempts == 0
    assert runs(real_store.client, tag) == []


def test_bad_options():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="concurrency"):
        call_command("delayq_worker", "--concurrency", "0")
    with pytest.raises(CommandError, match="invalid queue name"):
        call_command("delayq_worker", "--queues", "a b")


def test_worker_refuses_a_queue_nothing_names(store):
    """Issue 26: `delayq_worker --queues defualt` started without a word and served a queue
    no job goes to. Refused, with the "did you mean" of delayq_status, before a supervisor
    starts children; --force serves a queue that is new on purpose."""
    from django.core.management.base import CommandError

    for extra in ([], ["--processes", "2"]):
        with pytest.raises(CommandError, match=r"unknown queue 'defualt'.*did you mean 'default'"):
            call_command("delayq_worker", "--burst", "--queues", "emails,defualt", *extra)
    call_command("delayq_worker", "--burst", "--queues", "default,emails", verbosity=0)
    call_command("delayq_worker", "--burst", "--queues", "brand-new", "--force", verbosity=0)
