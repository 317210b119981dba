"""Running one attempt of a job: decode its record, call its task, say how it went.

The worker (dispatch.py) hands an :class:`Attempt` to :meth:`Executor.run` on a runner thread
and gets an :class:`Outcome` back, which it acknowledges or records as a failure in its next
round trip. Nothing here talks to Redis: ``close_old_connections()`` runs around every job,
signals go through ``send_robust``, and the task's exception never escapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import async_to_sync
from django.db import close_old_connections

from django_delayq import signals
from django_delayq.django_tasks.runner import shown_call
from django_delayq.exceptions import CorruptJob
from django_delayq.jobs.job import DEAD, RUNNING, Job, make_job, to_datetime
from django_delayq.jobs.record import EMPTY, Fields, decode_record
from django_delayq.recurring.recorder import WAIT as RECORD_WAIT
from django_delayq.scheduling.registry import Task, find_task, get_task, sender

logger = logging.getLogger("django_delayq.worker")

# Seconds past an async task's timeout before the watchdog gives up on the cancellation
# (the task blocked its event loop) and abandons the thread as it does a sync task's.
ASYNC_GRACE = 1.0
TRACEBACK_LIMIT = 16_000
MESSAGE_LIMIT = 2_000

WAITING, STARTED, FINISHED = "waiting", "started", "finished"

# The log lines of an attempt that ends its job (logged at ERROR): monitoring/sentry.py
# keeps Sentry's logging integration from making them a second event of the job's death.
FAILED_LINE = "job %s %s failed in %.1f ms (attempt %d of %d): %s: %s; %s"
CORRUPT_LINE = "job %s has a corrupt record, dead-lettering it: %s"

# The job whose task the current thread is running; set by Executor.run around the call.
_current_job: ContextVar[Job | None] = ContextVar("django_delayq_current_job", default=None)


def current_job() -> Job | None:
    """Inside a task run by a worker, the :class:`~django_delayq.Job` it runs; else None.

    The Job's ``id``, ``task``, ``queue``, ``args``, ``kwargs``, ``attempts`` (this
    attempt is number ``attempts``), ``max_retries``, ``will_retry`` and ``worker``; for an
    occurrence of a recurring schedule, ``schedule`` (its name) and ``fire_time``. Set by
    the worker only while the task's function runs, ``async def`` tasks included; None
    when a task is called directly, and anywhere else.
    """
    return _current_job.get()


@contextlib.contextmanager
def running(job: Job) -> Iterator[None]:
    """``current_job()`` is ``job`` inside (a coroutine's context, or the thread's)."""
    token = _current_job.set(job)
    try:
        yield
    finally:
        _current_job.reset(token)


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds before retry number ``attempt`` (1-based): base * 2**(attempt-1), capped,
    plus up to 25% jitter so failed jobs do not retry in lockstep. base 0: at once."""
    if base <= 0:
        return 0.0
    delay = min(base * 2 ** min(attempt - 1, 64), cap)
    return delay + random.uniform(0, delay * 0.25)


