"""A 0.7.0 worker process beside this version's code, for the rolling-deploy scenarios
(test_plain_upgrade, test_expiry_upgrade, test_throttle_upgrade): the old release's tree
taken from git, started on a data server of its own."""

from __future__ import annotations

import subprocess
from typing import Any

from django_delayq.storage.store import Store
from tests.reliability.harness import worker_env
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
