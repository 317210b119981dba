"""A rolling deploy of keys held through the run (``unique_until="end"``, record flag 'h',
the follower in the ``keys`` hash under "\\0f" + key: docs/howto/upgrading.rst, "From 0.7.0").

A 0.7.0 worker runs a new producer's leader (it decodes the flag and runs the call) but its
ack promotes no follower; a new worker's recovery duty (lua/promote_followers.lua) does once
the leader has ended, never while it runs, and the follower runs once: nothing is lost. A 0.7.0
producer knows no ``unique_until``: its keyed job held by a new worker holds its key only
while pending, as 0.7.0 always did, and its schedule while a new leader runs stores a second
job beside that leader; a follower a new producer stored still waits for its own leader."""

from __future__ import annotations

import signal
import time

import pytest

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from tests.reliability.harness import (
    installed,
    runs,
    sizes,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.old_workers import old_0_7_worker, run_0_7, stop
from tests.reliability.tasks import held, mark
from tests.reliability.test_batch_outbox_edges import RELEASE_0_7
from tests.reliability.test_batch_upgrade import old_tree

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]

OLD_HELD = """
import sys
from django.core.management import call_command
from tests.reliability.tasks import held
call_command("migrate", verbosity=0)  # its own in-memory database: a keyed schedule reads it
tag, value, key = sys.argv[1:]
print(held.schedule(tag, value, 60, key=key).id)
"""


def started(runs_client, tag: str) -> list[str]:
    return runs(runs_client, f"{tag}:started")


def release(runs_client, tag: str) -> None:
    runs_client.set(f"runs:{tag}:release", 1)


def test_a_0_7_worker_runs_the_leader_and_a_new_worker_promotes_its_follower(
    servers, runs_server, runs_client, workers, prefix, tag, tmp_path, report
):
    data, store, old = old_0_7_worker(servers, runs_server, prefix, tmp_path)
    lead, rest, key = f"{tag}-lead", f"{tag}-rest", f"{tag}:customer"
    new = None
    try:
        with installed(store):
            leader = schedule(held, lead, "leader", 60, key=key, unique_until="end")
            wait_until(lambda: started(runs_client, lead), 60, "the 0.7.0 worker's leader")
            first = schedule(held, rest, "first", 60, key=key, unique_until="end")
            second = schedule(held, rest, "second", 60, key=key, unique_until="end")
            assert (first.outcome, first.status, first.waits_for) == (
                "created",
                "waiting",
                leader.id,
            )
            assert (second.outcome, second.id) == ("replaced", first.id)
            # A new worker beside the running leader: its recovery duty (every 2.5 s here,
            # its first pass at once) leaves the follower waiting while the leader runs.
            env = worker_env(data.url, runs_server.url, prefix)
            new = workers.start(env, "-v", "0", name="new")
            live = store.roster.live
            up = lambda: "new" in {w.name for w in live(store.server_time())}  # noqa: E731
            wait_until(up, 60, "the new worker on the roster")
            mark.schedule(rest, "probe")
            wait_until(lambda: "probe" in runs(runs_client, rest), 60, "the probe")
            time.sleep(6)  # two of its passes at least; the next lines hold whatever the pause
            assert get_job(first.id).status == "waiting"
            assert started(runs_client, rest) == [] and sizes(store)["pending"] == 0
            release(runs_client, lead)
            wait_until(lambda: runs(runs_client, lead) == ["leader"], 60, "the leader's end")
            # 0.7.0's ack promotes nothing; the new worker's next pass does: it runs once.
            wait_until(lambda: started(runs_client, rest), 60, "the follower promoted")
            assert runs(runs_client, lead) == ["leader"]  # its leader had ended
            release(runs_client, rest)
            wait_until(lambda: "second" in runs(runs_client, rest), 60, "the follower's run")
            wait_until(lambda: sizes(store)["running"] == 0, 60, "the follower's ack")
    finally:
        code = stop(old)
    assert new is not None
    new.signal(signal.SIGTERM)
    assert new.wait(30) == 0, new.output()
    done = runs(runs_client, rest)
    report(
        scenario="upgrade: unique_until='end', the leader run by a 0.7.0 worker",
        jobs=3,
        lost=int("second" not in done),
        duplicates=len(done) - len(set(done)),
    )
    assert started(runs_client, rest) == ["second"] and sorted(done) == ["probe", "second"]
    assert started(runs_client, lead) == ["leader"]
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert store.client.hlen(store.key("default", "keys")) == 0
    assert code == 0, (tmp_path / "o").read_text()


def test_a_0_7_producer_beside_new_workers_holds_its_keys_as_0_7_did(
    servers, runs_server, runs_client, workers, prefix, tag, tmp_path, report
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix)
    tree = old_tree(tmp_path, RELEASE_0_7, "0.7.0")
    new = workers.start(env, "--concurrency", "4", "-v", "0", name="new")
    wait_until(lambda: waiting_workers(data) >= 1, 60, "the new worker up")
    a, b, c, d = (f"{tag}-{n}" for n in "abcd")
    with installed(store):
        # 1. A 0.7.0 producer's keyed job (no flag 'h') holds its key while pending only.
        run_0_7(tree, env, OLD_HELD, a, "old-leader", f"{tag}:one")
        wait_until(lambda: started(runs_client, a), 60, "the 0.7.0 producer's job")
        beside = schedule(held, b, "beside", 60, key=f"{tag}:one", unique_until="end")
        assert (beside.outcome, beside.status) == ("created", "pending")
        wait_until(lambda: started(runs_client, b), 60, "the new job beside it")
        assert runs(runs_client, a) == []  # both run at once: 0.7.0's key did not hold
        # 2. A new leader (flag 'h') and its follower; a 0.7.0 producer's schedule of the
        # key meanwhile stores a second job beside the leader. The follower still waits.
        leader = schedule(held, c, "leader", 60, key=f"{tag}:two", unique_until="end")
        wait_until(lambda: started(runs_client, c), 60, "the new leader")
        follower = schedule(held, d, "follower", 60, key=f"{tag}:two", unique_until="end")
        assert (follower.status, follower.waits_for) == ("waiting", leader.id)
        run_0_7(tree, env, OLD_HELD, a, "old-beside", f"{tag}:two")
        wait_until(lambda: len(started(runs_client, a)) == 2, 60, "the 0.7.0 job beside")
        assert runs(runs_client, c) == [] and started(runs_client, d) == []
        assert get_job(follower.id).status == "waiting"
        release(runs_client, c)  # the leader ends on the new worker: its follower's turn
        wait_until(lambda: started(runs_client, d), 60, "the follower")
        assert runs(runs_client, c) == ["leader"]
        for t in (a, b, d):
            release(runs_client, t)
        wait_until(lambda: sizes(store)["running"] == 0 == sizes(store)["pending"], 60, "ends")
    new.signal(signal.SIGTERM)
    assert new.wait(30) == 0, new.output()
    done = runs(runs_client, a) + runs(runs_client, b) + runs(runs_client, d)
    report(
        scenario="upgrade: a 0.7.0 producer's keys beside unique_until='end'",
        jobs=5,
        lost=5 - len(set(done + runs(runs_client, c))),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == ["beside", "follower", "old-beside", "old-leader"]
    assert started(runs_client, d) == ["follower"]
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert store.client.hlen(store.key("default", "keys")) == 0
