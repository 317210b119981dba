"""A batch whose members are scheduled with ``on_commit`` in a transaction on the real
PostgreSQL, run by real worker processes: a rollback leaves nothing to run and no callback;
a commit runs the members, then the callbacks once; a producer SIGKILLed right after its
COMMIT (before relaying anything) leaves rows that a worker's relay takes to Redis, the
batch's seal among them, and the callbacks still run once, after every member."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from django.db import transaction

from django_delayq import batch, get_batch
from django_delayq.storage.store import Store
from tests.reliability.harness import ROOT, installed, wait_until, worker_env
from tests.reliability.tasks import timed
from tests.reliability.test_batches import check_callbacks, settled, timed_runs
from tests.reliability.test_outbox import pg, row_count, workers_env  # noqa: F401

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
]


class Rollback(Exception):
    pass


def callbacks(tag: str) -> dict[str, object]:
    return {f"on_{kind}": timed.call(tag, kind) for kind in ("success", "complete")}


def test_a_rolled_back_batch_runs_nothing_and_a_committed_one_runs_once(
    servers,
    runs_server,
    runs_client,
    workers,
    prefix,
    tag,
    pg,  # noqa: F811
    report,
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg, VISIBILITY_TIMEOUT=2)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="committer")
    gone, kept = f"{tag}:gone", f"{tag}:kept"
    with installed(store):
        with pytest.raises(Rollback), transaction.atomic(using="pg"):
            with batch(**callbacks(f"{gone}:cb")) as rolled_back:
                for i in range(3):
                    timed.schedule(gone, str(i), on_commit="pg")
            raise Rollback
        with transaction.atomic(using="pg"), batch(**callbacks(f"{kept}:cb")) as committed:
            for i in range(20):
                timed.schedule(kept, str(i), on_commit="pg")

        def done() -> bool:
            values = {r.value for r in timed_runs(runs_client, f"{kept}:cb")}
            return {"success", "complete"} <= values and settled(store)

        wait_until(done, 45, "the committed batch's callbacks")
        time.sleep(1.0)  # a callback stored twice, or a rolled-back member, would run now
        gone_state, kept_state = get_batch(rolled_back.id), get_batch(committed.id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    ran = timed_runs(runs_client, kept)
    report(scenario="batches: on_commit members, rollback then commit (PostgreSQL)", jobs=23)
    assert code == 0, proc.output()
    assert timed_runs(runs_client, gone) == [] and timed_runs(runs_client, f"{gone}:cb") == []
    assert gone_state.total is None and not gone_state.done  # never sealed
    assert gone_state.callbacks == {"success": None, "complete": None}
    assert sorted(int(r.value) for r in ran) == list(range(20))
    last_end = max(r.end for r in ran)
    wanted = {"success", "complete"}
    cb_runs = timed_runs(runs_client, f"{kept}:cb")
    check_callbacks(store, committed.id, cb_runs, wanted, last_end, Counter())
    assert (kept_state.total, kept_state.succeeded, kept_state.done) == (20, 20, True)
    assert row_count() == 0


def test_a_producer_killed_after_its_commit_leaves_the_batch_to_the_relay(
    servers,
    runs_server,
    runs_client,
    workers,
    prefix,
    tag,
    pg,  # noqa: F811
    report,
):
    count = 50
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg, VISIBILITY_TIMEOUT=2)
    producer = subprocess.run(
        [sys.executable, "-m", "tests.reliability.batch_producer", tag, str(count)],
        cwd=ROOT,
        env=workers_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert producer.returncode == -signal.SIGKILL, producer.stdout + producer.stderr
    batch_id = producer.stdout.split()[0]
    assert row_count() == count + 1  # the members and the seal, committed, not relayed
    assert store.client.zcard(store.key("default", "pending")) == 0
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="relay")

    def done() -> bool:
        values = {r.value for r in timed_runs(runs_client, f"{tag}:cb")}
        return {"success", "complete"} <= values and settled(store) and row_count() == 0

    with installed(store):
        wait_until(done, 60, "the relayed batch's callbacks")
        time.sleep(1.0)
        state = get_batch(batch_id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    ran = timed_runs(runs_client, tag)
    report(
        scenario="batches: producer SIGKILLed after COMMIT, relayed (PostgreSQL)",
        jobs=count,
        kills=1,
        lost=count - len({r.value for r in ran}),
        duplicates=len(ran) - len({r.value for r in ran}),
    )
    assert code == 0, proc.output()
    assert sorted(int(r.value) for r in ran) == list(range(count))
    last_end = max(r.end for r in ran)
    cb_runs = timed_runs(runs_client, f"{tag}:cb")
    check_callbacks(store, batch_id, cb_runs, {"success", "complete"}, last_end, Counter())
    assert (state.total, state.succeeded, state.done) == (count, count, True)
