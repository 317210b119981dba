"""``manage.py delayq_status`` as a process, against a redis-server of its own: exit 0 / 1
with and without live ``delayq_worker`` processes (one SIGKILLed, one SIGTERMed), exit 2
once that Redis is stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from django_delayq.storage.store import Store
from tests.reliability.harness import ROOT, installed, runs, wait_until, worker_env
from tests.reliability.tasks import mark

pytestmark = pytest.mark.reliability

VISIBILITY = 3  # a beat every second; a killed worker leaves the roster within 3 s


def status(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    environ.pop("DELAYQ_TEST_DB", None)
    done = subprocess.run(
        [sys.executable, "-m", "django", "delayq_status", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def queue_of(report: dict, name: str) -> dict:
    return next(q for q in report["queues"] if q["queue"] == name)


def test_status_exit_codes_with_and_without_live_workers_and_with_redis_stopped(
    servers, runs_server, runs_client, workers, prefix, tag
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=VISIBILITY)

    # Nothing due, no worker: healthy.
    code, out, err = status(env, "--json")
    assert code == 0, out + err
    assert json.loads(out)["workers"] == []

    # A due job and no worker: unhealthy.
    with installed(store):
        mark.schedule(tag, "first")
    code, out, err = status(env, "--json")
    assert code == 1, out + err
    assert queue_of(json.loads(out), "default")["problems"] == ["no_worker"]
    code, out, _ = status(env)
    assert code == 1 and "NO WORKER: 1 due, no live worker serves default" in out

    # A worker: it runs the job, it is listed, all is well.
    first = workers.start(env, "--concurrency", "2", name="status-first")
    wait_until(lambda: runs(runs_client, tag) == ["first"], 30, "the first job to run")
    wait_until(
        lambda: [w.done for w in store.roster.live(store.server_time())] == [1],
        10,
        "a beat of the worker that counts the job done",
    )
    code, out, err = status(env, "--json")
    assert code == 0, out + err + workers.outputs()
    report = json.loads(out)
    (listed,) = report["workers"]
    assert listed["name"] == "status-first" and listed["pid"] == first.pid
    assert listed["concurrency"] == 2 and listed["queues"] == ["default"]
    assert listed["done"] == 1 and listed["failed"] == 0 and listed["running"] == 0
    default = queue_of(report, "default")
    assert default["live_workers"] == 1 and default["due"] == 0 and default["healthy"]

    # SIGKILL: the worker leaves the roster when its description expires; a due job then
    # has no worker.
    first.signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    killed = time.monotonic()
    with installed(store):
        mark.schedule(tag, "second")
    wait_until(lambda: not store.roster.live(store.server_time()), 30, "the killed worker to leave")
    left_after = time.monotonic() - killed
    code, out, err = status(env)
    assert code == 1, out + err
    assert out.splitlines()[-1].endswith("0 live workers")

    # A worker stopped by SIGTERM takes itself off the roster before it exits.
    second = workers.start(env, name="status-second")
    wait_until(lambda: "second" in runs(runs_client, tag), 30, "the second job to run")
    wait_until(lambda: store.roster.live(store.server_time()), 10, "the worker on the roster")
    assert status(env)[0] == 0
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.output()
    assert store.roster.live(store.server_time()) == []
    assert store.client.zcard(store.workers_key) == 0

    # Redis stopped: exit 2, whatever the format.
    data.stop()
    began = time.monotonic()
    code, out, err = status(env)
    assert code == 2 and err.startswith("ERROR: "), out + err
    took = time.monotonic() - began
    code, out, err = status(env, "--json")
    assert code == 2, out + err
    assert json.loads(out)["healthy"] is False
    print(f"killed worker left the roster after {left_after:.1f} s; exit 2 took {took:.1f} s")
