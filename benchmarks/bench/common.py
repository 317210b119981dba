"""What every workload shares: sizes, Django set-up, statistics, figures, worker
processes (with their CPU time) and a dedicated redis-server."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
QUEUE = "default"

SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "schedule": 20_000,
        "drain": 20_000,
        "idle_jobs": 500,
        "idle_seconds": 5.0,
        "load_rate": 1000,
        "load_seconds": 10.0,
        "memory": 100_000,
        "claim_small": 1_000,
        "claim_big": 1_000_000,
        "claim_cycles": 500,
        "runs": 5,
        "slow_runs": 3,
        # the real-task workloads (issue 11)
        "push": 5_000,
        "orm": 3_000,
        "sleep": 4_000,
        "groups": 4_000,  # bench/groups.py: jobs over 1,000 keys, 5 hot keys x groups_hot
        "groups_hot": 100,
        "groups_backlog": (600, 1_000),  # 5 hot keys x 600 due first, 1,000 jobs of others
        "async_sleep": 2_000,  # issue 21: async tasks on the worker's event loop
        # issue 21: task 1 under --processes 1 and 2 (a 5,000-job drain lasts under a
        # second at two processes, mostly the prefetch's ramp-up)
        "processes_push": 20_000,
        "idle_worker_seconds": 30.0,
        "idle_worker_runs": 1,
        # the outbox (issue 12)
        "outbox_memory": 100_000,
        "outbox_relay": 100_000,
        "outbox_schedule": 2_000,
        # recurring schedules (issue 19): N schedules every minute, seconds of running
        "recurring": 2_000,
        "recurring_seconds": 130.0,
        # recurring at scale (issue 25; bench/recurring_scale.py): N, N2, minute boundaries
        "recurring_scale": 10_000,
        "recurring_big": 100_000,
        "recurring_minutes": 3,
        # batches and chains (bench/batches.py): jobs in one batch, (batches, members) of
        # the on_complete latency, steps of a chain
        "batch": 10_000,
        "batch_latency": (20, 500),
        "chain": 1_000,
    },
    "quick": {
        "schedule": 300,
        "drain": 300,
        "idle_jobs": 20,
        "idle_seconds": 0.5,
        "load_rate": 200,
        "load_seconds": 0.5,
        "memory": 2_000,
        "claim_small": 200,
        "claim_big": 5_000,
        "claim_cycles": 50,
        "runs": 1,
        "slow_runs": 1,
        "push": 300,
        "orm": 300,
        "sleep": 400,
        "groups": 400,
        "groups_hot": 10,
        "groups_backlog": (60, 100),
        "async_sleep": 400,
        "processes_push": 300,
        "idle_worker_seconds": 3.0,
        "idle_worker_runs": 1,
        "outbox_memory": 2_000,
        "outbox_relay": 2_000,
        "outbox_schedule": 100,
        "recurring": 100,
        "recurring_seconds": 65.0,
        "recurring_scale": 500,
        "recurring_big": 2_000,
        "recurring_minutes": 1,
        "batch": 300,
        "batch_latency": (3, 20),
        "chain": 30,
    },
}


# -- set-up ---------------------------------------------------------------------------


def setup_django(prefix: str) -> None:
    os.environ["DELAYQ_BENCH_PREFIX"] = prefix
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    import django

    django.setup()


def bench_store() -> Any:
    from django_delayq.storage.connection import get_store

    return get_store()


def cleanup(client: Any, prefix: str) -> None:
    """Delete every key under ``prefix:`` (and nothing else)."""
    batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(batch), 500):
        client.delete(*batch[start : start + 500])


def pending_count(store: Any) -> int:
    return store.client.zcard(store.key(QUEUE, "pending"))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.start


def figure(
    name: str,
    label: str,
    values: list[float],
    baselines: list[float],
    unit: str,
    target: str,
    met: Callable[[float, float], bool] | None,
    ratio_kind: str = "value/baseline",
    note: str = "",
) -> dict[str, Any]:
    """One row of the table: the median of ``values`` and of ``baselines``, the median
    of the per-run ratios, and whether the target is met (None: no target)."""
    value, baseline = median(values), median(baselines) if baselines else None
    ratios = [v / b for v, b in zip(values, baselines, strict=False) if b]
    ratio = median(ratios) if ratios else None
    return {
        "name": name,
        "label": label,
        "value": value,
        "baseline": baseline,
        "ratio": ratio,
        "ratio_kind": ratio_kind,
        "unit": unit,
        "target": target,
        "met": None if met is None else bool(met(value, ratio if ratio is not None else nan())),
        "runs": values,
        "baseline_runs": baselines,
        "note": note,
    }


def nan() -> float:
    return float("nan")


# -- worker processes -------------------------------------------------------------------


def worker_env(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "DELAYQ_BENCH_STAMPS": str(workdir),
    }
    env.update(extra or {})
    return env


def proc_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread) a running process has used so far,
    from /proc/<pid>/stat (Linux): the same accounting as its rusage, readable while
    it runs, at clock-tick (10 ms) resolution."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every core since boot, from /proc/stat (Linux): two
    readings give the share of the machine that was busy in between (:func:`busy_share`)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's cores (0..1) busy between two :func:`machine_ticks`."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else nan()


class Workers:
    """``python -m django delayq_worker`` processes logging to files in ``workdir``.

    The processes are reaped with ``os.wait4``, never with Popen.wait/poll, so the
    rusage of each (its own CPU time, every thread, start-up included) is kept in
    :attr:`usage` once it has exited."""

    def __init__(
        self,
        count: int,
        workdir: Path,
        *args: str,
        concurrency: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.logs = [workdir / f"worker-{i}-{time.monotonic_ns()}.log" for i in range(count)]
        self.procs: list[subprocess.Popen] = []
        self.usage: list[Any] = [None] * count
        self.start_cpu: list[float | None] = [None] * count  # see sample_started()
        self.end_cpu: list[float] | None = None  # see sample_end()
        command = [
            sys.executable,
            "-m",
            "django",
            "delayq_worker",
            "--concurrency",
            str(concurrency),
            *args,
        ]
        for log in self.logs:
            with open(log, "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=worker_env(workdir, env),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )

    def _reap(self, index: int, block: bool = False) -> int | None:
        """The exit code of process ``index``, reaping it (and keeping its rusage) if it
        exited; None while it runs."""
        proc = self.procs[index]
        if proc.returncode is not None:
            return proc.returncode
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return None
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.usage[index] = usage
        return proc.returncode

    def wait_started(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(" started: queues " in log.read_text() for log in self.logs):
                time.sleep(0.3)  # let the waker threads reach BLPOP
                return
            self.check_alive()
            time.sleep(0.02)
        raise RuntimeError("workers did not start: " + self.tail())

    def check_alive(self) -> None:
        for index, proc in enumerate(self.procs):
            if self._reap(index) not in (None, 0):
                raise RuntimeError(f"worker exited with {proc.returncode}: " + self.tail())

    def running(self) -> bool:
        return any(self._reap(index) is None for index in range(len(self.procs)))

    def _wait_all(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def wait(self, timeout: float = 120.0) -> None:
        if not self._wait_all(timeout):
            raise RuntimeError(f"workers still running after {timeout:g} s: " + self.tail())
        self.check_alive()

    def stop(self) -> None:
        """SIGTERM (a graceful stop), then wait; SIGKILL after 30 s."""
        for index, proc in enumerate(self.procs):
            if self._reap(index) is None:
                proc.send_signal(signal.SIGTERM)
        if not self._wait_all(30):
            for index, proc in enumerate(self.procs):
                if self._reap(index) is None:
                    proc.kill()
                    self._reap(index, block=True)

    def cpu_seconds(self) -> list[float]:
        """user + system CPU seconds of each exited process (from its rusage)."""
        return [u.ru_utime + u.ru_stime for u in self.usage if u is not None]

    def sample_started(self) -> bool:
        """Read the CPU time of each process that has logged "started" since the last
        call (its start-up: imports, Django, the Worker; the claims come after that
        line). True once every process is sampled. Call it every few ms."""
        for index, log in enumerate(self.logs):
            if self.start_cpu[index] is None and " started: queues " in log.read_text():
                self.start_cpu[index] = proc_cpu_seconds(self.procs[index].pid)
        return all(cpu is not None for cpu in self.start_cpu)

    def wait_sampled(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.sample_started():
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start: " + self.tail())
            self.check_alive()
            time.sleep(0.002)

    def sample_end(self) -> None:
        """Read the CPU time of every process now, when the work is done and before they
        exit (a zombie's times are still readable): exit is not a per-job cost either."""
        self.end_cpu = [proc_cpu_seconds(proc.pid) for proc in self.procs]

    def work_cpu_seconds(self) -> float:
        """CPU seconds the processes used between "started" and :meth:`sample_end`
        (without it: until they exited, from their rusage), together."""
        if any(cpu is None for cpu in self.start_cpu):
            raise RuntimeError("sample_started() was not called while the workers started")
        end = self.end_cpu if self.end_cpu is not None else self.cpu_seconds()
        return sum(end) - sum(c for c in self.start_cpu if c is not None)

    def tail(self) -> str:
        return "\n".join(log.read_text()[-2000:] for log in self.logs if log.exists())


# -- a dedicated redis-server for memory, scale and Redis CPU ----------------------------


@contextlib.contextmanager
def dedicated_redis(binary: str | None) -> Iterator[Any]:
    """A fresh redis-server on a free loopback port (persistence off), or None."""
    import redis

    path = binary or shutil.which("redis-server")
    if not path:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="delayq-bench-redis-")
    proc = subprocess.Popen(
        [
            path,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port, client_name="delayq-bench-admin")
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"could not start {path} on port {port}") from None
                time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def url_of(client: Any) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


@contextlib.contextmanager
def store_on(client: Any, prefix: str) -> Iterator[Any]:
    """Make the API (schedule_many, get_store) use ``client`` while inside."""
    from django.test import override_settings

    from django_delayq.storage import connection

    with override_settings(DELAYQ={"REDIS_URL": url_of(client), "PREFIX": prefix}):
        try:
            yield connection.get_store()
        finally:
            connection.reset()
    connection.reset()


@contextlib.contextmanager
def django_on_own_redis(prefix: str) -> Iterator[tuple[Any, Any] | None]:
    """A dedicated redis-server, Django set up to use it under ``prefix``: (its client,
    the store); None when no redis-server is found (the caller says so)."""
    with dedicated_redis(None) as own:
        if own is None:
            yield None
            return
        os.environ["REDIS_URL"] = url_of(own)
        setup_django(prefix)
        yield own, bench_store()
