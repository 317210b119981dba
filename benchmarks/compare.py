"""django-delayq beside huey, RQ, Celery, dramatiq, arq and saq: the same delayed-job
workloads, one run, one Redis.

Usage (from the repository root, any Python 3.11+; nothing else needs installing)::

    python benchmarks/compare.py                # every system, about 12 minutes on 2 cores
    python benchmarks/compare.py --rounds 3     # all of it 3 times, medians: about 37
    python benchmarks/compare.py --quick        # tiny sizes: a smoke test, about 3
    python benchmarks/compare.py --systems django-delayq,huey --only drain --refresh

What it does:

- Starts its own ``redis-server`` (``--redis-server``, default the one on ``PATH``) on a
  free 127.0.0.1 port with persistence off, and runs every system on it, one at a
  time, with ``FLUSHALL`` before each workload. It never touches another Redis.
- Installs each system into its own virtualenv under ``benchmarks/.venvs/<name>``
  (git-ignored) with the interpreter given by ``--python`` (default: the one running
  this script), from PyPI with the ranges in ``SYSTEMS``; django-delayq is this
  checkout, installed editable. Existing virtualenvs are reused unless the interpreter
  or the requirements changed, or ``--refresh`` is given. ``arq-10`` is arq again, in
  the same virtualenv, at its default concurrency (``max_jobs`` 10): at concurrency 1
  arq's worker starts one job per poll (every 0.5 s).
- Runs each system's producer (``benchmarks/peers/producer.py``) and its worker as
  subprocesses of that virtualenv. Every system runs the same task ("task 1"): one
  RPUSH on the worker process's own redis-py client (``benchmarks/peers/recorder.py``;
  for arq and saq, whose tasks are coroutines, the same RPUSH awaited on a
  ``redis.asyncio`` client).
- Prints one table (figures x systems, with versions) and writes JSON (``--json``,
  default ``benchmarks/results/compare.json``).

Workloads (full size; ``--quick`` shrinks them):

1. schedule rate: 5,000 jobs due in 1 h, one API call per job, median of 3 runs.
2. lateness: 200 jobs stored up front, due evenly over 10 s (20 a second, well below
   every worker's capacity but arq's at max_jobs 1), one worker at concurrency 1: the
   task's start time minus its due time, p50 and p99, and the earliest (negative: a job
   started early).
3. drain: 10,000 jobs stored while the worker idles, all due at the same moment; jobs/s
   from the first task start to the last task's RPUSH (or to 30 s after the first start,
   for a system slower than that), and the CPU seconds of the worker's process tree
   (``/proc``: its own and its reaped children's) per 1,000 jobs, from before the jobs
   were stored (a worker that takes them in early does that work then) to the end.
4. memory: 20,000 jobs due in 1 h with a 20-byte argument, worker running: the Redis
   ``used_memory`` delta per job, and the worker's RSS growth per job (where a system
   keeps delayed jobs in the worker instead).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.peers.report import FIGURES, render  # noqa: E402 (needs ROOT on the path)
from benchmarks.peers.resp import Resp  # noqa: E402

DONE_KEY = "bench:done"

ARQ = ["arq>=0.26,<1"]

# name -> label, optional variant (a setting shown after the version), adapter module,
# pip requirements, optional venv (shared with the system of that name), optional env.
SYSTEMS: dict[str, dict[str, Any]] = {
    "django-delayq": {
        "label": "django-delayq",
        "adapter": "delayq_adapter",
        "requirements": ["-e", str(ROOT)],
        "env": {"DJANGO_SETTINGS_MODULE": "benchmarks.settings", "DELAYQ_BENCH_PREFIX": "dq"},
    },
    "huey": {
        "label": "huey",
        "adapter": "huey_adapter",
        "requirements": ["huey>=2.5,<4", "redis>=5"],
    },
    "rq": {"label": "RQ", "adapter": "rq_adapter", "requirements": ["rq>=2.0,<4"]},
    "celery": {
        "label": "Celery",
        "adapter": "celery_adapter",
        "requirements": ["celery[redis]>=5.3,<6"],
    },
    "dramatiq": {
        "label": "dramatiq",
        "adapter": "dramatiq_adapter",
        "requirements": ["dramatiq[redis]>=1.17,<3"],
    },
    "arq": {"label": "arq", "adapter": "arq_adapter", "requirements": ARQ},
    # arq's own default concurrency: at max_jobs 1 its worker starts one job per poll
    "arq-10": {
        "label": "arq",
        "variant": "max_jobs 10",
        "adapter": "arq_adapter",
        "venv": "arq",  # the same virtualenv (same requirements), another setting
        "requirements": ARQ,
        "env": {"BENCH_ARQ_MAX_JOBS": "10"},
    },
    "saq": {
        "label": "saq",
        "adapter": "saq_adapter",
        # saq 0.26.4 imports typing_extensions without declaring it
        "requirements": ["saq[redis]>=0.25,<1", "typing_extensions"],
    },
}

SIZES = {
    "full": {"rate": 5_000, "rate_runs": 3, "late": 200, "late_seconds": 10.0},
    "quick": {"rate": 300, "rate_runs": 1, "late": 30, "late_seconds": 1.0},
}
SIZES["full"].update(drain=10_000, drain_cap=30.0, memory=20_000)
SIZES["quick"].update(drain=300, drain_cap=20.0, memory=2_000)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the dedicated redis-server --------------------------------------------------------


@contextlib.contextmanager
def own_redis(binary: str) -> Iterator[tuple[int, Resp]]:
    """A fresh redis-server on a free loopback port, persistence off; stopped at exit."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="delayq-compare-redis-")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
    args += ["no", "--dir", workdir, "--protected-mode", "yes"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client = Resp(port)
                client("PING")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"could not start {binary} on port {port}") from None
                time.sleep(0.05)
        yield port, client
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def used_memory(redis: Resp) -> int:
    info = redis("INFO", "memory").decode()
    return int(next(line for line in info.splitlines() if line.startswith("used_memory:"))[12:])


