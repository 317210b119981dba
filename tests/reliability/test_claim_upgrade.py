"""A rolling deploy of the plain claim (design benchmarks/engine_design.md 8, cases 1 and 3):
0.7.0 producers and a 0.7.0 worker beside a new worker on one queue, plain and prioritised
jobs, one of the two workers SIGKILLed mid-drain. The new worker claims the queue through
claim_plain.lua while it is plain and claim.lua while prioritised jobs wait; the 0.7.0 one
always through its own claim.lua. Every job runs; one runs again only if the killed worker
held it when it died (the survivor's recovery hands those back); nothing is left.

And beside limits (0.8's plain claim beside another task's limit): an old worker (0.7.0,
claim.lua only; or the claim_plain.lua before 0.8, which answers 'features' wherever
`control` exists) and a new one drain plain jobs and jobs of a task with concurrency=1 on
one queue: the new worker claims the plain ones through claim_plain.lua, the limit holds
across both (one attempt at a time), every job runs once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from django_delayq.jobs.record import decode_record
from django_delayq.storage.scripts import script
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, observe, script_argv
from tests.reliability.faults import script as script_call
from tests.reliability.harness import (
    held_by,
    installed,
    runs,
    sizes,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.tasks import exclusive, mark
from tests.reliability.test_batch_outbox_edges import RELEASE_0_7
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker

pytestmark = pytest.mark.reliability

OLD_PRODUCER = """
import sys
import django
django.setup()
from tests.reliability.tasks import exclusive, mark
tag, first, count, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(first, first + count):
    priority = 5 if every and i % every == 0 else 0
    mark.schedule(tag, f"o{i}", delay=0.2 + i / 1000, priority=priority)
"""


def old_schedule(tree: str, env: dict[str, str], tag: str, first: int, count: int, every: int):
    """``count`` jobs scheduled by the 0.7.0 code (values o<first>...), every ``every``-th
    one prioritised (0: none)."""
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
        "PYTHONPATH": tree,
        **env,
    }
    environ.pop("DELAYQ_TEST_DB", None)
    argv = [sys.executable, "-c", OLD_PRODUCER, tag, str(first), str(count), str(every)]
    subprocess.run(argv, cwd=tree, env=environ, check=True, capture_output=True)


def new_schedule(store: Store, tag: str, first: int, count: int, every: int) -> None:
    with installed(store):
        for i in range(first, first + count):
            priority = 5 if every and i % every == 0 else 0
            mark.schedule(tag, f"n{i}", delay=0.2 + i / 1000, priority=priority)


@pytest.mark.parametrize("victim", ["old", "new"])
def test_0_7_producers_and_worker_beside_a_new_worker_one_killed_mid_drain(
    victim, servers, runs_server, runs_client, workers, prefix, tag, tmp_path, report
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    tree = old_tree(tmp_path, RELEASE_0_7, "0.7.0")
    old = start_old_worker(tree, env, tmp_path / "old.log", "default")
    new = workers.start(env, "--concurrency", "2", "-v", "0", name="new")
    control = store.key("default", "control")
    try:
        wait_until(lambda: waiting_workers(data) >= 2, 60, "both workers up (limits published)")
        # The suite's tasks with limits (concurrency=, group_concurrency=) were published
        # as the workers started: `control` exists, and mark's jobs are plain beside it.
        assert store.client.exists(control)
        # 1. plain jobs of both versions: the new worker claims through claim_plain.lua
        old_schedule(tree, env, tag, 0, 100, 0)
        new_schedule(store, tag, 0, 100, 0)
        wait_until(lambda: len(runs(runs_client, tag)) >= 200, 60, "the plain jobs")
        assert store.client.script_exists(script("claim_plain").sha) == [True]
        # 2. plain and prioritised jobs of both; one worker SIGKILLed mid-drain
        old_schedule(tree, env, tag, 100, 300, 5)
        new_schedule(store, tag, 100, 300, 5)
        wait_until(lambda: len(runs(runs_client, tag)) >= 400, 60, "a part of the second lot")
        if victim == "old":
            old.send_signal(signal.SIGKILL)
            old.wait(10)
        else:
            new.signal(signal.SIGKILL)
            new.wait(10)
        held = held_by(store, victim)
        records = store.client.hmget(store.key("default", "jobs"), held) if held else []
        exposed = {decode_record(r).args[1] for r in records if r}  # the values it held
        # 3. plain jobs again, from the surviving version's producer
        if victim == "new":
            old_schedule(tree, env, tag, 400, 50, 0)
        else:
            new_schedule(store, tag, 400, 50, 0)
        total = 100 + 100 + 300 + 300 + 50

        def drained() -> bool:
            return len(set(runs(runs_client, tag))) == total and sizes(store)["pending"] == 0

        wait_until(drained, 90, f"all {total} jobs to run")
        wait_until(lambda: sizes(store)["running"] == 0, 30, "no job left running")
    finally:
        if old.poll() is None:
            old.send_signal(signal.SIGTERM)
            old.wait(30)
    if victim != "new":
        new.signal(signal.SIGTERM)
        assert new.wait(30) == 0, new.output()
    done = Counter(runs(runs_client, tag))
    again = {value: n for value, n in done.items() if n > 1}
    state = sizes(store)
    report(
        scenario=f"claim_plain beside 0.7.0 (SIGKILL of the {victim} worker)",
        jobs=total,
        kills=1,
        lost=total - len(done),
        duplicates=sum(n - 1 for n in again.values()),
        exposed=len(exposed),
        dead=state["dead"],
    )
    assert len(done) == total
    assert set(again) <= exposed and max(again.values(), default=1) <= 2, (again, exposed)
    assert state == {"pending": 0, "running": 0, "dead": 0, "records": 0}


BEFORE_0_8 = "b4c1da3"  # claim_plain.lua answering 'features' wherever `control` exists


def plain_claims(cmd: list[bytes]) -> bool:
    """The new worker's claim_plain.lua calls that may lease (limit > 0)."""
    return script_call("claim_plain")(cmd) and int(script_argv(cmd)[1]) > 0


