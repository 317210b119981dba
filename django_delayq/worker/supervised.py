"""A supervised child of ``delayq_worker --processes N`` (worker/supervisor.py): an ordinary
worker plus a thread that reads its orders from the supervisor on stdin and, with limits, a
receiver of the job_succeeded / job_failed signals that recycles it after ``--max-jobs`` or
above ``--max-memory`` (both looked at after each attempt it runs: the child stops
claiming, finishes its running jobs, hands claimed ones back and exits ``RECYCLED``). It is
recycled the same way once it has abandoned as many runner threads to tasks past their
``@task(timeout=...)`` as its ``--concurrency`` (runners.py): the process's end ends them.

Orders come on stdin, not as signals (supervisor.py says why): ``stop`` (finish running
jobs), ``force`` (stop at once, as a second signal does). A graceful stop asked twice (a
signal and the order) counts once, and a child whose stdin closes (its supervisor died,
even by SIGKILL) stops gracefully too.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from django_delayq.wording import counted

if TYPE_CHECKING:
    from django_delayq.worker.dispatch import Worker

logger = logging.getLogger("django_delayq.supervisor")

RECYCLED = 75  # exit code of a child that stopped itself (--max-jobs, --max-memory, timeouts)
STOP, FORCE = b"stop\n", b"force\n"  # the supervisor's orders, one line each


def resident_mb() -> float | None:
    """This process's resident set size in MB: /proc/self/statm on Linux, else the peak
    from ``resource`` (macOS, BSDs); None where neither exists."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes vs KB


class Supervised:
    """What makes a worker a supervised child: orders on stdin, limits, the roster field."""

    def __init__(
        self,
        worker: Worker,
        supervisor: int,
        max_jobs: int | None = None,
        max_memory: float | None = None,
        orders: int = 0,
    ) -> None:
        self.worker = worker
        self.max_jobs = max_jobs
        self.max_memory = max_memory
        self.orders = orders  # file descriptor (stdin)
        self.recycled: str | None = None  # why it stopped itself
        self._jobs = 0
        self._count = threading.Lock()
        self._stop_lock = threading.Lock()
        self._asked = False  # a graceful stop was asked (by a signal, an order, a limit)
        self._signals = 0  # SIGTERM / SIGINT sent to this process itself
        worker.parts.presence.supervisor = supervisor  # shown in the Workers tab
        worker.parts.runners.on_hung = self._hung  # threads left in tasks past their timeout

    def start(self) -> None:
        threading.Thread(target=self._read_orders, name="delayq-orders", daemon=True).start()
        if self.max_jobs is not None or self.max_memory is not None:
            from django_delayq import signals

            for sig in (signals.job_succeeded, signals.job_failed):
                sig.connect(self._job_done, weak=False, dispatch_uid="delayq-supervised")
            signals.loop_safe("delayq-supervised")  # a count, and a stop request

    def exit_code(self, code: int) -> int:
        """The child's exit code: RECYCLED after a graceful stop it asked for itself."""
        return RECYCLED if code == 0 and self.recycled else code

    @property
    def signalled(self) -> bool:
        """A signal was sent to this child itself already (the next one forces)."""
        return self._signals > 0

    def on_signal(self) -> None:
        """SIGTERM / SIGINT sent to this child itself (the command's handler, on a thread
        of its own): the first asks for a graceful stop unless one was asked already, a
        second forces, as for any worker."""
        with self._stop_lock:
            self._signals += 1
            second = self._signals > 1
        self._stop(force=second)

    def _stop(self, force: bool = False) -> None:
        """Ask the worker to stop; a graceful stop asked twice (a signal from systemd
        and the same stop relayed by the supervisor) is asked once, never read as a
        second signal."""
        with self._stop_lock:
            asked, self._asked = self._asked, True
        if force:
            self.worker.request_stop(force=True)
        elif not asked:
            self.worker.request_stop()

    def _read_orders(self) -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader holds
        # its lock, and the interpreter aborts at exit when it cannot take it.
        pending = b""
        while True:
            try:
                chunk = os.read(self.orders, 64)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:  # the supervisor is gone
                logger.warning("worker %s: its supervisor is gone; stopping", self.worker.name)
                self._stop()
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if line == FORCE.strip():
                    self._stop(force=True)
                elif line == STOP.strip():
                    self._stop()

    def _recycle(self, why: str) -> None:
        if self.recycled is not None or self._asked:
            return
        self.recycled = why
        logger.warning(
            "worker %s: %s; finishing running jobs, then making way for a new process",
            self.worker.name,
            why,
        )
        self._stop()

    def _hung(self, threads: int) -> None:
        """As many runner threads as --concurrency are left in tasks past their timeout
        (runners.py): a new process ends them."""
        self._recycle(f"{counted(threads, 'runner thread')} left in tasks past their timeout")

    def _job_done(self, sender: Any, **kwargs: Any) -> None:
        """After each attempt (a runner thread, through the job_succeeded / job_failed
        signals): over a limit, stop once the running jobs are done."""
        with self._count:
            self._jobs += 1
            jobs = self._jobs
        if self.max_jobs is not None and jobs >= self.max_jobs:
            self._recycle(f"{jobs} jobs run (--max-jobs {self.max_jobs})")
        elif self.max_memory is not None:
            size = resident_mb()
            if size is not None and size > self.max_memory:
                self._recycle(f"{size:.0f} MB resident (--max-memory {self.max_memory:g})")
