"""A rolling deploy: workers of the release before batches (0.5.0, the commit before they
landed) beside new ones. A batch member run and acknowledged by an old worker: its old
ack.lua knows no links, so does the batch ever hear of its end?"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from django_delayq import batch, get_batch
from django_delayq.storage.store import Store
from tests.reliability.harness import ROOT, installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import mark, timed
from tests.reliability.test_batches import timed_runs

pytestmark = pytest.mark.reliability

BEFORE_BATCHES = "cd75a54"  # the last commit before batches landed (version 0.5.0)


def old_tree(path, commit: str = BEFORE_BATCHES, release: str = "0.5.0") -> str:
    """django_delayq and tests as they were at ``commit``, extracted under ``path``."""
    archive = path / "old.tar"
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True
    )
    if found.returncode != 0:  # a shallow clone, or no git checkout at all
        pytest.skip(f"this checkout has no commit {commit} ({release}) to run a worker of")
    subprocess.run(
        ["git", "archive", "-o", str(archive), commit, "django_delayq", "tests"],
        cwd=ROOT,
        check=True,
    )
    with tarfile.open(archive) as tar:
        tar.extractall(path / "old", filter="data")
    return str(path / "old")


def start_old_worker(tree: str, env: dict[str, str], log, queue: str) -> subprocess.Popen:
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
        "PYTHONPATH": tree,
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    environ.pop("DELAYQ_TEST_DB", None)
    with open(log, "w") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "django",
                "delayq_worker",
                "--name",
                "old",
                "--queues",
                queue,
                "--force",
            ],
            cwd=tree,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_a_member_acked_by_an_old_worker_never_reaches_its_batch(
    servers, runs_server, runs_client, workers, prefix, tag, tmp_path
):
    """The limit docs/howto/upgrading.rst states (every worker on 0.6 before the first
    batch): a 0.5.0 worker runs a batch member, but its own ack.lua writes no forward entry
    and leaves the job's link in its queue's `links` hash, so the batch never hears of the
    member (pending, no callback, whatever the new worker's sweeps do). This test fails the
    day that changes, so the docs change with it."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    old = start_old_worker(old_tree(tmp_path), env, tmp_path / "old.log", "old")
    new = workers.start(env, "-v", "1", name="new")  # the queue "default": the callback
    try:
        with installed(store):
            with batch(on_complete=timed.call(f"{tag}:cb", "complete")) as b:
                mark.schedule(tag, "by-old", queue="old")
            wait_until(lambda: runs(runs_client, tag) == ["by-old"], 30, "the old worker's run")
            wait_until(lambda: sizes(store, "old")["running"] == 0, 30, "its ack")
            # A forward entry would be forwarded by the new worker's sweep within ~4 s (its
            # recovery pass every lease/2, entries older than a lease).
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and not timed_runs(runs_client, f"{tag}:cb"):
                time.sleep(0.2)
            state = get_batch(b.id)
    finally:
        old.send_signal(signal.SIGTERM)
        old.wait(30)
        new.signal(signal.SIGTERM)
        new.wait(30)
    assert (state.total, state.pending, state.done) == (1, 1, False), state
    assert timed_runs(runs_client, f"{tag}:cb") == []
    assert data.client().hlen(store.key("old", "links")) == 1  # the link the old ack left
