"""The reconcile pass: every worker runs it every RECONCILE_INTERVAL seconds (a thread of
its own), with no leader. For each schedule it

1. records a new, changed, disabled or deleted definition in the database (one worker wins
   a conditional UPDATE; the winner cancels the old definition's next occurrence); a
   settings schedule only by a worker that runs the current version of the settings
   (deploys.py: the newest one a worker ran in the last minute),
2. creates the occurrences that should exist: the first fire time after now, the fire times
   of the last LATE_GRACE seconds that never started (late, not missed), and older missed
   ones by the schedule's ``missed`` policy,

never one at or before ``last_fire_ms`` (the latest occurrence that started, a durable
record) or ``since_ms`` (when the definition took effect). occur.lua stores each at most once
under its deterministic id. docs/internals.rst ("Recurring schedules") proves the rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import DelayQError
from django_delayq.recurring import definitions, deploys, known
from django_delayq.recurring.claims import DELETED, write_outcomes
from django_delayq.recurring.definitions import Definition
from django_delayq.recurring.fire_times import fire_after, fires_between, next_fire
from django_delayq.recurring.ids import name_hash, occurrence_id, version_hash
from django_delayq.recurring.occurrences import (
    Occurrences,
    queue_of,
    recorded_definition,
)
from django_delayq.recurring.policy import LATE_GRACE_MS, MISSED_ALL
from django_delayq.storage.connection import get_store
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.recurring")

STATE = ("name", "digest", "generation", "since_ms", "last_fire_ms")
CHUNK = 5000  # names per IN (...) of a bulk read


@dataclass
class PassResult:
    created: int = 0
    existing: int = 0
    refused: int = 0  # 'done' or 'stale' answers
    cancelled: int = 0
    changed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def version_of(state: object) -> int:
    return version_hash(state.digest, state.generation)  # type: ignore[attr-defined]


def wanted(definition: Definition, state: object, now_ms: int) -> list[int]:
    """The fire times whose occurrences should exist at ``now_ms``, oldest first: those of
    the last LATE_GRACE_MS (late), older missed ones by policy (policy.py), and the next."""
    floor = max(state.since_ms, state.last_fire_ms or 0)  # type: ignore[attr-defined]
    upcoming = next_fire(definition, floor)
    if upcoming > now_ms:  # nothing due since the last one: most schedules, most passes
        return [upcoming]
    edge = now_ms - LATE_GRACE_MS
    recent = fires_between(definition, max(floor, edge), now_ms, LATE_GRACE_MS // 1000 + 1)
    older: list[int] = []
    if floor < edge and definition.missed == "all":
        older = fires_between(definition, floor, edge, MISSED_ALL)
    elif floor < edge and definition.missed == "once" and not recent:
        older = fires_between(definition, floor, edge, 1)
    return [*older, *recent, next_fire(definition, max(now_ms, floor))]


def cancel_pending(store: Store, old: dict, name: str, version: int, now_ms: int) -> int:
    """Cancel the old definition's next occurrence (its first fire time after now). One
    already due stays: it was owed before the change and runs (claims.py)."""
    definition = recorded_definition(name, old)
    queue = old.get("queue") or delayq_settings.DEFAULT_QUEUE
    if definition is None or not definition.enabled:
        return 0
    try:
        job_id = occurrence_id(name, version, fire_after(definition, now_ms))
        return int(store.cancel(queue, job_id) is not None)
    except DelayQError as exc:
        logger.warning("could not cancel an occurrence of schedule %s: %s", name, exc)
        return 0


def _recorded(name: str) -> dict:
    """The definition a state row records (``{"spec": ..., "queue": ..., "source": ...}``)."""
    from django_delayq.models import ScheduleState

    found = ScheduleState.objects.filter(name=name).values_list("definition", flat=True).first()
    return found or {}


def stored_definition(definition: Definition | None) -> dict:
    if definition is None:
        return {}
    spec = {k: v for k, v in definition.content().items() if k != "every_ms"}
    spec["args"] = list(definition.args)
    if definition.every_ms:
        spec["every"] = definition.every_ms / 1000
    spec = {k: v for k, v in spec.items() if v is not None}
    return {"spec": spec, "queue": queue_of(definition), "source": definition.source}


class Reconciler:
    """Runs the pass; ``clock`` (epoch seconds) replaces Redis's TIME in tests."""

    def __init__(
        self,
        store: Store | None = None,
        clock: Callable[[], float] | None = None,
        interval: float | None = None,
    ) -> None:
        self.store = store or get_store()
        self.clock = clock
        self.error_log = definitions.ErrorLog(logger)  # each bad schedule logged once
        self.interval = float(delayq_settings.RECONCILE_INTERVAL if interval is None else interval)

    def now_ms(self) -> int:
        if self.clock is not None:
            return round(self.clock() * 1000)
        return self.store.recurring.server_time_ms()

    def run_pass(self) -> PassResult:
        from django_delayq.models import ScheduleState

        result = PassResult()
        now = self.now_ms()  # before the database's record is read (occur.lua's STALE)
        write_outcomes()
        # The states before the definitions: a definition read after a state is never older
        # than the change that state records, so no pass records a change back.
        states = {s["name"]: SimpleNamespace(**s) for s in ScheduleState.objects.values(*STATE)}
        found, errors = definitions.load()
        self.error_log.report(errors)
        result.errors = [str(e) for e in errors]
        self._drop_hash_clashes(found, result)
        current = deploys.is_current(self.store, deploys.settings_version(found), now)
        plans = self._plan(found, states, now, result, current)
        for name, state in states.items():
            if name not in found and state.digest != DELETED:
                old = _recorded(name)
                if current or old.get("source") == "database":
                    _, cancelled = self._changed(state, None, now, old)
                    result.changed.append(name)
                    result.cancelled += cancelled
        for queue in plans.by_queue:
            clock_now = now / 1000 if self.clock else None
            outcomes = plans.store(self.store, queue, now, clock_now, skip_pending=True)
            result.created += outcomes.count("created")
            result.existing += outcomes.count("exists")
            result.refused += len(outcomes) - outcomes.count("created") - outcomes.count("exists")
        self.store.recurring.mark_reconciled()
        return result

    def _drop_hash_clashes(self, found: dict[str, Definition], result: PassResult) -> None:
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

    def _plan(
        self,
        found: dict[str, Definition],
        states: dict[str, object],
        now: int,
        result: PassResult,
        current: bool,
    ) -> Occurrences:
        """Record new and changed definitions (those of the settings only when this worker
        runs the current version of them: deploys.py); the occurrences each enabled
        schedule should have; what claims.py may reuse (known.py)."""
        plans = Occurrences()
        seen: dict[int, known.Known] = {}
        ours = {n: d for n, d in found.items() if current or d.source == "database"}
        new = [d for n, d in ours.items() if n not in states]
        if new:
            states.update(self._first_seen(new, now))
            result.changed += [d.name for d in new]
        for name, definition in found.items():
            state = states.get(name)
            if state is None:
                continue
            if state.digest != definition.digest:  # type: ignore[attr-defined]
                if name not in ours:
                    continue  # a newer deploy recorded its own definition: leave it
                state, cancelled = self._changed(state, definition, now, _recorded(name))
                result.changed.append(name)
                result.cancelled += cancelled
            if not definition.enabled or state.digest != definition.digest:  # type: ignore[attr-defined]
                continue
            version = version_of(state)
            seen[name_hash(name)] = known.Known(
                name,
                state.generation,  # type: ignore[attr-defined]
                definition.digest,
                state.since_ms,  # type: ignore[attr-defined]
                version,
                definition,
            )
            plans.add(definition, version, wanted(definition, state, now))
        known.remember(seen)
        return plans

    def _first_seen(self, new: list[Definition], now: int) -> dict[str, object]:
        """Record schedules no worker recorded before, in bulk (a thousand rows written at
        once take a statement per thousand); their states as the database has them (another
        worker may have recorded another definition first: then it is a change)."""
        from django_delayq.models import ScheduleState

        ScheduleState.objects.bulk_create(
            [
                ScheduleState(
                    name=d.name,
                    name_hash=name_hash(d.name),
                    digest=d.digest,
                    definition=stored_definition(d),
                    since_ms=now,
                )
                for d in new
            ],
            ignore_conflicts=True,
            batch_size=1000,
        )
        names = [d.name for d in new]
        out: dict[str, object] = {}
        for start in range(0, len(names), CHUNK):
            rows = ScheduleState.objects.filter(name__in=names[start : start + CHUNK])
            out.update({row["name"]: SimpleNamespace(**row) for row in rows.values(*STATE)})
        return out

    def _changed(
        self, state: object, definition: Definition | None, now: int, old: dict
    ) -> tuple[object, int]:
        """Record a new definition (None: deleted) with one conditional UPDATE; the worker
        whose UPDATE wins cancels the old definition's next occurrence."""
        from django_delayq.models import ScheduleState

        old_version = version_of(state)
        digest = definition.digest if definition is not None else DELETED
        name = state.name  # type: ignore[attr-defined]
        won = ScheduleState.objects.filter(
            name=name,
            generation=state.generation,  # type: ignore[attr-defined]
        ).update(
            digest=digest,
            generation=state.generation + 1,  # type: ignore[attr-defined]
            definition=stored_definition(definition),
            since_ms=now,
        )
        cancelled = 0
        if won:
            logger.info("schedule %s %s", name, "changed" if definition else "removed")
            cancelled = cancel_pending(self.store, old, name, old_version, now)
        fresh = ScheduleState.objects.filter(name=name).values(*STATE).get()
        return SimpleNamespace(**fresh), cancelled
