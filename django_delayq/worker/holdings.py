"""What a worker holds: the attempts it leased, from their claim until Redis settles them, and
the results of finished ones on their way to Redis. The worker's threads share this state,
and only through the methods of :class:`Holdings`, under its one lock:

- the dispatcher (dispatch.py, claiming.py) adds claimed attempts, hands waiting ones back and
  asks how busy the runners are;
- a runner takes a waiting attempt, then leaves its outcome here; so does the event loop
  (aio.py) for attempts of ``async def`` tasks, from a waiting line of its own: each claimed
  attempt goes to the line of the pool that can run it (``classify``), sync runner threads
  (``concurrency``) or the loop (``async_concurrency`` attempts at once);
- delivery (delivery.py) takes the outcomes to send, returns those Redis did not take, and
  settles an attempt once Redis took its result;
- the heartbeat and the roster entry read which attempts are held;
- the waker waits here for an idle runner;
- the watchdog (runners.py) waits here for an attempt to pass its task's timeout, takes it
  from its runner (which no longer counts as busy) and leaves its failure here.

An attempt is known by its lease (job id, token), never by its job id alone.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django_delayq.worker.execution import FINISHED, STARTED, Attempt, Outcome


@dataclass(frozen=True)
class Load:
    """How busy the runners are and what waits for the dispatcher, at one instant."""

    busy: int  # attempts waiting for a runner thread or running on one
    waiting: bool  # an attempt waits for a runner (thread or loop)
    results: bool  # a result waits to be delivered
    failures: bool  # one of those results is a failure
    async_busy: int = 0  # attempts waiting for the event loop or running on it
    waiting_threads: bool = False  # an attempt waits for a runner thread
    waiting_loop: bool = False  # an attempt waits for the event loop


class Holdings:
    """The attempts and results of one worker with ``concurrency`` runners (thread-safe)."""

    def __init__(
        self,
        concurrency: int,
        async_concurrency: int = 0,
        classify: Callable[[Attempt], bool] | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        # Whether a claimed attempt runs on the event loop (only with async_concurrency)
        self.classify = classify if async_concurrency and classify else None
        self.on_async_work: Callable[[], None] = lambda: None  # wakes the loop (aio.py)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # runners wait for attempts
        self._idle_runner = threading.Condition(self._lock)  # the waker waits for an idle runner
        self._deadlines = threading.Condition(self._lock)  # the watchdog waits for a deadline
        self._leases: dict[tuple[str, str], Attempt] = {}  # held: claimed, not settled
        self._waiting: deque[Attempt] = deque()  # claimed, no runner yet
        self._running = 0  # attempts runners are on
        self._waiting_async: deque[Attempt] = deque()  # claimed, for the event loop
        self._running_async = 0  # attempts the event loop is on
        self._done: deque[Outcome] = deque()  # finished, result not delivered yet
        self._done_failures = 0  # how many of those are failures
        self.processed = 0  # attempts that succeeded
        self.failed = 0  # attempts that failed
        self.hung = 0  # runner threads abandoned to an attempt past its deadline, still in it

    # -- what is held ------------------------------------------------------------------

    def holding(self) -> list[Attempt]:
        """The attempts this worker holds a lease for (heartbeat, roster)."""
        with self._lock:
            return list(self._leases.values())

    def idle(self) -> bool:
        """Nothing held and no result left to deliver."""
        with self._lock:
            return not self._leases and not self._done

    def emptied(self) -> bool:
        """No runner on an attempt, none waiting, no result left to deliver (a stop's end)."""
        with self._lock:
            return (
                self._running == 0
                and self._running_async == 0
                and not self._waiting
                and not self._waiting_async
                and not self._done
            )

    def busy(self) -> int:
        """Attempts waiting for a runner thread or running on one."""
        with self._lock:
            return len(self._waiting) + self._running

    def async_busy(self) -> int:
        """Attempts waiting for the event loop or running on it."""
        with self._lock:
            return len(self._waiting_async) + self._running_async

    def _full(self) -> bool:
        """Every runner thread and every slot of the loop has an attempt (lock held)."""
        return (
            len(self._waiting) + self._running >= self.concurrency
            and len(self._waiting_async) + self._running_async >= self.async_concurrency
        )

    def load(self) -> Load:
        with self._lock:
            return Load(
                busy=len(self._waiting) + self._running,
                waiting=bool(self._waiting or self._waiting_async),
                results=bool(self._done),
                failures=self._done_failures > 0,
                async_busy=len(self._waiting_async) + self._running_async,
                waiting_threads=bool(self._waiting),
                waiting_loop=bool(self._waiting_async),
            )

    def running_since(self) -> list[float]:
        """When the attempts runner threads are on started (time.monotonic())."""
        with self._lock:
            return [
                a.started
                for a in self._leases.values()
                if a.state == STARTED and a.started and not a.on_loop
            ]

    def stalled(self, since: float) -> tuple[bool, bool]:
        """(runner threads, event loop): attempts wait for that pool while each of its slots
        is on an attempt started before ``since``."""
        with self._lock:
            waiting = (bool(self._waiting), bool(self._waiting_async))
            if not any(waiting):  # nothing waits: nothing to hand back (most sleeps)
                return (False, False)
            started = [a for a in self._leases.values() if a.state == STARTED]
        pools = []
        for on_loop, size in ((False, self.concurrency), (True, self.async_concurrency)):
            times = [a.started or 0.0 for a in started if a.on_loop == on_loop]
            pools.append(len(times) >= size and (max(times) if times else 0.0) < since)
        return (waiting[0] and pools[0], waiting[1] and pools[1])

    # -- the dispatcher ------------------------------------------------------------------

    def add(self, attempts: list[Attempt]) -> int:
        """Claimed attempts: held, and waiting for a runner thread or the event loop.
        Returns how many are for the loop."""
        if self.classify is not None:
            for attempt in attempts:
                attempt.on_loop = self.classify(attempt)
        for_loop = [a for a in attempts if a.on_loop]
        with self._lock:
            for attempt in attempts:
                self._leases[attempt.lease] = attempt
            if for_loop:
                self._waiting_async.extend(for_loop)
                self._waiting.extend(a for a in attempts if not a.on_loop)
            else:
                self._waiting.extend(attempts)
            self._work.notify(len(attempts) - len(for_loop))
        if for_loop:
            self.on_async_work()
        return len(for_loop)

    def take_waiting(self, threads: bool = True, loop: bool = True) -> list[Attempt]:
        """The attempts no runner started (of the runner threads' line, the loop's or
        both), no longer held (they are handed back)."""
        with self._lock:
            waiting = list(self._waiting) if threads else []
            if threads:
                self._waiting.clear()
            if loop:
                waiting.extend(self._waiting_async)
                self._waiting_async.clear()
            for attempt in waiting:
                del self._leases[attempt.lease]
        return waiting

    def take_unfinished(self) -> list[Attempt]:
        """A forced stop: every attempt not finished, no longer held (they are handed back);
        a runner that finishes one later leaves no result."""
        with self._lock:
            unfinished = [a for a in self._leases.values() if a.state != FINISHED]
            for attempt in unfinished:
                del self._leases[attempt.lease]
            self._waiting.clear()
            self._waiting_async.clear()
        return unfinished

    def wake_all(self) -> None:
        """The worker stopped: wake the runners, the loop and the waker so that they see it."""
        with self._lock:
            self._work.notify_all()
            self._idle_runner.notify_all()
            self._deadlines.notify_all()
        self.on_async_work()

    # -- the runners ---------------------------------------------------------------------

    def next_attempt(self, stopped: threading.Event) -> Attempt | None:
        """Block until an attempt waits, and start it; None once ``stopped`` is set."""
        with self._lock:
            while not self._waiting and not stopped.is_set():
                self._work.wait()
            if stopped.is_set():
                return None
            attempt = self._waiting.popleft()
            attempt.state = STARTED
            attempt.started = time.monotonic()
            self._running += 1
            return attempt

    def next_async(self) -> list[Attempt]:
        """The event loop's turn: the attempts waiting for it that fit in its free slots,
        started."""
        with self._lock:
            free = self.async_concurrency - self._running_async
            taken = [
                self._waiting_async.popleft() for _ in range(min(free, len(self._waiting_async)))
            ]
            now = time.monotonic()
            for attempt in taken:
                attempt.state = STARTED
                attempt.started = now
            self._running_async += len(taken)
            return taken

    def _keep(self, outcome: Outcome) -> None:
        """A result to deliver (lock held)."""
        self._done.append(outcome)
        self._done_failures += not outcome.ok

    def _ended(self, attempt: Attempt) -> None:
        """An attempt left its runner thread or the loop (lock held)."""
        if attempt.on_loop:
            self._running_async -= 1
        else:
            self._running -= 1
        attempt.state = FINISHED

    def finish(self, outcome: Outcome) -> int:
        """A runner is done with ``outcome.attempt``: its result waits to be delivered (unless a
        forced stop handed it back). Returns how many attempts are still busy in its pool."""
        with self._lock:
            self._ended(outcome.attempt)
            if outcome.ok:
                self.processed += 1
            else:
                self.failed += 1
            if outcome.attempt.lease in self._leases:  # else a forced stop handed it back
                self._keep(outcome)
            if outcome.attempt.on_loop:
                busy = len(self._waiting_async) + self._running_async
            else:
                busy = len(self._waiting) + self._running
            if not self._full():
                self._idle_runner.notify()
        return busy

    def drop(self, attempt: Attempt) -> None:
        """A runner took ``attempt`` and will not run it (Starts.settle): no longer held."""
        with self._lock:
            self._ended(attempt)
            self._leases.pop(attempt.lease, None)
            if not self._full():
                self._idle_runner.notify()

    # -- timeouts (the watchdog, runners.py) --------------------------------------------

    def watch(self, attempt: Attempt) -> None:
        """``attempt`` has a deadline now: the watchdog looks at it."""
        with self._lock:
            self._deadlines.notify_all()

    def returned(self, attempt: Attempt) -> bool:
        """The task of ``attempt`` returned (or raised): True if its runner still owns it,
        False when the watchdog timed it out first (its result is then discarded)."""
        with self._lock:
            attempt.returned = not attempt.timed_out
            return attempt.returned

    def wait_for_overdue(self, stopped: threading.Event) -> list[Attempt]:
        """Block until attempts run past their deadline, and take them from their runners
        (their threads are abandoned); [] once ``stopped`` is set. They count as running
        until ``timed_out()`` leaves their failure to deliver, so a stop asked in between
        (``on_hung``) waits for that failure rather than leaving the lease to expire."""
        with self._lock:
            while not stopped.is_set():
                now = time.monotonic()
                running = [
                    a
                    for a in self._leases.values()
                    if a.deadline is not None
                    and a.state == STARTED
                    and not a.returned
                    and not a.timed_out
                ]
                overdue = [a for a in running if a.deadline is not None and a.deadline <= now]
                if overdue:
                    for attempt in overdue:  # still counted running until timed_out()
                        attempt.timed_out = True
                        self.hung += 1
                    return overdue
                deadlines = [a.deadline for a in running if a.deadline is not None]
                self._deadlines.wait(min(deadlines) - now if deadlines else None)
            return []

    def abandoned_returned(self) -> None:
        """The thread of an attempt that timed out is out of its task at last."""
        with self._lock:
            self.hung -= 1

    def timed_out(self, outcome: Outcome) -> None:
        """The watchdog's failure of an attempt it took: its result waits to be delivered
        (unless a forced stop handed it back)."""
        with self._lock:
            self._ended(outcome.attempt)
            self.failed += 1
            if outcome.attempt.lease in self._leases:
                self._keep(outcome)
            self._idle_runner.notify()

    # -- the waker -----------------------------------------------------------------------

    def wait_for_idle_runner(self, cancelled: Callable[[], bool]) -> bool:
        """Block until a runner is idle; False once ``cancelled()`` (checked again after each
        :meth:`wake_waker`)."""
        with self._lock:
            while self._full() and not cancelled():
                self._idle_runner.wait()
            return not cancelled()

    def full(self) -> bool:
        """Every runner thread and every slot of the event loop is busy."""
        with self._lock:
            return self._full()

    def wake_waker(self) -> None:
        """Make :meth:`wait_for_idle_runner` check its ``cancelled`` again."""
        with self._lock:
            self._idle_runner.notify_all()

    # -- delivery ------------------------------------------------------------------------

    def take_results(self) -> list[Outcome]:
        """Every result not delivered yet, for the next round trip."""
        with self._lock:
            outcomes = list(self._done)
            self._done.clear()
            self._done_failures = 0
        return outcomes

    def return_results(self, outcomes: Iterable[Outcome]) -> None:
        """Results Redis did not take: first in line for the next round trip."""
        outcomes = list(outcomes)
        with self._lock:
            self._done.extendleft(reversed(outcomes))
            self._done_failures += sum(not o.ok for o in outcomes)

    def results_left(self) -> int:
        with self._lock:
            return len(self._done)

    def settle(self, attempt: Attempt) -> None:
        """Redis took the attempt's result: no longer held."""
        with self._lock:
            self._leases.pop(attempt.lease, None)
