"""The reconcile pass: every worker runs it every RECONCILE_INTERVAL seconds (a thread of
its own), with no leader. For each schedule it

1. records a new, changed, disabled or deleted definition in the database (one worker wins
   a conditional UPDATE; the winner cancels the old definition's pending occurrences),
2. creates the occurrences that should exist: the first fire time after now, the fire times
   of the last LATE_GRACE seconds that never started (late, not missed), and older missed
   ones by the schedule's ``missed`` policy,

never one at or before ``last_fire_ms`` (the latest occurrence that started, a durable
record) or ``since_ms`` (when the definition took effect). occur.lua stores each at most once
under its deterministic id. docs/internals.rst ("Recurring schedules") proves the rule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

from django.db import DatabaseError, close_old_connections

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import DelayQError
from django_delayq.record import FLAG_TOMBSTONE, FLAG_UNDECIDED, encode_record
from django_delayq.recurring import definitions, known
from django_delayq.recurring.definitions import Definition, ScheduleError
from django_delayq.recurring.times import (
    fire_after,
    fires_between,
    name_hash,
    occurrence_id,
    version_hash,
)
from django_delayq.registry import find_task
from django_delayq.storage.connection import get_store
from django_delayq.storage.recurring import occur, pending_due, server_time_ms
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.recurring")

LATE_GRACE_MS = 30_000  # a fire time this recent that never started is late, not missed
MISSED_ALL = 100  # most missed occurrences "all" runs
DELETED = "deleted"  # the digest of a schedule that was removed
STATE = ("name", "digest", "generation", "definition", "since_ms", "last_fire_ms")
# A pass takes at most about a tenth of the time between passes: with many schedules the
# interval grows past RECONCILE_INTERVAL (10,000 schedules: a pass of ~1 s, every ~10 s).
PASS_SHARE = 0.1
DATABASE_RETRY = 30.0  # seconds between passes while the database cannot be read


@dataclass
class PassResult:
    created: int = 0
    existing: int = 0
    refused: int = 0  # 'done' or 'stale' answers
    cancelled: int = 0
    changed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# Records and queues by (digest, registered task): a pass encodes each schedule's once.
_records: dict[tuple[str, int], tuple[bytes, str]] = {}


def encoded(definition: Definition) -> tuple[bytes, str]:
    """(record_of, queue_of) of ``definition``, cached."""
    key = (definition.digest, id(find_task(definition.task)))
    found = _records.get(key)
    if found is None:
        if len(_records) > 100_000:
            _records.clear()
        found = _records[key] = (record_of(definition), queue_of(definition))
    return found


def queue_of(definition: Definition) -> str:
    if definition.queue:
        return definition.queue
    task = find_task(definition.task)
    return (task.queue if task is not None else None) or delayq_settings.DEFAULT_QUEUE


def record_of(definition: Definition) -> bytes:
    """The job record of an occurrence: the task's call, flag 'i' (a finished occurrence
    leaves a tombstone, which occur.lua reads), the task's priority (0 for a task this
    process does not import), so occur.lua ranks it as schedule() would."""
    task = find_task(definition.task)
    flags = FLAG_TOMBSTONE
    max_retries = task.max_retries if task is not None else None
    if task is None:
        flags += FLAG_UNDECIDED
    if max_retries is None:
        max_retries = delayq_settings.MAX_RETRIES
    priority = task.priority if task is not None else 0
    return encode_record(
        definition.task,
        list(definition.args),
        definition.kwargs,
        None,
        max_retries,
        flags,
        priority,
    )


def version_of(state: object) -> int:
    return version_hash(state.digest, state.generation)  # type: ignore[attr-defined]


def wanted(definition: Definition, state: object, now_ms: int) -> list[int]:
    """The fire times whose occurrences should exist at ``now_ms``, oldest first: those of
    the last LATE_GRACE_MS (late), older missed ones by policy, and the next one."""
    floor = max(state.since_ms, state.last_fire_ms or 0)  # type: ignore[attr-defined]
    edge = now_ms - LATE_GRACE_MS
    recent = fires_between(definition, max(floor, edge), now_ms, LATE_GRACE_MS // 1000 + 1)
    older: list[int] = []
    if floor < edge and definition.missed == "all":
        older = fires_between(definition, floor, edge, MISSED_ALL)
    elif floor < edge and definition.missed == "once" and not recent:
        older = fires_between(definition, floor, edge, 1)
    return [*older, *recent, fire_after(definition, max(now_ms, floor))]


def cancel_pending(
    store: Store, old: dict, name: str, version: int, after_ms: int, now_ms: int
) -> int:
    """Cancel what an old definition left pending: its fire times in (after_ms, next after
    now]. A claimed or running one is left to finish."""
    try:
        definition = definitions.parse(name, old.get("spec", {}), "database")
        queue = old.get("queue") or delayq_settings.DEFAULT_QUEUE
    except ScheduleError:
        return 0
    if not definition.enabled:
        return 0
    fires = fires_between(definition, max(after_ms, now_ms - LATE_GRACE_MS), now_ms, 40)
    fires.append(fire_after(definition, now_ms))
    cancelled = 0
    for fire in fires:
        try:
            if store.cancel(queue, occurrence_id(name, version, fire)) is not None:
                cancelled += 1
        except DelayQError as exc:
            logger.warning("could not cancel an occurrence of schedule %s: %s", name, exc)
    return cancelled


def stored_definition(definition: Definition | None) -> dict:
    if definition is None:
        return {}
    spec = {k: v for k, v in definition.content().items() if k != "every_ms"}
    spec["args"] = list(definition.args)
    if definition.every_ms:
        spec["every"] = definition.every_ms / 1000
    spec = {k: v for k, v in spec.items() if v is not None}
    return {"spec": spec, "queue": queue_of(definition)}


class Reconciler:
    """Runs the pass; ``clock`` (epoch seconds) replaces Redis's TIME in tests."""

    def __init__(
        self,
        store: Store | None = None,
        stopped: threading.Event | None = None,
        clock: Callable[[], float] | None = None,
        interval: float | None = None,
    ) -> None:
        self.store = store or get_store()
        self.stopped = stopped or threading.Event()
        self.clock = clock
        self.failing = False  # the last pass could not read the database
        self.interval = float(delayq_settings.RECONCILE_INTERVAL if interval is None else interval)

    def now_ms(self) -> int:
        if self.clock is not None:
            return round(self.clock() * 1000)
        return server_time_ms(self.store)

    def run_pass(self) -> PassResult:
        from django_delayq.models import ScheduleState

        result = PassResult()
        now = self.now_ms()  # before the database's record is read (occur.lua's STALE)
        found, errors = definitions.load()
        result.errors = [str(e) for e in errors]
        states = {s["name"]: SimpleNamespace(**s) for s in ScheduleState.objects.values(*STATE)}
        hashes: dict[int, str] = {}
        for name in sorted(found):
            other = hashes.setdefault(name_hash(name), name)
            if other != name:
                message = (
                    f"schedules {other!r} and {name!r} share a name hash (one chance in a "
                    f"trillion): rename {name!r}; it is left out"
                )
                logger.error(message)
                result.errors.append(message)
                del found[name]
        plans = self._plan(found, states, now, result)
        for name, state in states.items():
            if name not in found and state.digest != DELETED:
                _, cancelled = self._changed(state, None, now)
                result.changed.append(name)
                result.cancelled += cancelled
        for queue, wanted_items in plans.items():
            # One ZMSCORE first: what is pending exists (nearly everything, pass after
            # pass); only the rest goes through occur.lua, with its records.
            scores = pending_due(self.store, queue, [item[0] for item in wanted_items])
            items = [
                item for item, score in zip(wanted_items, scores, strict=True) if score is None
            ]
            result.existing += len(wanted_items) - len(items)
            for start in range(0, len(items), 500):
                chunk = items[start : start + 500]
                outcomes = occur(self.store, queue, chunk, now, now / 1000 if self.clock else None)
                result.created += outcomes.count("created")
                result.existing += outcomes.count("exists")
                result.refused += (
                    len(outcomes) - outcomes.count("created") - outcomes.count("exists")
                )
        return result

    def _plan(
        self,
        found: dict[str, Definition],
        states: dict[str, object],
        now: int,
        result: PassResult,
    ) -> dict[str, list[tuple[str, bytes, int]]]:
        """Record new and changed definitions; the occurrences each enabled schedule should
        have, per queue; what the start hook may trust (known.py)."""
        plans: dict[str, list[tuple[str, bytes, int]]] = defaultdict(list)
        seen: dict[int, known.Known] = {}
        for name, definition in found.items():
            state = states.get(name)
            if state is None:
                state = self._first_seen(definition, now)
                result.changed.append(name)
            elif state.digest != definition.digest:
                state, cancelled = self._changed(state, definition, now)
                result.changed.append(name)
                result.cancelled += cancelled
            if not definition.enabled:
                continue
            version = version_of(state)
            if state.digest == definition.digest:  # type: ignore[attr-defined]
                seen[name_hash(name)] = known.Known(
                    name,
                    state.generation,  # type: ignore[attr-defined]
                    definition.digest,
                    state.since_ms,  # type: ignore[attr-defined]
                    version,
                    definition,
                )
            record, queue = encoded(definition)
            for fire in wanted(definition, state, now):
                plans[queue].append((occurrence_id(name, version, fire), record, fire))
        known.remember(seen)
        return plans

    def _first_seen(self, definition: Definition, now: int) -> object:
        from django_delayq.models import ScheduleState

        state, _ = ScheduleState.objects.get_or_create(
            name=definition.name,
            defaults={
                "name_hash": name_hash(definition.name),
                "digest": definition.digest,
                "definition": stored_definition(definition),
                "since_ms": now,
            },
        )
        if state.digest != definition.digest:  # another worker saw another definition
            state, _ = self._changed(state, definition, now)
        return state

    def _changed(
        self, state: object, definition: Definition | None, now: int
    ) -> tuple[object, int]:
        """Record a new definition (None: deleted) with one conditional UPDATE; the worker
        whose UPDATE wins cancels the old definition's pending occurrences."""
        from django_delayq.models import ScheduleState

        old_version = version_of(state)
        digest = definition.digest if definition is not None else DELETED
        won = ScheduleState.objects.filter(
            name=state.name,
            generation=state.generation,  # type: ignore[attr-defined]
        ).update(
            digest=digest,
            generation=state.generation + 1,  # type: ignore[attr-defined]
            definition=stored_definition(definition),
            since_ms=now,
        )
        cancelled = 0
        if won:
            logger.info("schedule %s %s", state.name, "changed" if definition else "removed")  # type: ignore[attr-defined]
            cancelled = cancel_pending(
                self.store,
                state.definition,  # type: ignore[attr-defined]
                state.name,  # type: ignore[attr-defined]
                old_version,
                state.last_fire_ms or 0,  # type: ignore[attr-defined]
                now,
            )
        fresh = ScheduleState.objects.get(name=state.name)  # type: ignore[attr-defined]
        return fresh, cancelled

    def loop(self) -> None:
        """Pass after pass until ``stopped``; an error is logged and the next pass tries again."""
        while not self.stopped.is_set():
            close_old_connections()
            began = time.monotonic()
            try:
                self.run_pass()
                self.failing = False
            except DatabaseError as exc:  # no table yet (migrate), or the database is down
                if not self.failing:
                    logger.warning(
                        "recurring schedules: the database cannot be read (migrate "
                        "django_delayq 0004?); trying again every %g s: %s",
                        DATABASE_RETRY,
                        exc,
                    )
                self.failing = True
                self.stopped.wait(DATABASE_RETRY)
            except Exception:
                logger.exception("recurring schedules: the reconcile pass failed")
            finally:
                close_old_connections()
            took = time.monotonic() - began
            self.stopped.wait(max(self.interval, took / PASS_SHARE - took))

    def new_thread(self) -> threading.Thread:
        return threading.Thread(target=self.loop, name="delayq-schedules", daemon=True)


def start(
    store: Store, stopped: threading.Event, clock: Callable[[], float] | None
) -> threading.Thread:
    """The worker's hook: the pass on a thread of its own (worker/dispatch.py)."""
    return Reconciler(store, stopped, clock).new_thread()