# -- virtualenvs -----------------------------------------------------------------------


def python_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def ensure_venv(name: str, python: str, cache: Path, refresh: bool) -> Path:
    """``cache/<venv>`` with the system installed; rebuilt when its stamp differs."""
    venv = cache / SYSTEMS[name].get("venv", name)
    requirements = SYSTEMS[name]["requirements"]
    stamp = {"python": python_version(python), "requirements": requirements}
    if name == "django-delayq":  # editable: only its dependencies can go stale
        stamp["pyproject"] = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp_file = venv / "compare-stamp.json"
    if not refresh and stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        return venv
    log(f"installing {name} into {venv} ({' '.join(requirements)})")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    pip.append("--disable-pip-version-check")
    result = subprocess.run([*pip, *requirements], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(requirements)} failed:\n{result.stderr[-3000:]}")
    stamp_file.write_text(json.dumps(stamp) + "\n")
    return venv


# -- processes of one system -----------------------------------------------------------


class System:
    """One system's virtualenv, environment, producer calls and worker processes."""

    def __init__(self, name: str, venv: Path, url: str, workdir: Path) -> None:
        self.name, self.venv, self.workdir = name, venv, workdir
        self.spec = SYSTEMS[name]
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "REDIS_URL"}
        }
        self.env.update(
            PYTHONPATH=str(ROOT),
            BENCH_REDIS_URL=url,
            REDIS_URL=url,
            PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            **self.spec.get("env", {}),
        )
        self.describe = self.produce("describe")

    def produce(self, command: str, timeout: float = 600, **options: float) -> dict[str, Any]:
        args = [str(self.venv / "bin" / "python"), "-m", "benchmarks.peers.producer"]
        args += [self.spec["adapter"], command]
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        result = subprocess.run(
            args, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0 or not result.stdout.strip():
            raise RuntimeError(f"{self.name} producer {command} failed:\n{result.stderr[-3000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    @contextlib.contextmanager
    def worker(self, redis: Resp) -> Iterator[Worker]:
        """A running worker that has run one probe job, with the done list emptied."""
        argv = list(self.describe["worker"])
        argv[0] = str(self.venv / "bin" / argv[0])
        worker = Worker(argv, self.env, self.workdir / f"{self.name}-{time.monotonic_ns()}.log")
        try:
            redis("DEL", DONE_KEY)
            self.produce("probe")
            deadline = time.monotonic() + 60
            while not redis("LLEN", DONE_KEY):
                worker.check_alive()
                if time.monotonic() > deadline:
                    tail = worker.tail()
                    raise RuntimeError(f"{self.name} worker ran no probe job in 60 s: {tail}")
                time.sleep(0.02)
            redis("DEL", DONE_KEY)
            yield worker
        finally:
            worker.stop()


class Worker:
    def __init__(self, argv: list[str], env: dict[str, str], logfile: Path) -> None:
        self.logfile = logfile
        self.graceful = True
        with open(logfile, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() can reach what it forked
            )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {self.proc.returncode}: {self.tail()}")

    def tail(self) -> str:
        return self.logfile.read_text(errors="replace")[-2000:] if self.logfile.exists() else ""

    def stop(self) -> None:
        """SIGTERM (a graceful stop for every system here), SIGKILL after 30 s; SIGKILL
        at once unless ``graceful``."""
        if self.proc.poll() is None and not self.graceful:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                log(f"worker {self.proc.pid} ignored SIGTERM for 30 s: killing its group")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):  # helpers it left behind, if any
            os.killpg(self.proc.pid, signal.SIGKILL)

    def tree(self) -> list[list[str]]:
        """``/proc/<pid>/stat`` fields (after the command) of the worker and descendants."""
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    text = Path(f"/proc/{entry}/stat").read_text()
                    stats[int(entry)] = text[text.rindex(")") + 2 :].split()
        members, frontier = [], [self.proc.pid]
        while frontier:
            pid = frontier.pop()
            if pid in stats:
                members.append(stats[pid])
                frontier += [p for p, fields in stats.items() if int(fields[1]) == pid]
        return members

    def cpu_seconds(self) -> float:
        """utime + stime + cutime + cstime of the tree (reaped children included)."""
        ticks = os.sysconf("SC_CLK_TCK")
        return sum(sum(int(f) for f in fields[11:15]) for fields in self.tree()) / ticks

    def rss_bytes(self) -> int:
        return sum(int(fields[21]) for fields in self.tree()) * os.sysconf("SC_PAGE_SIZE")


# -- workloads -------------------------------------------------------------------------


def done_stamps(redis: Resp) -> list[tuple[str, float]]:
    stamps = []
    for item in redis("LRANGE", DONE_KEY, "0", "-1"):
        tag, started = item.decode().split()
        stamps.append((tag, float(started)))
    return stamps


def wait_done(
    redis: Resp, worker: Worker, n: int, stall: float, cap: float = 0
) -> tuple[float, int]:
    """Poll until ``n`` tasks pushed their stamp, or ``cap`` seconds (if set) after the
    first one did: (that moment, how many had). Fails after ``stall`` seconds without
    progress."""
    count, progress, first = 0, time.monotonic(), None
    while True:
        now = time.time()
        current = redis("LLEN", DONE_KEY)
        if current >= n:
            return now, current
        if current and first is None:
            first = now
        if cap and first is not None and now - first >= cap:
            return now, current
        if current != count:
            count, progress = current, time.monotonic()
        elif time.monotonic() - progress > stall:
            raise RuntimeError(f"stalled at {count:,} of {n:,} jobs for {stall:g} s")
        worker.check_alive()
        time.sleep(0.005)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q% of all at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def bench_rate(system: System, redis: Resp, size: dict) -> dict[str, Any]:
    runs = []
    for _ in range(size["rate_runs"]):
        redis("FLUSHALL")
        result = system.produce("rate", n=size["rate"])
        if result["pending"] != size["rate"] + 1:
            raise RuntimeError(f"{result['pending']} pending after {size['rate'] + 1} calls")
        runs.append(result["jobs_per_s"])
    return {"rate": statistics.median(runs), "rate_runs": runs}


def per_job_lead(figures: dict[str, Any]) -> float:
    """Seconds per job to allow for storing a batch: 3 times this system's measured time
    per call, as its worker may be busy taking the jobs in meanwhile (a producer slower
    than that is flagged in the table, not hidden)."""
    return 3.0 / figures.get("rate", 500.0)


def bench_lateness(system: System, redis: Resp, size: dict, figures: dict) -> dict[str, Any]:
    n, spacing = size["late"], size["late_seconds"] / size["late"]
    redis("FLUSHALL")
    with system.worker(redis) as worker:
        lead = per_job_lead(figures)
        sent = system.produce("at", n=n, lead=1.0, lead_per_job=lead, spacing=spacing)
        wait_done(redis, worker, n, stall=30)
        stamps = done_stamps(redis)
    late = [(started - (sent["t0"] + int(tag) * spacing)) * 1000 for tag, started in stamps]
    if len(late) != n or len({tag for tag, _ in stamps}) != n:
        raise RuntimeError(f"{len(late)} stamps for {n} jobs")
    return {
        "late_p50": percentile(late, 50),
        "late_p99": percentile(late, 99),
        "late_min": min(late),
        "late_max": max(late),
        "late_overlap": sent["stored_at"] > sent["t0"],
    }


def bench_drain(system: System, redis: Resp, size: dict, figures: dict) -> dict[str, Any]:
    n = size["drain"]
    redis("FLUSHALL")
    with system.worker(redis) as worker:
        cpu_before = worker.cpu_seconds()
        sent = system.produce("at", n=n, lead=1.0, lead_per_job=per_job_lead(figures))
        end, done = wait_done(redis, worker, n, stall=60, cap=size["drain_cap"])
        cpu = worker.cpu_seconds() - cpu_before
        stamps = done_stamps(redis)
    if len({tag for tag, _ in stamps}) != len(stamps) or len(stamps) < done:
        raise RuntimeError(f"{len(stamps)} stamps, {len({t for t, _ in stamps})} distinct")
    first = min(started for _, started in stamps)
    return {
        "drain": done / (end - first),
        "drain_cpu": cpu / done * 1000,
        "drain_done": done,
        "drain_seconds": end - first,
        "drain_first_late_ms": (first - sent["t0"]) * 1000,
        "drain_overlap": sent["stored_at"] > sent["t0"],
    }


def settle(redis: Resp, worker: Worker, quiet: float, limit: float = 180) -> None:
    """Wait until Redis memory and the worker's RSS stay put for ``quiet`` seconds."""
    last, since, deadline = None, time.monotonic(), time.monotonic() + limit
    while time.monotonic() < deadline:
        now = (used_memory(redis), worker.rss_bytes() // 65536)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        worker.check_alive()
        time.sleep(0.1)
    log(f"memory still moving after {limit:g} s; measuring anyway")


def bench_memory(system: System, redis: Resp, size: dict) -> dict[str, Any]:
    n = size["memory"]
    redis("FLUSHALL")
    with system.worker(redis) as worker:
        settle(redis, worker, quiet=1.0)
        memory, rss = used_memory(redis), worker.rss_bytes()
        system.produce("memory", n=n)
        settle(redis, worker, quiet=2.0)
        memory, rss = used_memory(redis) - memory, worker.rss_bytes() - rss
        pending = system.produce("pending")["pending"]
        worker.graceful = False  # measured; a warm shutdown of 20k held tasks takes long
    if pending != n:
        raise RuntimeError(f"{pending:,} jobs pending in Redis after {n:,} were scheduled")
    return {"memory": memory / n, "rss": rss / n}


WORKLOADS: list[tuple[str, Callable[..., dict[str, Any]]]] = [
    ("rate", lambda system, redis, size, figures: bench_rate(system, redis, size)),
    ("lateness", bench_lateness),
    ("drain", bench_drain),
    ("memory", lambda system, redis, size, figures: bench_memory(system, redis, size)),
]


def run_system(system: System, redis: Resp, size: dict, only: list[str]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, workload in WORKLOADS:
        if name not in only:
            continue
        log(f"{system.name}: {name}")
        started = time.monotonic()
        try:
            figures.update(workload(system, redis, size, figures))
        except Exception as exc:  # one failed cell must not lose the others
            errors[name] = f"{type(exc).__name__}: {exc}"
            log(f"{system.name}: {name} failed: {errors[name]}")
        figures[f"{name}_wall_s"] = round(time.monotonic() - started, 1)
    redis("FLUSHALL")
    return {"figures": figures, "errors": errors}


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's rounds as one: the median of each figure, any flag raised, the
    errors of any round (a workload that failed once is reported failed)."""
    figures: dict[str, Any] = {}
    for key in {key for r in rounds for key in r["figures"]}:
        values = [r["figures"][key] for r in rounds if key in r["figures"]]
        if all(isinstance(v, bool) for v in values):
            figures[key] = any(values)
        elif all(isinstance(v, (int, float)) for v in values):
            figures[key] = statistics.median(values)
        else:
            figures[key] = values
    errors: dict[str, str] = {}
    for r in rounds:
        for workload, error in r["errors"].items():
            errors.setdefault(workload, error)
    return {"figures": figures, "errors": errors}


# -- main ------------------------------------------------------------------------------


def environment(redis: Resp, python: str) -> dict[str, Any]:
    info = redis("INFO", "server").decode()
    server = next(line for line in info.splitlines() if line.startswith("redis_version:"))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "python": python_version(python),
        "redis_server": server.split(":", 1)[1].strip(),
        "platform": platform.platform(),
        "commit": commit,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    parser.add_argument("--only", default=",".join(n for n, _ in WORKLOADS), help="workloads")
    parser.add_argument("--python", default=sys.executable, help="interpreter for every venv")
    parser.add_argument("--venvs", default=str(ROOT / "benchmarks" / ".venvs"))
    parser.add_argument("--refresh", action="store_true", help="rebuild the virtualenvs")
    parser.add_argument(
        "--rounds", type=int, default=1, help="run everything N times; report medians"
    )
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "compare.json"))
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    for bad in set(systems) - set(SYSTEMS):
        parser.error(f"unknown system {bad!r}: choose from {', '.join(SYSTEMS)}")
    for bad in set(only) - {n for n, _ in WORKLOADS}:
        parser.error(f"unknown workload {bad!r}: choose from {', '.join(n for n, _ in WORKLOADS)}")
    if not args.redis_server:
        parser.error("no redis-server on PATH: install Redis or pass --redis-server PATH")

    started = time.monotonic()
    size = SIZES["quick" if args.quick else "full"]
    cache = Path(args.venvs)
    cache.mkdir(parents=True, exist_ok=True)
    by_venv = {SYSTEMS[s].get("venv", s): s for s in systems}  # build each one once
    with ThreadPoolExecutor(max_workers=3) as pool:
        built = dict(
            zip(
                by_venv,
                pool.map(
                    lambda s: ensure_venv(s, args.python, cache, args.refresh), by_venv.values()
                ),
                strict=True,
            )
        )
    venvs = {s: built[SYSTEMS[s].get("venv", s)] for s in systems}
    setup_seconds = time.monotonic() - started
    results: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix="delayq-compare-"))
    try:
        with own_redis(args.redis_server) as (port, redis):
            env = environment(redis, args.python)
            url = f"redis://127.0.0.1:{port}/0"
            for round_ in range(args.rounds):
                # Each round starts with the next system, so no system always runs first.
                for name in systems[round_ % len(systems) :] + systems[: round_ % len(systems)]:
                    redis("FLUSHALL")
                    if args.rounds > 1:
                        log(f"round {round_ + 1} of {args.rounds}")
                    system = System(name, venvs[name], url, workdir)
                    entry = results.setdefault(
                        name,
                        {
                            "label": SYSTEMS[name]["label"],
                            "variant": SYSTEMS[name].get("variant"),
                            "versions": system.describe["versions"],
                            "setup": system.describe["setup"],
                            "rounds": [],
                        },
                    )
                    entry["rounds"].append(run_system(system, redis, size, only))
            for entry in results.values():
                entry.update(combine(entry["rounds"]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    env["seconds"] = round(time.monotonic() - started, 1)
    env["setup_seconds"] = round(setup_seconds, 1)
    env["rounds"] = args.rounds
    print(render(results, env, size, args.quick))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = ["python benchmarks/compare.py", *(argv if argv is not None else sys.argv[1:])]
    out.write_text(
        json.dumps(
            {
                "environment": env,
                "command": " ".join(command),
                "sizes": size,
                "figures": FIGURES,
                "systems": results,
            },
            indent=2,
        )
        + "\n"
    )
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
