"""The benchmark tasks, registered with ``@task`` like any user's (workers import them
through ``autodiscover_modules("tasks")``)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from benchmarks.peers.recorder import record as push_record
from django_delayq import task

_stamps: Any = None
_stamps_lock = threading.Lock()


@task
def noop(*args: Any) -> None:
    """Does nothing: what is measured is the engine around it."""


@task
def stamp(n: int) -> None:
    """Append ``"<n> <time.time()>"`` to ``$DELAYQ_BENCH_STAMPS/<pid>.txt`` the moment it
    starts, so run.py can compare start times with the due times schedule() returned."""
    started = time.time()
    global _stamps
    with _stamps_lock:
        if _stamps is None:
            path = os.path.join(os.environ["DELAYQ_BENCH_STAMPS"], f"{os.getpid()}.txt")
            _stamps = open(path, "a", buffering=1)  # noqa: SIM115 (kept open for the process)
        _stamps.write(f"{n} {started:.6f}\n")


@task
def record(tag: str) -> None:
    """``benchmarks/compare.py``'s task, the same body as the peers' (one RPUSH on the
    process's own client): see ``benchmarks/peers/recorder.py``."""
    push_record(tag)
