"""A worker's event loop: ``async def`` tasks run as coroutines on one thread, up to
``async_concurrency`` attempts at once (``delayq_worker --async-concurrency N``).

The dispatcher claims jobs as for the runner threads; the holdings (holdings.py) put each
claimed attempt whose task runs on the loop (:func:`classify`: an ``async def`` task, or a
Django Task defined with ``async def`` through the backend) in the loop's own waiting line
and wake the loop, which starts as many as it has free slots. Each attempt then goes as on a
runner thread (execution.py): marked started in Redis (starts.py), ``job_started``, the
task awaited with ``current_job()`` set, ``@task(timeout=...)`` cancelling it
(``asyncio.timeout``: a TimeoutError, retried or dead-lettered like any failure), its
outcome left in the holdings for the dispatcher to deliver with the others. Its lease is
held like any attempt's, so the heartbeat extends it while it is in flight; a graceful stop
waits for it, a forced stop hands it back and cancels it.

What may block stays off the loop: a record whose ``max_retries`` the worker decides is
settled in a thread (``asyncio.to_thread``), and signal receivers, when a signal has any, are
called through ``sync_to_async`` as Django calls them for async requests (unless every
receiver is one of the package's own that never uses the ORM for that job:
``signals.loop_safe``; a thread hop per signal costs more than the rest of a short job).
Each attempt runs in an ``asgiref`` ``ThreadSensitiveContext``, as Django runs each async
request: the ORM calls of one attempt (``sync_to_async``, thread-sensitive) share a thread
of its own, made when the first one is, and ``close_old_connections()`` runs in that thread
when the attempt ends, before the thread goes (an attempt that made no such call has no
connection to close).

A task that blocks the loop (a sync call inside ``async def``) holds up every attempt on it:
the watchdog (runners.py) fails it ``ASYNC_GRACE`` past its timeout, as it fails a hung sync
task, and its late result is discarded when it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.db import close_old_connections

from django_delayq import signals
from django_delayq.exceptions import CorruptJob
from django_delayq.jobs.job import Job
from django_delayq.jobs.record import decode_record
from django_delayq.monitoring import tracing
from django_delayq.recurring.recorder import WAIT as RECORD_WAIT
from django_delayq.scheduling.registry import find_task, loop_function, registered
from django_delayq.worker.execution import Attempt, Outcome, bounded, running
from django_delayq.worker.pool import Pool
from django_delayq.worker.traced import traced

logger = logging.getLogger("django_delayq.worker")

STOP_GRACE = 1.0  # seconds cancelled attempts get to unwind when the worker stops


def classify(attempt: Attempt) -> bool:
    """Whether a claimed attempt runs on the event loop (a corrupt record, a task unknown
    here: no, a runner thread reports what is wrong)."""
    try:
        fields = attempt.fields = decode_record(attempt.record)  # kept for Executor.prepare
    except CorruptJob:
        return False
    return loop_function(find_task(fields.task), fields.args, fields.kwargs) is not None


def loop_share() -> float:
    """The share of registered tasks that may run on the event loop (0.0: none): the first
    guess of the share of loop jobs among those claimed (prefetch.py)."""
    tasks = registered().values()
    loop = sum(1 for t in tasks if t.is_async or t.coroutine_for is not None)
    return loop / len(tasks) if tasks else 0.0


async def _in_thread(signal: Any, job: Job, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, which sends ``signal`` for ``job``: through ``sync_to_async`` (in
    the attempt's thread) when a receiver may use the ORM (signals.needs_thread); else here,
    on the loop."""
    if signals.needs_thread(signal, job):
        return await sync_to_async(call)(*args)
    return call(*args)


def _end_of_thread() -> None:
    """In the attempt's thread, as it ends: Django's request-finished clean-up."""
    close_old_connections()


