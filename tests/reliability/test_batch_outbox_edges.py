"""Batch members that wait in the database (issue 34), on PostgreSQL and on an SQLite file,
with real redis-server and delayq_worker processes and a producer process of its own
(tests/reliability/batch_edges_producer.py): a savepoint rolled back inside the block takes
its member out of the seal; a member beyond HORIZON cancelled by id, by key, replaced by its
key (far, near), or an on_commit member cancelled in its transaction ends for its batch, whose
on_complete then runs once, after the last member that ran; and so it does when Redis is down
as the cancel commits (the end waits in the outbox for the workers' relay), and when a 0.7.0
worker fails the job that carries it (it does not know its task)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from django_delayq import batch, cancel, get_batch
from django_delayq.batches.outbox_ends import ROW_END_TASK
from django_delayq.storage.store import Store
from tests.reliability.harness import ROOT, installed, wait_until, worker_env
from tests.reliability.tasks import timed
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker
from tests.reliability.test_batches import check_callbacks, settled, timed_runs
from tests.reliability.test_outbox import pg, produce, workers_env  # noqa: F401

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
]

HORIZON = 5
WANTED = {"success", "complete"}


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request, tmp_path):
    """The workers' and the producer's only database (JSON of a DATABASES entry): the test
    database on PostgreSQL, or an SQLite file (migrated first)."""
    if request.param == "postgresql":
        yield request.getfixturevalue("pg")
        return
    path = tmp_path / "outbox.sqlite3"
    yield json.dumps({"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)})


def start_producer(env: dict[str, str], tag: str, scenario: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.batch_edges_producer", tag, scenario],
        cwd=ROOT,
        env=workers_env(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(producer: subprocess.Popen) -> dict:
    out, err = producer.communicate(timeout=120)
    assert producer.returncode == 0, out + err
    return json.loads(out.strip().splitlines()[-1])


def environment(servers, runs_server, prefix, database) -> tuple[Store, dict[str, str]]:
    data = servers.redis("data")
    env = worker_env(
        data.url, runs_server.url, prefix, DATABASE=database, HORIZON=HORIZON, MAX_SLEEP=1
    )
    if "sqlite3" in database:
        produce(env, "migrate")
    return Store(data.client(), prefix), env


def check_batches(store, runs_client, tag, made, names) -> None:
    """Each batch ran on_success and on_complete... as wanted by its members' ends: every
    member that ran before them, once each; no job of ``made["gone"]`` ran."""
    ran = timed_runs(runs_client, tag)
    assert not {r.job_id for r in ran} & set(made["gone"]), ran
    for name in names:
        members = [r for r in ran if r.batch_id == made["batches"][name]]
        cb_runs = timed_runs(runs_client, f"{tag}:{name}:cb")
        wanted = WANTED if name == "sp" else {"complete"}
        check_callbacks(
            store, made["batches"][name], cb_runs, wanted, max(r.end for r in members), Counter()
        )


def test_a_savepoint_rolled_back_in_the_block_takes_its_member_out_of_the_seal(
    servers, runs_server, runs_client, workers, prefix, tag, database, report
):
    store, env = environment(servers, runs_server, prefix, database)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="savepoint")
    made = finished(start_producer(env, tag, "savepoint"))
    batch_id = made["batches"]["sp"]
    with installed(store):
        wait_until(lambda: get_batch(batch_id).total is not None, 45, "the seal")
        assert get_batch(batch_id).total == 2  # "0" and "2": "1" was rolled back
        members = store.client.hkeys(store.batch_keys(batch_id)[2])
        assert made["gone"][0].encode() not in members

        def done() -> bool:
            return {r.value for r in timed_runs(runs_client, f"{tag}:sp:cb")} >= WANTED

        wait_until(lambda: done() and settled(store), 45, "the callbacks")
        time.sleep(1.0)  # a callback stored twice would run now
        state = get_batch(batch_id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    report(scenario="batches: a savepoint rolled back in the block", jobs=3)
    assert code == 0, proc.output()
    assert sorted(r.value for r in timed_runs(runs_client, tag)) == ["0", "2"]
    check_batches(store, runs_client, tag, made, ["sp"])
    assert (state.total, state.succeeded, state.done) == (2, 2, True)


def test_members_waiting_in_the_database_end_when_cancelled_or_replaced(
    servers, runs_server, runs_client, workers, prefix, tag, database, report
):
    store, env = environment(servers, runs_server, prefix, database)
    procs = [workers.start(env, "--concurrency", "2", "-v", "1", name=f"w{n}") for n in (1, 2)]
    made = finished(start_producer(env, tag, "outbox"))
    names = list(made["batches"])

    def completed() -> bool:
        return all(
            "complete" in {r.value for r in timed_runs(runs_client, f"{tag}:{name}:cb")}
            for name in names
        )

    with installed(store, HORIZON=HORIZON):
        wait_until(lambda: completed() and settled(store), 60, "every batch's on_complete")
        time.sleep(1.0)
        states = {name: get_batch(made["batches"][name]) for name in names}
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    report(scenario="batches: members in the database cancelled or replaced", jobs=10)
    assert codes == [0, 0], workers.outputs()
    check_batches(store, runs_client, tag, made, names)
    for name, state in states.items():
        assert (state.total, state.succeeded, state.cancelled, state.done) == (2, 1, 1, True)
        assert state.callbacks == {"success": None, "complete": "scheduled"}, name
    other = sorted(r.value for r in timed_runs(runs_client, f"{tag}:other"))
    assert other == ["replaced-near"]  # the near replace ran; the far one waits its hour


def test_a_cancelled_row_ends_even_when_redis_is_down_at_its_commit(
    servers, runs_server, runs_client, workers, prefix, tag, database, report
):
    store, env = environment(servers, runs_server, prefix, database)
    data = servers.redis("data")
    producer = start_producer(env, tag, "outbox-down")
    assert producer.stdout.readline().strip() == "cancelled"
    data.stop()
    producer.stdin.write("go\n")
    producer.stdin.flush()
    made = finished(producer)  # committed: the row deleted, its end a row of its own
    data.start()
    batch_id = made["batches"]["down"]
    with installed(store, HORIZON=HORIZON):
        assert get_batch(batch_id).cancelled == 0  # nothing reached Redis at the commit
        proc = workers.start(env, "--concurrency", "2", "-v", "1", name="relay")
        wait_until(
            lambda: (
                "complete" in {r.value for r in timed_runs(runs_client, f"{tag}:down:cb")}
                and settled(store)
            ),
            60,
            "on_complete",
        )
        time.sleep(1.0)
        state = get_batch(batch_id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    report(scenario="batches: a row's cancel committed while Redis is down", jobs=2)
    assert code == 0, proc.output()
    check_batches(store, runs_client, tag, made, ["down"])
    assert (state.total, state.succeeded, state.cancelled, state.done) == (2, 1, 1, True)


RELEASE_0_7 = "2b5d190"  # the 0.7.0 main this work started from


def test_a_row_s_end_that_a_0_7_worker_fails_is_run_by_a_new_one(
    servers,
    runs_server,
    runs_client,
    workers,
    prefix,
    tag,
    pg,  # noqa: F811
    tmp_path,
    report,
):
    """docs/howto/upgrading.rst: a 0.7.0 worker does not know the task that carries a row's
    end (``django_delayq.batches.row_ended``): its attempt fails and is retried; a new
    worker then runs it, and the batch ends."""
    store, env = environment(servers, runs_server, prefix, pg)
    env["DELAYQ_RETRY_BACKOFF"] = "2"  # the old worker must not use up the retries at once
    old = start_old_worker(old_tree(tmp_path, RELEASE_0_7, "0.7.0"), env, tmp_path / "o", "default")
    errors = store.key("default", "errors")
    try:
        with installed(store, HORIZON=HORIZON):
            with batch(on_complete=timed.call(f"{tag}:cb", "complete")) as b:
                far = timed.schedule(tag, "far", delay=3600)
                timed.schedule(tag, "now")
            assert far.waits_in == "database"
            wait_until(lambda: get_batch(b.id).succeeded == 1, 45, "the old worker's member")
            assert cancel(far.id)
            wait_until(lambda: store.client.hlen(errors) == 1, 45, "the old worker's failure")
            (failed,) = store.client.hvals(errors)
            assert b"TaskNotFound" in failed and ROW_END_TASK.encode() in failed
    finally:
        old.send_signal(signal.SIGTERM)
        old.wait(30)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="new")
    with installed(store, HORIZON=HORIZON):
        wait_until(
            lambda: timed_runs(runs_client, f"{tag}:cb") and settled(store), 60, "on_complete"
        )
        time.sleep(1.0)
        state = get_batch(b.id)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    report(scenario="batches: a row's end failed by a 0.7.0 worker, run by a new one", jobs=2)
    assert code == 0, proc.output()
    assert [r.value for r in timed_runs(runs_client, tag)] == ["now"]
    assert [r.value for r in timed_runs(runs_client, f"{tag}:cb")] == ["complete"]
    assert (state.total, state.succeeded, state.cancelled, state.done) == (2, 1, 1, True)
