"""``delayq_worker --processes N``: one supervisor process and N worker processes.

The supervisor (:class:`Supervisor`) runs no job and opens no Redis connection: it starts
each child as a fresh ``python -m django delayq_worker`` process with the same options
(and ``--name <name>/<slot>``), restarts a child that dies, relays SIGTERM / SIGINT and
decides the exit code. A child is an ordinary worker made a supervised one
(:class:`~django_delayq.worker.supervised.Supervised`: orders on stdin, ``--max-jobs`` and
``--max-memory``).

Why fresh processes rather than ``fork``: a forked child would share the parent's sockets
(a Redis or database connection used by two processes mixes their replies), inherit locks
that other threads held at the fork (the logging module's, redis-py's pool's) and never
release in the child, and macOS aborts some forked processes outright. A fresh
interpreter imports Django once more per child (well under a second), which a
long-running worker pays once; the supervisor stays small and never touches Redis, so
nothing it holds can leak into a child.

Orders go through the child's stdin, not signals: ``stop`` (finish running jobs),
``force`` (stop at once, as a second signal does). A signal sent to the whole process group
(Ctrl-C in a terminal, systemd's default ``KillMode=control-group``) would reach each
child twice, from the sender and from the supervisor, and a worker reads a second signal
as "force". So children run in their own process group, a graceful stop asked twice
(a signal and the order) counts once, and a child whose stdin closes (its supervisor
died, even by SIGKILL) stops gracefully too. A child still takes SIGTERM / SIGINT sent
to it directly, as any worker does.

Restarts: a child that exits while the supervisor is not stopping is started again after a
delay that doubles with each death within ``FAST_DEATH`` seconds of its start (from
``BACKOFF_FIRST`` up to ``BACKOFF_MAX``); a child that lived longer restarts after
``BACKOFF_FIRST``. After ``GIVE_UP`` deaths in a row, each within ``FAST_DEATH`` of its
start (an import error, a bad setting), the supervisor logs what happened, stops the other
children and exits 3. A child that recycled itself (exit ``RECYCLED``) is replaced at once.
With ``--burst`` a child that exits 0, 1 or 2 is done and is not restarted.

Exit codes of the supervisor (the command's):

- 0: stopped by SIGTERM / SIGINT and every child stopped gracefully (with ``--burst``:
  every child found nothing more to do);
- 1: a forced stop (a second signal, or a child that had to cut jobs short or could not
  deliver results, exit 1), the jobs cut short handed back to pending;
- 2: ``--burst`` and a child gave up on an unreachable Redis;
- 3: a child kept dying right after it started: the supervisor gave up (see the log).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django_delayq.worker.supervised import FORCE, RECYCLED, STOP

logger = logging.getLogger("django_delayq.supervisor")

GAVE_UP = 3  # exit code of a supervisor whose child kept dying at start
FAST_DEATH = 10.0  # seconds: a child that exits sooner after its start died "at start"
GIVE_UP = 5  # deaths in a row at start after which the supervisor gives up
BACKOFF_FIRST = 0.5  # seconds before the first restart
BACKOFF_MAX = 30.0  # seconds between two restarts, at most
FORCE_WAIT = 15.0  # seconds children get after "force" before they are SIGKILLed
STOP_MARGIN = 30.0  # seconds beyond the shutdown timeout before a graceful stop is forced


def cpu_count() -> int:
    """The cores this process may run on (``--processes auto``)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return counter() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# -- the supervisor ---------------------------------------------------------------------------


@dataclass
class Slot:
    """One child position: the process in it now, and its history of deaths."""

    index: int
    proc: subprocess.Popen | None = None
    started: float = 0.0
    restart_at: float | None = None  # monotonic time of the next start
    fast_deaths: int = 0  # deaths in a row, each within FAST_DEATH of its start
    codes: list[int] = field(default_factory=list)  # exit codes of those deaths
    done: int | None = None  # --burst: the exit code it finished with


