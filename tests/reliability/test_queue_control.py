"""Issue 20 under a crash: a worker SIGKILLed while its job holds a task's only concurrency
slot; the slot stays held until the job's lease expires (no attempt of the task runs on the
surviving worker meanwhile), then frees: the killed job is recovered and every job runs,
one at a time. And a queue's concurrency limit (DELAYQ['QUEUES']) across worker
processes."""

from __future__ import annotations

import json
import signal
import time

from django_delayq.storage.store import Store
from tests.reliability.harness import (
    held_by,
    installed,
    runs,
    sizes,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.tasks import exclusive, overlapping


def test_a_killed_slot_holder_frees_its_slot_after_its_lease(
    servers, runs_server, runs_client, workers, prefix, tag
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=3)
    procs = {
        name: workers.start(env, "--concurrency", "4", "-v", "0", name=name)
        for name in ("one", "two")
    }
    wait_until(lambda: waiting_workers(data) >= 2, 30, "both workers up")
    with installed(store, VISIBILITY_TIMEOUT=3):
        long = exclusive.schedule(tag, "long", 60)
        wait_until(
            lambda: any(r.startswith("start long") for r in runs(runs_client, tag)),
            30,
            "the long job to start",
        )
        holder = next(name for name in procs if long.id in held_by(store, name))
        lease_until = store.client.zscore(store.key("default", "running"), long.id) / 1000
        procs[holder].signal(signal.SIGKILL)
        procs[holder].wait(10)
        short = exclusive.schedule(tag, "short", 0)  # the survivor is up and idle
    wait_until(
        lambda: len([r for r in runs(runs_client, tag) if r.startswith("end")]) >= 2,
        60,
        "both jobs to finish",
    )
    events = [r.split() for r in runs(runs_client, tag)]
    short_start = next(float(t) for kind, value, t in events if (kind, value) == ("start", "short"))
    # The survivor did not start the short job while the killed job's lease held the slot.
    assert short_start >= lease_until - 0.05, (short_start, lease_until, events)
    # One attempt at a time after the kill (the killed attempt never recorded its end).
    running, peak = 0, 0
    for kind, _, _ in sorted(events[1:], key=lambda e: float(e[2])):
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    assert peak <= 1, events
    assert {v for k, v, _ in events if k == "end"} == {"long", "short"}
    assert short.id != long.id


def test_a_queue_limit_of_two_across_three_worker_processes(
    servers, runs_server, runs_client, workers, prefix, tag
):
    """DELAYQ['QUEUES'] = {"default": {}, "limited": {"concurrency": 2}}: 3 worker processes
    x concurrency 4 on their own redis-server; the task records how many of the queue's jobs
    run at once (counted in the runs Redis): never more than 2, the limit reached, each job
    run once."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    queues = {"default": {}, "limited": {"concurrency": 2}}
    env = worker_env(data.url, runs_server.url, prefix, QUEUES=json.dumps(queues))
    for name in ("one", "two", "three"):
        workers.start(env, "--concurrency", "4", "-v", "0", name=name)
    wait_until(lambda: waiting_workers(data) >= 3, 30, "three workers up")
    with installed(store, QUEUES=queues):
        for i in range(30):
            overlapping.schedule(tag, str(i), 0.1, queue="limited")
    wait_until(lambda: len(runs(runs_client, tag)) >= 30, 90, "every job to run")
    time.sleep(0.5)  # a duplicate run would show now
    assert sorted(runs(runs_client, tag), key=int) == [str(i) for i in range(30)]
    seen = [int(v) for v in runs_client.lrange(f"runs:{tag}:peak", 0, -1)]
    assert len(seen) == 30, seen  # one attempt each
    assert max(seen) <= 2, seen
    assert max(seen) == 2, seen  # the limit was reached, not merely never tested
    assert sizes(store, "limited") == {"pending": 0, "running": 0, "dead": 0, "records": 0}
