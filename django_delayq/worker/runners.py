"""A worker's runner threads, and what its waker sees of them.

Each runner takes a claimed attempt from the worker's holdings, marks it started in Redis
(starts.py), runs it (execution.py) and leaves the outcome in the holdings for the dispatcher
to deliver, waking the dispatcher when that is worth a round trip: a failure, a stop under
way, or three quarters of the prefetched jobs gone. The waker (maintenance.py) waits in
BLPOP only while a runner is idle, and wakes the dispatcher when a job became due sooner.

Timeouts (``@task(timeout=...)``): Python cannot stop a thread, so a watchdog thread waits
for the earliest deadline of the attempts running; an attempt past its deadline is taken from
its runner (holdings.py), failed with a TimeoutError like any failure (retried or
dead-lettered when its result is delivered; its lease is no longer extended once Redis took
it), and a new runner thread takes the old one's place, so the worker keeps its concurrency.
The old thread is abandoned: when its task returns at last, the result is discarded and the
thread ends. A worker with as many threads abandoned as its concurrency calls ``on_hung``:
a supervised child (supervised.py) makes way for a new process, which ends them; any other
worker logs an error saying to run with ``--processes``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django_delayq.monitoring.tracing import tracer as current_tracer
from django_delayq.wording import counted
from django_delayq.worker.execution import Outcome, error_info
from django_delayq.worker.pool import Pool
from django_delayq.worker.traced import traced

logger = logging.getLogger("django_delayq.worker")


class Runners(Pool):
    """The runners of one worker. ``wake`` wakes its dispatcher, ``stopped`` ends the
    threads, ``stopping()`` says a stop was requested."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executor.watch, self.executor.returned = self.holdings.watch, self.holdings.returned
        self._numbers = itertools.count()
        self.replaced = 0  # runner threads started in an abandoned one's place
        self.on_hung: Callable[[int], None] = self._log_hung
        self._told = False  # on_hung was called, and the hung threads are still as many

    @property
    def hung(self) -> int:
        """Runner threads abandoned to a task past its timeout, still in it."""
        return self.holdings.hung

    def threads(self) -> list[threading.Thread]:
        """One thread per runner and the watchdog's, not started."""
        threads = [self._runner() for _ in range(self.holdings.concurrency)]
        threads.append(threading.Thread(target=self.watchdog, name="delayq-watchdog"))
        return threads

    def _runner(self) -> threading.Thread:
        return threading.Thread(
            target=self.loop, name=f"delayq-runner-{next(self._numbers)}", daemon=True
        )

    def loop(self) -> None:
        """One runner: attempts one after the other until the worker stopped."""
        holdings, prefetch, wake = self.holdings, self.prefetch, self.wake
        while (attempt := holdings.next_attempt(self.stopped)) is not None:
            if not self.starts.start(attempt):  # Starts.settle: not to be run
                holdings.drop(attempt)
                wake.set()
                continue
            tracer = current_tracer()  # OpenTelemetry: None when off
            if tracer is None:
                outcome = self.executor.run(attempt)
            else:
                with traced(tracer, attempt) as ended:  # its span (worker/traced.py)
                    outcome = ended(self.executor.run(attempt))
            if outcome.late or attempt.timed_out:  # the watchdog failed it and replaced us
                holdings.abandoned_returned()
                return
            prefetch.ran(time.monotonic() - (attempt.started or 0.0))
            busy = holdings.finish(outcome)
            self.wake_after(outcome.ok, partial(prefetch.refill_due_after, busy))

    def watchdog(self) -> None:
        """Fail attempts past their task's timeout and replace their runner threads, until
        the worker stopped."""
        while overdue := self.holdings.wait_for_overdue(self.stopped):
            # on_hung first: a supervised child asks for its stop before these failures can
            # be delivered, so their retries are never claimed again by this process (a
            # retry due at once used to be, in the same exchange that acked the failure).
            hung = self.holdings.hung
            if hung >= self.holdings.concurrency and not self._told:
                self.on_hung(hung)
            self._told = hung >= self.holdings.concurrency
            for attempt in overdue:
                try:
                    outcome = self.executor.timed_out(attempt)
                except Exception as exc:  # never leave a timed-out attempt held forever
                    logger.exception("internal error failing job %s at its timeout", attempt.id)
                    outcome = Outcome(attempt, False, error=error_info(exc, attempt.number, ""))
                self.holdings.timed_out(outcome)
                if not attempt.on_loop:  # the loop's thread goes on once the task lets it
                    self._runner().start()
                    self.replaced += 1
            self.wake.set()

    def _log_hung(self, hung: int) -> None:
        logger.error(
            "%s left running tasks past their timeout (as many as --concurrency): Python "
            "cannot stop a thread, so they hold memory and may hold locks or connections; "
            "run delayq_worker with --processes, which replaces such a worker process",
            counted(hung, "runner thread"),
        )

    def _winding_down(self) -> bool:
        return self.stopping() or self.stopped.is_set()

    def wait_for_idle_runner(self) -> bool:
        """The waker's wait: block until a runner is idle; False once the worker stops."""
        return self.holdings.wait_for_idle_runner(self._winding_down)

    def woken(self) -> bool:
        """A wake token arrived: wake the dispatcher; False if no runner is idle now."""
        if self.holdings.full() or self.stopping():
            return False
        self.wake.set()
        return True