class Supervisor:
    """Runs ``processes`` children of ``command`` (the argv after ``delayq_worker``,
    without ``--name``) and keeps them running; see the module docstring."""

    def __init__(
        self,
        processes: int,
        options: Sequence[str],
        *,
        name: str,
        burst: bool = False,
        shutdown_timeout: float = 30.0,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        if type(processes) is not int or processes < 1:
            raise ValueError(f"processes must be an int >= 1, got {processes!r}")
        self.options = list(options)
        self.name = name
        self.burst = burst
        self.shutdown_timeout = shutdown_timeout
        self.env = env
        self.python = python
        self.pid = os.getpid()
        self.slots = [Slot(i + 1) for i in range(processes)]
        self.signals = 0  # SIGTERM / SIGINT received
        self.stop_at: float | None = None  # a graceful stop is forced at this time
        self.kill_at: float | None = None  # children left are SIGKILLed at this time
        self.forced = False
        self.gave_up = False
        self.recycles = 0
        self.restarts = 0
        # The wake-up fd of signal.set_wakeup_fd: a socket pair (a pipe will not do on
        # Windows), read in select() by the main loop.
        self._wakeup_r, self._wakeup_w = socket.socketpair()

    # -- children ------------------------------------------------------------

    def command(self, slot: Slot) -> list[str]:
        return [
            self.python,
            "-m",
            "django",
            "delayq_worker",
            *self.options,
            "--name",
            f"{self.name}/{slot.index}",
            "--supervisor-pid",
            str(self.pid),
            "--skip-checks",  # the supervisor ran them
        ]

    def _start(self, slot: Slot) -> None:
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["process_group"] = 0  # signals to our group do not reach it twice
        slot.proc = subprocess.Popen(
            self.command(slot), stdin=subprocess.PIPE, env=self.env, **kwargs
        )
        slot.started = time.monotonic()
        slot.restart_at = None
        logger.info("supervisor %s: child %d started, pid %d", self.name, slot.index, slot.proc.pid)

    def _tell(self, order: bytes) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None and slot.proc.stdin:
                with contextlib.suppress(OSError, ValueError):
                    slot.proc.stdin.write(order)
                    slot.proc.stdin.flush()

    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.proc is not None and s.proc.poll() is None]

    # -- signals -------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only counts: the main loop acts on it (a handler must not take locks).
        self.signals += 1

    def _on_child(self, signum: int, frame: Any) -> None:
        pass  # wakes the main loop through the wake-up fd

    # -- main loop -----------------------------------------------------------------

    def run(self) -> int:
        """Start the children and supervise them until they are all gone; the exit code."""
        handled = [signal.SIGTERM, signal.SIGINT]
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        if hasattr(signal, "SIGCHLD"):
            previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_child)
        self._wakeup_w.setblocking(False)
        self._wakeup_r.setblocking(False)
        old_fd = signal.set_wakeup_fd(self._wakeup_w.fileno(), warn_on_full_buffer=False)
        logger.info(
            "supervisor %s started: pid %d, %d processes", self.name, self.pid, len(self.slots)
        )
        try:
            for slot in self.slots:
                self._start(slot)
            code = self._loop()
        finally:
            signal.set_wakeup_fd(old_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for slot in self.slots:  # never leave a child behind
                if slot.proc is not None and slot.proc.poll() is None:
                    slot.proc.kill()
                    slot.proc.wait()
            self._wakeup_r.close()
            self._wakeup_w.close()
        logger.info(
            "supervisor %s stopped: exit code %d, %d restarts, %d recycled",
            self.name,
            code,
            self.restarts,
            self.recycles,
        )
        return code

    def _loop(self) -> int:
        handled_signals = 0
        codes: list[int] = []  # exit codes of children that ended while stopping / done
        while True:
            now = time.monotonic()
            if self.signals > handled_signals:
                handled_signals = self.signals
                self._signalled(handled_signals, now)
            for slot in self.slots:
                if slot.proc is not None and slot.proc.poll() is not None:
                    code, pid = slot.proc.returncode, slot.proc.pid
                    if slot.proc.stdin:
                        with contextlib.suppress(OSError):
                            slot.proc.stdin.close()
                    slot.proc = None
                    codes += self._ended(slot, code, pid, now)
            if self._stopping:
                if all(s.proc is None for s in self.slots):  # each exit code counted above
                    return self._final_code(
                        codes + [s.done for s in self.slots if s.done is not None]
                    )
                if self.stop_at is not None and now >= self.stop_at and not self.forced:
                    logger.warning(
                        "supervisor %s: children still running %.0f s after the stop; forcing",
                        self.name,
                        self.shutdown_timeout + STOP_MARGIN,
                    )
                    self._force(now)
                if self.kill_at is not None and now >= self.kill_at:
                    for slot in self.alive():
                        logger.error(
                            "supervisor %s: child %d (pid %d) ignored the forced stop: SIGKILL",
                            self.name,
                            slot.index,
                            slot.proc.pid if slot.proc else 0,
                        )
                        if slot.proc is not None:
                            slot.proc.kill()
                    self.kill_at = None
            else:
                if self.burst and all(s.done is not None for s in self.slots):
                    return self._final_code([s.done for s in self.slots if s.done is not None])
                for slot in self.slots:
                    if slot.proc is None and slot.restart_at is not None and now >= slot.restart_at:
                        self.restarts += 1
                        self._start(slot)
            self._sleep(self._timeout(time.monotonic()))

    @property
    def _stopping(self) -> bool:
        return self.signals > 0 or self.gave_up

    def _signalled(self, count: int, now: float) -> None:
        if count == 1 and not self.gave_up:
            logger.warning(
                "supervisor %s: stopping: children finish their running jobs (a second signal "
                "stops them at once)",
                self.name,
            )
            self._stop_children(now)
        elif not self.forced:
            logger.warning("supervisor %s: second signal: children stop now", self.name)
            self._force(now)

    def _stop_children(self, now: float) -> None:
        for slot in self.slots:
            slot.restart_at = None
        self.stop_at = now + self.shutdown_timeout + STOP_MARGIN
        self._tell(STOP)

    def _force(self, now: float) -> None:
        self.forced = True
        self.kill_at = now + FORCE_WAIT
        self._tell(FORCE)

    def _ended(self, slot: Slot, code: int, pid: int, now: float) -> list[int]:
        """A child exited: plan what follows; the codes that count for the final one."""
        lived = now - slot.started
        what = describe_exit(code)
        if self._stopping:
            level = logging.INFO if code in (0, RECYCLED) else logging.WARNING
            logger.log(
                level,
                "supervisor %s: child %d (pid %d) stopped (%s)",
                self.name,
                slot.index,
                pid,
                what,
            )
            return [code]
        if code == RECYCLED:
            self.recycles += 1
            slot.fast_deaths, slot.codes = 0, []
            logger.info(
                "supervisor %s: child %d (pid %d) recycled itself after %.0f s; starting a new one",
                self.name,
                slot.index,
                pid,
                lived,
            )
            slot.restart_at = now
            return []
        if self.burst and code in (0, 1, 2):
            slot.done = code
            logger.info("supervisor %s: child %d finished (%s)", self.name, slot.index, what)
            return []
        if lived < FAST_DEATH:
            slot.fast_deaths += 1
            slot.codes.append(code)
        else:
            slot.fast_deaths, slot.codes = 1, [code]
        self._died(slot, code, pid, lived, now)
        return []

    def _died(self, slot: Slot, code: int, pid: int, lived: float, now: float) -> None:
        """A child died while it should run: restart it after a backoff, or give up."""
        what = describe_exit(code)
        if slot.fast_deaths >= GIVE_UP and lived < FAST_DEATH:
            logger.error(
                "supervisor %s: child %d died %d times in a row within %.0f s of its start "
                "(%s): giving up. Its output above says why (an import error, a bad setting, "
                "a task that ends the process?); stopping the other children",
                self.name,
                slot.index,
                slot.fast_deaths,
                FAST_DEATH,
                ", ".join(describe_exit(c) for c in slot.codes),
            )
            self.gave_up = True
            self._stop_children(now)
            return
        delay = min(BACKOFF_FIRST * 2 ** (slot.fast_deaths - 1), BACKOFF_MAX)
        logger.warning(
            "supervisor %s: child %d (pid %d) died after %.1f s (%s); restarting it in %.1f s",
            self.name,
            slot.index,
            pid,
            lived,
            what,
            delay,
        )
        slot.restart_at = now + delay

    def _final_code(self, codes: Sequence[int]) -> int:
        if self.gave_up:
            return GAVE_UP
        if self.forced or any(c not in (0, 2, RECYCLED) for c in codes):
            return 1
        if 2 in codes:
            return 2
        return 0

    def _timeout(self, now: float) -> float:
        times = [
            s.restart_at for s in self.slots if s.restart_at is not None and not self._stopping
        ]
        times += [t for t in (self.stop_at, self.kill_at) if t is not None]
        if not times:
            return 1.0
        return min(max(min(times) - now, 0.0), 1.0)

    def _sleep(self, timeout: float) -> None:
        """Until a signal (SIGCHLD included: a child ended) or ``timeout`` seconds."""
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([self._wakeup_r], [], [], timeout)
            if ready:
                with contextlib.suppress(OSError):
                    self._wakeup_r.recv(512)