@dataclass(eq=False)
class Attempt:
    """One attempt of a job this worker leased, from its claim until it is settled (acked,
    failed or handed back). Identified by its lease: (job id, token), never by the job id,
    so two attempts of one job never share a slot."""

    queue: str
    id: str
    token: str
    record: bytes
    number: int  # the attempt number once started (attempts counted before + 1)
    state: str = WAITING
    started: float | None = None  # time.monotonic() when a runner took it
    fields: Fields | None = None  # decoded by the runner
    lease_lost: bool = False
    # The task's timeout (runners.py): the deadline (time.monotonic()) once it runs, the
    # runner thread's id, and which of the runner and the watchdog ended the attempt first
    # (set under the holdings' lock).
    timeout: float | None = None
    deadline: float | None = None
    thread: int | None = None
    returned: bool = False
    timed_out: bool = False
    on_loop: bool = False  # run by the worker's event loop (aio.py), not a runner thread
    # Why the task is not called (a recurring occurrence its missed policy skips, decided
    # before it runs: recurring/claims.py); the attempt is acknowledged as done.
    skip: str | None = None
    # Set when it is decided and its durable record committed (recurring/recorder.py): the
    # task waits.
    ready: threading.Event | None = None
    # The context of the span that scheduled it (record flag 't'), read by the claim only
    # when tracing is on (claiming.py): its attempt's span links to it.
    trace: bytes | None = None
    # When the job was due (epoch s, Redis's clock), as claim.lua returned it (None for a
    # job a re-sent claim returned): its lateness is counted (worker/history.py).
    due: float | None = None

    @property
    def lease(self) -> tuple[str, str]:
        return (self.id, self.token)

    @property
    def info(self) -> str:
        """What ack.lua needs of the record (flags and unique key)."""
        return (self.fields or EMPTY).info


@dataclass(eq=False)
class Outcome:
    attempt: Attempt
    ok: bool
    job: Job | None = None
    error: dict[str, Any] = field(default_factory=dict)
    delay: float = -1.0  # seconds before the retry; negative: never retry
    resends: int = 0  # round trips that failed to deliver it
    late: bool = False  # returned after its timeout failed it: discarded
    ended: float = field(default_factory=time.monotonic)  # when the attempt ended


def _call(task: Task, job: Job, timeout: float | None) -> Any:
    """Call the task's function on this thread; an async one on an event loop of its own
    (async_to_sync), cancelled at its ``timeout``."""
    if not task.is_async:
        return task.func(*job.args, **job.kwargs)
    return async_to_sync(bounded)(task.name, task.func, timeout, job.args, job.kwargs)


async def bounded(
    name: str, func: Callable[..., Any], timeout: float | None, args: list, kwargs: dict
) -> Any:
    """Await ``func(*args, **kwargs)``, cancelled once it ran ``timeout`` seconds (None: no
    limit): a TimeoutError naming the task and the limit (its own TimeoutErrors pass
    unchanged)."""
    if timeout is None:
        return await func(*args, **kwargs)
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await func(*args, **kwargs)
    except TimeoutError:
        if not scope.expired():
            raise
        raise TimeoutError(
            f"task {name} ran past its timeout of {timeout:g} s; it was cancelled"
        ) from None


def error_info(
    exc: BaseException, attempt: int, worker: str, tb: str | None = None, at: float | None = None
) -> dict:
    kind = type(exc)
    tb = tb if tb is not None else "".join(traceback.format_exception(exc))
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc)[:MESSAGE_LIMIT],
        "traceback": tb[-TRACEBACK_LIMIT:],
        "attempt": attempt,
        "at": time.time() if at is None else at,
        "worker": worker,
    }


