"""A 0.7.0 worker process beside this version's code, for the rolling-deploy scenarios
(test_plain_upgrade, test_expiry_upgrade, test_throttle_upgrade, test_unique_until_upgrade,
test_fair_upgrade): the old release's tree taken from git, started on a data server of its
own; and a 0.7.0 producer (run_0_7)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from django_delayq.storage.store import Store
from tests.reliability.harness import runs, sizes, wait_until, worker_env
from tests.reliability.test_batch_outbox_edges import RELEASE_0_7
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker


def old_0_7_worker(
    servers: Any, runs_server: Any, prefix: str, tmp_path: Any, queue: str = "default"
) -> tuple[Any, Store, subprocess.Popen]:
    """(the data server, a Store on it, a 0.7.0 ``delayq_worker`` serving ``queue`` there)."""
    data = servers.redis("data")
    env = worker_env(data.url, runs_server.url, prefix)
    tree = old_tree(tmp_path, RELEASE_0_7, "0.7.0")
    return data, Store(data.client(), prefix), start_old_worker(tree, env, tmp_path / "o", queue)


def run_0_7(tree: str, env: dict[str, str], source: str, *argv: str) -> None:
    """``source`` run by the 0.7.0 code in ``tree`` (django set up, ``argv`` as sys.argv[1:]):
    a 0.7.0 producer beside this version's workers."""
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
        "PYTHONPATH": tree,
        **env,
    }
    environ.pop("DELAYQ_TEST_DB", None)
    code = "import django\ndjango.setup()\n" + source
    subprocess.run([sys.executable, "-c", code, *argv], cwd=tree, env=environ, check=True)


def wait_every_job_ran(
    store: Store,
    runs_client: Any,
    tag: str,
    count: int,
    queue: str = "default",
    seconds: float = 60,
) -> None:
    """Until ``count`` runs of ``tag`` are recorded and nothing of ``queue`` is pending or
    running."""

    def ran_all() -> bool:
        state = sizes(store, queue)
        return len(runs(runs_client, tag)) >= count and state["pending"] == 0 == state["running"]

    wait_until(ran_all, seconds, f"every job of {queue} to run")


def stop(old: subprocess.Popen) -> int:
    """SIGTERM the old worker; its exit code."""
    old.send_signal(signal.SIGTERM)
    return old.wait(30)
