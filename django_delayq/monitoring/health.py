"""The health of the queues: what ``delayq_status``, the metrics endpoint and the admin's
dashboard say about each queue, computed once here.

A queue is healthy unless

- ``lag``: its oldest due job has waited longer than ``max_lag`` seconds (when one is
  given), or
- ``no_worker``: it has due jobs and no live worker serves it (the roster, roster.py), or
- ``unknown_queue``: it was asked for by name (``delayq_status --queues``) and nothing
  knows it: no setting, registered task, live worker or job in Redis names it (a typo
  in a probe must not pass for a healthy, empty queue).

A paused queue (``django_delayq.pause``) is never ``lag`` or ``no_worker``: its due jobs
wait on purpose.

Reads only: per queue one round trip for its counts (and one for its totals, for the
metrics and delayq_status's expired and rescheduled columns), plus two for the roster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_delayq.conf import delayq_settings
from django_delayq.scheduling.registry import registered
from django_delayq.storage.queues import check_queue_name
from django_delayq.storage.roster import LiveWorker
from django_delayq.storage.store import Store
from django_delayq.wording import closest

LAG = "lag"
NO_WORKER = "no_worker"
UNKNOWN = "unknown_queue"


@dataclass(frozen=True)
class QueueHealth:
    queue: str
    pending: int  # in the pending set, due or not
    due: int  # pending and due now (the backlog)
    running: int  # claimed by a worker (in progress)
    dead: int
    lag: float  # seconds the oldest due job has waited; 0 when none is due
    workers: int  # live workers serving the queue
    problems: tuple[str, ...] = ()
    totals: dict[str, int] = field(default_factory=dict)  # reads.totals, when asked for
    paused: bool = False  # django_delayq.pause(): nothing is claimed until resume()
    finished: int = 0  # succeeded or cancelled jobs kept (FINISHED_MAX_AGE / _COUNT)

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def scaling_lag(self) -> float:
        """The lag the metrics give (delayq_lag_seconds, what autoscalers read): 0 while the
        queue is paused, whose jobs wait on purpose (more workers would not run them)."""
        return 0.0 if self.paused else self.lag


@dataclass(frozen=True)
class Report:
    now: float  # Redis's time
    max_lag: float | None
    queues: list[QueueHealth]
    workers: list[LiveWorker]
    # Keys on the roster where a worker's description should be, that Redis refused to read
    # (another type): left out of ``workers``.
    unreadable: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # every queue something names

    @property
    def healthy(self) -> bool:
        return all(q.healthy for q in self.queues)


def workers_per_queue(workers: Iterable[LiveWorker]) -> dict[str, int]:
    """How many live workers serve each queue."""
    served: dict[str, int] = {}
    for worker in workers:
        for queue in dict.fromkeys(worker.queues):
            served[queue] = served.get(queue, 0) + 1
    return served


def problems(
    due: int, lag: float, workers: int, max_lag: float | None, paused: bool = False
) -> tuple[str, ...]:
    found: list[str] = []
    if paused:  # its jobs wait on purpose
        return ()
    if max_lag is not None and lag > max_lag:
        found.append(LAG)
    if due and not workers:
        found.append(NO_WORKER)
    return tuple(found)


def iter_known_queues(store: Store, workers: Iterable[LiveWorker] = ()) -> Iterator[str]:
    """Every queue something names, each once, in this order: the configured ones
    (DEFAULT_QUEUE, QUEUES), those of registered tasks, every queue ``store`` remembers
    (read from Redis only when the caller gets that far, never cached), then those
    ``workers`` serve; invalid names skipped. The one list of queues: the admin lists them,
    get_job() and cancel() search them, the status, the metrics, the upgrade and the system
    checks look at them."""
    seen: set[str] = set()
    yield from named_queues(seen)
    yield from new_names(store.queues(), seen)  # read once the caller gets this far
    yield from new_names((q for worker in workers for q in worker.queues), seen)


def named_queues(seen: set[str]) -> Iterator[str]:
    """The queues the settings and registered tasks name (the start of
    :func:`iter_known_queues`, which reads Redis for the rest), each added to ``seen``."""
    configured = delayq_settings.QUEUES
    names = [delayq_settings.DEFAULT_QUEUE]
    names += list(configured) if isinstance(configured, (list, tuple, dict)) else []
    names += [t.queue for t in registered().values() if t.queue]
    yield from new_names(names, seen)


def new_names(names: Iterable[Any], seen: set[str]) -> Iterator[str]:
    """The valid queue names of ``names`` not in ``seen`` (each then added to it)."""
    for name in names:
        if not isinstance(name, str) or name in seen:
            continue
        seen.add(name)
        try:
            yield check_queue_name(name)
        except ValueError:
            continue  # a bad setting (delayq.E005) or garbage in a description


def unknown_queue_hint(queue: str, known: Sequence[str]) -> str:
    """What follows "nothing names <queue>": the known queue it is likely a typo of, else
    the known ones."""
    close = closest(queue, known)
    return f": did you mean {close!r}?" if close else f" (known: {', '.join(known)})"


def check_known_queues(store: Store, queues: Iterable[str]) -> None:
    """ValueError naming the first of ``queues`` nothing names (:func:`iter_known_queues`:
    the settings, registered tasks, the queues Redis remembers, live workers), with the
    known one it is likely a typo of: a command given a misspelt queue must not pause, or
    serve, a queue no job goes to. Redis is read only for a name the settings and the
    registered tasks do not give; DelayQError when it cannot be read."""
    named = set(named_queues(set()))
    wanted = [q for q in dict.fromkeys(queues) if q not in named]
    if not wanted:
        return
    known = list(iter_known_queues(store, store.roster.live(store.server_time())))
    for queue in wanted:
        if queue not in known:
            raise ValueError(
                f"unknown queue {queue!r}: nothing names it{unknown_queue_hint(queue, known)} "
                "(a queue is known once DELAYQ['QUEUES'], DEFAULT_QUEUE, a registered task, "
                "a live worker or a job scheduled to it names it); pass --force for a queue "
                "that is new on purpose"
            )


def report(
    store: Store,
    queues: Sequence[str] | None = None,
    *,
    max_lag: float | None = None,
    totals: bool = False,
) -> Report:
    """The health of ``queues`` (default: :func:`iter_known_queues`). Raises DelayQError when
    Redis cannot be read."""
    now = store.server_time()
    unreadable: list[str] = []
    workers = store.roster.live(now, unreadable)
    served = workers_per_queue(workers)
    known = list(iter_known_queues(store, workers))
    names = list(queues) if queues is not None else known
    results = []
    for queue in names:
        unknown = (UNKNOWN,) if queue not in known else ()
        counts = store.counts(queue, now)
        oldest = counts["oldest_due_at"]
        lag = max(now - oldest, 0.0) if oldest is not None and oldest <= now else 0.0
        results.append(
            QueueHealth(
                queue=queue,
                pending=counts["pending"],
                due=counts["due"],
                running=counts["running"],
                dead=counts["dead"],
                lag=lag,
                workers=served.get(queue, 0),
                problems=unknown
                + problems(
                    counts["due"], lag, served.get(queue, 0), max_lag, counts.get("paused", False)
                ),
                totals=store.totals(queue) if totals else {},
                paused=counts.get("paused", False),
                finished=counts.get("finished", 0),
            )
        )
    return Report(now, max_lag, results, workers, sorted(unreadable), known)