@pytest.mark.parametrize("old_code", ["0.7.0", "before 0.8"])
def test_an_old_worker_beside_a_new_one_on_a_queue_holding_limits(
    old_code, servers, runs_server, runs_client, workers, prefix, tag, tmp_path, report
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=5, MAX_SLEEP=1)
    commit = RELEASE_0_7 if old_code == "0.7.0" else BEFORE_0_8
    tree = old_tree(tmp_path, commit, old_code)
    old = start_old_worker(tree, env, tmp_path / "old.log", "default")
    limited = f"{tag}-x"  # exclusive's runs: "start <value> <t>", "end <value> <t>"
    with FaultProxy(data.port) as proxy:
        seen = proxy.add_rule(plain_claims, observe(), times=None)
        new_env = {**env, "REDIS_URL": proxy.url}
        new = workers.start(new_env, "--concurrency", "2", "-v", "0", name="new")
        try:
            wait_until(lambda: waiting_workers(data) >= 2, 60, "both workers up")
            # Both published the suite's limits (exclusive's concurrency=1 among them): the
            # control hash stays, as in a deployment with a limited task.
            control = store.key("default", "control")
            assert store.client.hget(control, f"conc:{exclusive.name}") == b"1"
            old_schedule(tree, env, tag, 0, 100, 0)
            with installed(store):
                for i in range(12):
                    exclusive.schedule(limited, str(i), 0.05)
            new_schedule(store, tag, 0, 100, 0)

            def drained() -> bool:
                ends = [r for r in runs(runs_client, limited) if r.startswith("end")]
                return len(set(runs(runs_client, tag))) == 200 and len(ends) >= 12

            wait_until(drained, 90, "every job to run")
            wait_until(lambda: sizes(store)["running"] == 0, 30, "no job left running")
        finally:
            if old.poll() is None:
                old.send_signal(signal.SIGTERM)
                old.wait(30)
            new.signal(signal.SIGTERM)
            code = new.wait(30)
        replies = list(seen.replies)
    assert code == 0, new.output()
    done = Counter(runs(runs_client, tag))
    events = [r.split() for r in runs(runs_client, limited)]
    running, peak = 0, 0
    for kind, _, _ in sorted(events, key=lambda e: float(e[2])):
        running += 1 if kind == "start" else -1
        peak = max(peak, running)
    ends = Counter(value for kind, value, _ in events if kind == "end")
    report(
        scenario=f"claim_plain beside limits, a {old_code} worker beside a new one",
        jobs=212,
        kills=0,
        lost=200 - len(done) + 12 - len(ends),
        duplicates=sum(n - 1 for n in done.values()) + sum(n - 1 for n in ends.values()),
        peak=peak,
    )
    assert sorted(done.values()) == [1] * 200 and sorted(ends) == sorted(map(str, range(12)))
    assert sorted(ends.values()) == [1] * 12
    assert peak == 1, events  # concurrency=1 held across the old and the new worker
    # The new worker leased through claim_plain.lua beside the control hash (a 5-element
    # reply: 'plain'; 'features' has 4).
    assert b"*5" in replies, replies
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