class Loop(Pool):
    """The event loop of one worker, on a thread of its own. ``wake`` wakes its dispatcher,
    ``stopped`` ends the loop, ``stopping()`` says a stop was requested."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._work: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()
        self._fill_pending = False  # a _fill_now is scheduled for the next turn
        self.in_flight_max = 0  # the most attempts in flight at once (tests read it)

    def thread(self) -> threading.Thread:
        return threading.Thread(target=self.serve, name="delayq-loop", daemon=True)

    def serve(self) -> None:
        asyncio.run(self._main())

    def _notify(self) -> None:
        """Work waits, or the worker stopped (any thread)."""
        loop, work = self._loop, self._work
        if loop is not None and work is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(work.set)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._work = asyncio.Event()
        self.holdings.on_async_work = self._notify
        while not self.stopped.is_set():
            self._fill()
            await self._work.wait()
            self._work.clear()
        await self._cancel_all()

    def _fill_soon(self) -> None:
        """Fill the freed slots once the attempts finishing in this turn of the loop are
        done: one lock, and one write of start marks, for all of them."""
        if not self._fill_pending and self._loop is not None:
            self._fill_pending = True
            self._loop.call_soon(self._fill_now)

    def _fill_now(self) -> None:
        self._fill_pending = False
        self._fill()

    def _fill(self) -> None:
        """Start the attempts waiting for the loop that fit in its free slots (their start
        marks in one write)."""
        attempts = self.holdings.next_async()
        if not attempts:
            return
        to_settle = set(self.starts.mark_all(attempts))
        for attempt in attempts:
            attempt.thread = threading.get_ident()
            task = asyncio.create_task(
                self._attempt(attempt, attempt in to_settle), name=f"delayq-{attempt.id}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self.in_flight_max = max(self.in_flight_max, len(self._tasks))

    async def _cancel_all(self) -> None:
        """The worker stopped: attempts still in flight were handed back (a forced stop);
        cancel them and give them STOP_GRACE to unwind."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=STOP_GRACE)

    async def _attempt(self, attempt: Attempt, settle: bool) -> None:
        """One attempt, marked started (``settle``: its record's max_retries is decided
        first, settle.lua, a round trip off the loop), to its outcome in the holdings."""
        try:
            await self._attempt_body(attempt, settle)
        finally:  # no longer in flight: the slot it frees may be filled in this very turn,
            self._tasks.discard(asyncio.current_task())  # before the done callbacks run

    async def _attempt_body(self, attempt: Attempt, settle: bool) -> None:
        if settle and not await asyncio.to_thread(self.starts.start, attempt):
            self.holdings.drop(attempt)
            self.wake.set()
            self._fill_soon()
            return
        try:
            outcome = await self.execute(attempt)
        except asyncio.CancelledError:  # the worker stopped (handed back, or timed out)
            if attempt.timed_out:
                self.holdings.abandoned_returned()
            raise
        if outcome.late or attempt.timed_out:  # the watchdog failed it while it blocked us
            self.holdings.abandoned_returned()
            self._fill_soon()
            return
        self.prefetch.ran_on_loop(time.monotonic() - (attempt.started or 0.0))
        self.holdings.finish(outcome)
        self.wake_after(outcome.ok, self.prefetch.refill_due)
        self._fill_soon()

    async def execute(self, attempt: Attempt) -> Outcome:
        """Await the attempt's task as Executor.run calls a sync one (execution.py)."""
        executor = self.executor
        try:
            async with ThreadSensitiveContext() as context:
                try:
                    tracer = tracing.tracer()
                    if tracer is None:
                        return await self._run(attempt)
                    with traced(tracer, attempt) as ended:  # its span (monitoring/tracing.py)
                        return ended(await self._run(attempt))
                finally:
                    if context in SyncToAsync.context_to_thread_executor:
                        await sync_to_async(_end_of_thread)()
        except asyncio.CancelledError:
            raise  # the worker stopped: the attempt was handed back
        except BaseException as exc:  # never lose the loop or a job to a bug here
            return executor.internal_error(attempt, exc)

    async def _run(self, attempt: Attempt) -> Outcome:
        executor = self.executor
        if attempt.ready is not None and not attempt.ready.is_set():  # recurring/recorder.py
            await asyncio.get_running_loop().run_in_executor(None, attempt.ready.wait, RECORD_WAIT)
            attempt.started = time.monotonic()  # the wait is not its run time (prefetch.py)
        prepared = executor.prepare(attempt)
        if isinstance(prepared, Outcome):
            return prepared
        job, task = prepared
        func = loop_function(task, job.args, job.kwargs)
        started = time.perf_counter()
        try:
            await _in_thread(signals.job_started, job, executor.begin, job, task)
            with running(job):
                name = task.name if task is not None else job.task
                result = await bounded(name, func, attempt.timeout, job.args, job.kwargs)  # type: ignore[arg-type]
        except BaseException as exc:
            current = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and current and current.cancelling():
                raise  # cancelled by the worker's stop, not by the task itself
            duration = time.perf_counter() - started
            return await _in_thread(
                signals.job_failed, job, executor.raised, attempt, job, task, exc, duration
            )
        duration = time.perf_counter() - started
        return await _in_thread(
            signals.job_succeeded,
            job,
            executor.returned_value,
            attempt,
            job,
            task,
            result,
            duration,
        )