class Executor:
    """Runs attempts for one worker (thread-safe: it keeps no per-attempt state)."""

    def __init__(
        self,
        worker: str,
        *,
        default_max_retries: int,
        retry_backoff: float,
        retry_backoff_max: float,
    ) -> None:
        self.worker = worker
        self.default_max_retries = default_max_retries
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        # The time of an error: Redis's clock as the worker last saw it (parts.py sets it).
        self.now: Callable[[], float] = time.time
        # Set by the runners (runners.py): watch() is told of an attempt with a deadline,
        # returned() says whether a returning task still owns its attempt (not timed out).
        self.watch: Callable[[Attempt], None] = lambda attempt: None
        self.returned: Callable[[Attempt], bool] = lambda attempt: True

    def error_info(self, exc: BaseException, attempt: int, tb: str | None = None) -> dict:
        """:func:`error_info` of this worker, its time on Redis's clock (``now``)."""
        return error_info(exc, attempt, self.worker, tb, self.now())

    def job(self, attempt: Attempt) -> Job:
        return make_job(
            attempt.id,
            attempt.queue,
            RUNNING,
            attempt.fields or EMPTY,
            self.default_max_retries,
            attempts=attempt.number,
            worker=self.worker,
        )

    def prepare(self, attempt: Attempt) -> tuple[Job, Task | None] | Outcome:
        """Decode the attempt's record and find its task (its deadline set and watched when
        the task has a timeout): the job and task to run, or the failure of a corrupt one."""
        try:
            if attempt.fields is None or not attempt.on_loop:  # else aio.classify decoded it
                attempt.fields = decode_record(attempt.record)
        except CorruptJob as exc:
            logger.error(CORRUPT_LINE, attempt.id, exc)
            return Outcome(attempt, ok=False, error=self.error_info(exc, attempt.number))
        job = self.job(attempt)
        if attempt.ready is not None and not attempt.ready.is_set():  # recurring/recorder.py
            attempt.ready.wait(RECORD_WAIT)  # a recurring occurrence: decided, committed first
            # Its start is now: the wait for the commit is not the task's run time, which
            # sizes the prefetch (prefetch.py), and so the claims.
            attempt.started = time.monotonic()
        if attempt.skip is not None:  # not run: acknowledged (claims.py logged why)
            return Outcome(attempt, ok=True, job=job)
        task = find_task(job.task)
        if task is not None and task.timeout is not None:
            attempt.timeout, attempt.thread = task.timeout, threading.get_ident()
            grace = ASYNC_GRACE if task.is_async or attempt.on_loop else 0.0
            attempt.deadline = time.monotonic() + task.timeout + grace
            self.watch(attempt)
        return job, task

    def begin(self, job: Job, task: Task | None) -> None:
        """Just before the task's function is called: raise TaskNotFound for a task this
        process does not know, send job_started."""
        if task is None:
            get_task(job.task)  # raises TaskNotFound with the explanation
        signals.send(signals.job_started, task, job=job)
        if logger.isEnabledFor(logging.DEBUG):  # -v 2: one line more per job
            logger.debug("job %s %s started (attempt %d)", job.id, job.task, job.attempts)

    def run(self, attempt: Attempt) -> Outcome:
        """Run the attempt on this thread (an async task on an event loop of its own)."""
        close_old_connections()
        try:
            prepared = self.prepare(attempt)
            if isinstance(prepared, Outcome):
                return prepared
            job, task = prepared
            started = time.perf_counter()
            try:
                self.begin(job, task)
                token = _current_job.set(job)  # running(job), without a generator per job
                try:
                    result = _call(task, job, attempt.timeout)  # type: ignore[arg-type]
                finally:
                    _current_job.reset(token)
            except BaseException as exc:
                return self.raised(attempt, job, task, exc, time.perf_counter() - started)
            return self.returned_value(attempt, job, task, result, time.perf_counter() - started)
        except BaseException as exc:  # never lose a runner or a job to a bug here
            return self.internal_error(attempt, exc)
        finally:
            close_old_connections()

    def internal_error(self, attempt: Attempt, exc: BaseException) -> Outcome:
        logger.exception("internal error running job %s", attempt.id)
        return Outcome(attempt, ok=False, error=self.error_info(exc, attempt.number))

    def raised(
        self, attempt: Attempt, job: Job, task: Task | None, exc: BaseException, duration: float
    ) -> Outcome:
        """The task raised ``exc``: its failure, or a late outcome once timed out (only an
        attempt with a deadline can be)."""
        if attempt.deadline is not None and not self.returned(attempt):
            return self._late(attempt, job, duration)
        return self._failed(attempt, job, task, exc, duration)

    def returned_value(
        self, attempt: Attempt, job: Job, task: Task | None, result: Any, duration: float
    ) -> Outcome:
        """The task returned ``result``: its success, or a late outcome once timed out."""
        if attempt.deadline is not None and not self.returned(attempt):
            return self._late(attempt, job, duration)
        if logger.isEnabledFor(logging.INFO):  # -v 1, the default: one line per attempt
            logger.info(
                "job %s %s succeeded in %.1f ms (attempt %d)",
                job.id,
                shown_call(job.task, job.args, job.kwargs)[0],
                duration * 1000,
                job.attempts,
            )
        signals.send(signals.job_succeeded, task, job=job, result=result, duration=duration)
        return Outcome(attempt, ok=True, job=job)

    def timed_out(self, attempt: Attempt) -> Outcome:
        """The watchdog's failure of an attempt past its deadline: a TimeoutError, with the
        stack the runner thread was in at that moment as its traceback."""
        job = self.job(attempt)
        left = (
            "it blocked the worker's event loop, so it could not be cancelled"
            if attempt.on_loop
            else "its thread was left to finish"
        )
        exc = TimeoutError(
            f"task {job.task} ran past its timeout of {attempt.timeout:g} s (attempt "
            f"{job.attempts}); {left}, its result will be discarded"
        )
        frame = sys._current_frames().get(attempt.thread or 0)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        tb = f"Stack of the runner thread at the timeout:\n{stack}" if stack else ""
        tb += "".join(traceback.format_exception_only(exc))
        return self._failed(attempt, job, find_task(job.task), exc, attempt.timeout or 0.0, tb)

    def _late(self, attempt: Attempt, job: Job, duration: float) -> Outcome:
        logger.warning(
            "job %s %s returned after %.1f s, past its timeout of %g s: its result is "
            "discarded (the timeout was recorded as the attempt's failure)",
            job.id,
            job.task,
            duration,
            attempt.timeout or 0.0,
        )
        return Outcome(attempt, ok=False, job=job, late=True)

    def _failed(
        self,
        attempt: Attempt,
        job: Job,
        task: Task | None,
        exc: BaseException,
        duration: float,
        tb: str | None = None,
    ) -> Outcome:
        tb = "".join(traceback.format_exception(exc)) if tb is None else tb
        will_retry = job.will_retry
        base = self.retry_backoff
        if task is not None and task.retry_backoff is not None:
            base = float(task.retry_backoff)
        delay = backoff_delay(job.attempts, base, self.retry_backoff_max) if will_retry else -1.0
        # One line per failed attempt (a final one at ERROR); died() adds none.
        logger.log(
            logging.WARNING if will_retry else logging.ERROR,
            FAILED_LINE,
            job.id,
            shown_call(job.task, job.args, job.kwargs)[0],
            duration * 1000,
            job.attempts,
            job.max_retries + 1,
            type(exc).__name__,
            exc,
            f"retrying in {delay:.1f} s" if will_retry else "moving it to the dead-letter set",
        )
        signals.send(
            signals.job_failed,
            sender(job.task),
            job=job,
            exception=exc,
            traceback=tb,
            will_retry=will_retry,
        )
        error = self.error_info(exc, job.attempts, tb)
        error["duration"] = round(duration, 6)
        if will_retry:
            error["retry_in"] = round(delay, 3)
        return Outcome(attempt, ok=False, job=job, error=error, delay=delay)

    def lost(self, outcome: Outcome) -> None:
        """Redis no longer had the attempt under its lease when its result arrived."""
        logger.warning(
            "job %s: lease lost before its result was recorded (it ran past the visibility "
            "timeout without heartbeats, or Redis was unreachable); it may run again",
            outcome.attempt.id,
        )

    def died(self, outcome: Outcome, died_at: float | None) -> None:
        """The failure moved the job to the dead-letter set: log it, send job_dead."""
        job = outcome.job or self.job(outcome.attempt)
        job = replace(job, status=DEAD, died_at=to_datetime(died_at), lease_until=None)
        logger.debug("job %s %s moved to the dead-letter set", job.id, job.task or "?")
        message = f"{outcome.error.get('type')}: {outcome.error.get('message')}"
        signals.send(signals.job_dead, sender(job.task), job=job, error=message)
