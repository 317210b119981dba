"""What a worker does with the occurrences of a claim, before any of them runs: one batch
for all the occurrences the claims of a moment returned (10,000 schedules firing in the same
second cost a few statements per turn of the recorder, not two per occurrence). The claim
only hands them to recorder.py's thread (the dispatcher goes on claiming), which, before
any of them runs:

1. reads the schedules' states (one SELECT);
2. decides each occurrence: a missed fire time by its schedule's ``missed`` policy
   (policy.py, at the claim's time), an occurrence of a replaced definition by the
   change's time (one due before the change took effect still runs; a later one does
   not), and marks those that do not run (``attempt.skip``: acknowledged without calling
   the task);
3. the durable record: each schedule's ``last_fire_ms`` raised to its latest fire time here
   (one statement, committed before any of these occurrences runs), so no occurrence at
   or before it is created again, whatever Redis loses;
4. then lets them run, and stores the successors: the next fire time of each schedule,
   stored by occur.lua (one call per queue), from the definition recorded in the
   database, so a worker whose own settings are older or newer keeps the chain of the
   recorded one (a rolling deploy).

A worker that cannot read or write the database logs it and runs the occurrences anyway
(successors from what its last reconcile pass saw). The outcomes (succeeded, failed, dead)
are buffered by hooks.py and written here, a statement per outcome, at each look of the
reconcile loop (passes.py) and when the worker stops: a commit costs milliseconds of fsync,
too much for the dispatcher's thread at every round trip.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from django_delayq.recurring import definitions, known
from django_delayq.recurring.fire_times import next_fire
from django_delayq.recurring.ids import (
    may_be_occurrence,
    parse_occurrence_id,
    version_hash,
)
from django_delayq.recurring.occurrences import Occurrences, recorded_definition
from django_delayq.recurring.policy import Verdict, verdict
from django_delayq.recurring.recorder import WAIT, Decided, Recorder

logger = logging.getLogger("django_delayq.recurring")

DELETED = "deleted"  # the digest of a schedule that was removed (reconcile.py)
_LITERAL = re.compile(r"[0-9A-Z]{26}")  # an occurrence id: safe as a SQL literal
FIELDS = ("name", "name_hash", "digest", "generation", "since_ms", "last_fire_ms")
# (name, digest) -> (the recorded definition, or None when it cannot be parsed here; its
# recorded queue)
_parsed: dict[tuple[str, str], tuple[definitions.Definition | None, str | None]] = {}
_outcomes: list[tuple[str, str]] = []  # (job id, outcome) not yet written
_outcomes_lock = threading.Lock()
_warned_at = -1e9
# Set when successors could not be stored: the reconcile loop then runs a full pass at its
# next look (passes.py), which stores them.
successors_lost = threading.Event()


def _version(state: dict) -> int:
    return version_hash(state["digest"], state["generation"])


def _definitions(states: dict[int, dict]) -> None:
    """Parse, once per digest, the definitions the database records for ``states`` (what
    every worker follows, whatever its own settings say): one read of the rows not seen."""
    from django_delayq.models import ScheduleState

    missing = []
    for hashed, state in states.items():
        key = (state["name"], state["digest"])
        if key in _parsed:
            continue
        entry = known.known(hashed)  # this process's pass parsed it already
        if entry is not None and entry.digest == state["digest"]:
            _parsed[key] = (entry.definition, None)
        else:
            missing.append(state["name"])
    if not missing:
        return
    rows = ScheduleState.objects.filter(name__in=missing).values("name", "digest", "definition")
    for row in rows:
        recorded = row["definition"] or {}
        found = recorded_definition(row["name"], recorded)
        if found is not None and found.digest != row["digest"]:
            found = None
        if len(_parsed) > 100_000:
            _parsed.clear()
        _parsed[(row["name"], row["digest"])] = (found, recorded.get("queue"))


def claimed(store: Any, now_s: float, attempts: Sequence[Any], clock_now: float | None) -> None:
    """Hand the occurrences among ``attempts`` (one claim's, claimed at ``now_s``: Redis's
    clock, epoch seconds) to the recorder's thread, which decides, records and continues
    them (``_decide``); each gets the event (``attempt.ready``) set once that is done. Never
    raises."""
    occurrences = []
    for attempt in attempts:
        # Only a first attempt is decided: a retry, or a job recovered after its worker
        # died mid-run, started once already (its fire time was recorded, its successor
        # stored) and runs again, however late (at-least-once delivery of one job).
        if attempt.number == 1 and may_be_occurrence(attempt.id):
            parsed = parse_occurrence_id(attempt.id)
            if parsed is not None:
                occurrences.append((attempt, *parsed))
    if not occurrences:
        return
    try:
        claim = Claimed(store, round(now_s * 1000), time.monotonic(), occurrences, clock_now)
        ready = recorder.hand(claim)
        for attempt, *_ in occurrences:
            attempt.ready = ready  # a runner waits for it before calling the task
    except Exception:  # never lose a claim to this: the occurrences run
        logger.exception("recurring schedules: could not handle the occurrences of a claim")


class Claimed(NamedTuple):
    """One claim's occurrences as the recorder's thread takes them: (attempt, fire time,
    name hash, version) each, claimed at ``now_ms`` on Redis's clock (``at``: this
    process's monotonic clock then)."""

    store: Any
    now_ms: int
    at: float
    occurrences: list[tuple[Any, int, int, int]]
    clock_now: float | None


def _state_table(write: bool) -> tuple[Any, str, Callable[[str], str]]:
    """(connection, quoted table name, quoted column of a field) of ScheduleState, for the
    plain statements below (on the alias the routers give it)."""
    from django.db import connections, router

    from django_delayq.models import ScheduleState

    route = router.db_for_write if write else router.db_for_read
    connection = connections[route(ScheduleState)]
    quote, meta = connection.ops.quote_name, ScheduleState._meta
    return connection, quote(meta.db_table), lambda name: quote(meta.get_field(name).column)


def _read_states(hashes: set[int]) -> dict[int, dict] | None:
    """The states of these name hashes, by hash (one SELECT, without the ORM's compile:
    it runs for every turn of the recorder); None when the database cannot say."""
    connection, table, column = _state_table(write=False)
    columns = ", ".join(column(name) for name in FIELDS)
    listed = ", ".join(str(int(h)) for h in hashes)  # integers: literals, nothing to parse
    sql = f"SELECT {columns} FROM {table} WHERE {column('name_hash')} IN ({listed})"
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            states = {row[1]: dict(zip(FIELDS, row, strict=True)) for row in cursor.fetchall()}
        _definitions(states)
        return states
    except DatabaseError as exc:
        _warn("cannot read the recurring schedules' states (their occurrences run anyway)", exc)
        return None


def _decide_claims(claims: list[Claimed]) -> Decided:
    """The recorder's turn (recorder.py): the states of every occurrence of ``claims``
    (one SELECT), each decided (``attempt.skip`` set on those that do not run), the
    records to commit, and what stores the successors once they are committed. When the
    states cannot be read, the occurrences run, nothing is recorded, and the successors
    follow what this process's last pass saw."""
    read_at = time.monotonic()  # the states read below are at least this recent
    states = _read_states({hashed for claim in claims for _, _, hashed, _ in claim.occurrences})
    records: dict[int, tuple[int, str, str]] = {}  # hash -> (fire, job id, outcome)
    # By store (one a worker): [store, successors, decided at, clock]; decided at: when the
    # durable record was read, on Redis's clock (occur.lua's STALE), the earliest claim's.
    by_store: dict[int, list[Any]] = {}
    for claim in claims:
        decided_ms = claim.now_ms + round((read_at - claim.at) * 1000)
        group = by_store.setdefault(
            id(claim.store), [claim.store, Occurrences(), decided_ms, claim.clock_now]
        )
        group[2] = min(group[2], decided_ms)
        _decide_claim(claim, states, records, group[1])
    if states is None:
        records = {}

    def after() -> None:
        for store, following, decided_ms, clock_now in by_store.values():
            _store_successors(store, following, decided_ms, clock_now)

    return records, after


def _decide_claim(
    claim: Claimed, states: dict[int, dict] | None, records: dict, successors: Occurrences
) -> None:
    """Decide ``claim``'s occurrences into ``records`` (each schedule's latest fire time)
    and ``successors``."""
    now_ms = claim.now_ms
    for attempt, fire, hashed, version in claim.occurrences:
        state = states.get(hashed) if states is not None else _known_state(hashed)
        if state is None:
            continue  # no schedule has this name hash any more: it runs, nothing follows
        decided = _decide(state, fire, version, now_ms)
        if decided is None:
            continue
        definition, result = decided
        if not result.runs:
            attempt.skip = result.skip
            logger.info(
                "occurrence %s of schedule %s (fire time %s) does not run: %s",
                attempt.id, state["name"], _shown(fire), result.skip,
            )  # fmt: skip
        previous = records.get(hashed)
        if previous is None or previous[0] < fire:
            records[hashed] = (fire, attempt.id, "running" if result.runs else "skipped")
        if definition is not None:
            after = max(result.after_ms, state["since_ms"], state["last_fire_ms"] or 0)
            queue = _parsed.get((state["name"], state["digest"]), (None, None))[1]
            successors.add(definition, version, [next_fire(definition, after)], queue)


def _decide(
    state: dict, fire: int, version: int, now_ms: int
) -> tuple[definitions.Definition | None, Verdict] | None:
    """(the definition whose successor follows, or None; the verdict), None to leave the
    occurrence alone."""
    if state["digest"] == DELETED or version != _version(state):
        # An occurrence of a replaced definition: due before the change took effect, it
        # was owed and runs; a later one belongs to the new definition, which has its own.
        if fire <= state["since_ms"]:
            return None, Verdict(None, fire)
        return None, Verdict("its schedule changed or was removed before its fire time", fire)
    definition = _parsed.get((state["name"], state["digest"]), (None, None))[0]
    if definition is None:
        return None
    if not definition.enabled:
        return None, Verdict("its schedule is disabled", fire)
    return definition, verdict(definition, fire, now_ms)


def _known_state(hashed: int) -> dict | None:
    """A state as this process's last pass saw it (the database cannot be read)."""
    entry = known.known(hashed)
    if entry is None:
        return None
    _parsed.setdefault((entry.name, entry.digest), (entry.definition, None))
    return {
        "name": entry.name, "name_hash": hashed, "digest": entry.digest,
        "generation": entry.generation, "since_ms": entry.since_ms, "last_fire_ms": None,
    }  # fmt: skip


def _store_successors(
    store: Any, successors: Occurrences, now_ms: int, clock_now: float | None
) -> None:
    from django_delayq.exceptions import DelayQError

    for queue in successors.by_queue:
        try:
            successors.store(store, queue, now_ms, clock_now)
        except DelayQError as exc:  # the reconcile pass stores them later
            successors_lost.set()
            _warn("could not store the next occurrences of recurring schedules", exc)


def _record_fires(records: dict[int, tuple[int, str, str]]) -> None:
    """Each schedule's durable record, in one UPDATE (one round trip, no ORM expression to
    compile): where the fire time is not older than ``last_fire_ms``, it becomes the last
    fire time, with its job, start and outcome. Its values are integers, occurrence ids
    (Crockford base 32) and two fixed words, written into the statement as literals
    (checked below): a driver would otherwise parse a statement of hundreds of
    placeholders at every claim."""
    connection, table, column = _state_table(write=True)
    rows = []
    for h, (f, job_id, word) in records.items():
        if not _LITERAL.fullmatch(job_id) or word not in ("running", "skipped"):
            raise ValueError(f"not an occurrence id and outcome: {job_id!r}, {word!r}")
        rows.append((int(h), int(f), job_id, word))
    joined = connection.vendor == "postgresql" or (
        connection.vendor == "sqlite" and connection.Database.sqlite_version_info >= (3, 33)
    )
    sql = (_joined if joined else _cased)(table, column, rows)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, [now])
    except DatabaseError as exc:
        _warn("cannot record the occurrences' fire times (they run anyway)", exc)


_FIRE_FIELDS = ("last_fire_ms", "last_job_id", "last_outcome", "last_started_at")


def _joined(table: str, column: Callable[[str], str], rows: list[tuple]) -> str:
    """The UPDATE as a join with the rows' VALUES (PostgreSQL, SQLite 3.33+): one index
    look-up a row, where a CASE is read through for every row (a 2,000-record commit took
    0.55 s on PostgreSQL and 60 us of CPU a record on SQLite, against 72 ms and 8 us)."""
    fire, job, outcome, started = (column(name) for name in _FIRE_FIELDS)
    values = ", ".join(f"({h}, {f}, '{job_id}', '{word}')" for h, f, job_id, word in rows)
    hashed = column("name_hash")
    return (
        f"WITH fired (h, f, j, o) AS (VALUES {values}) "
        f"UPDATE {table} SET {fire} = fired.f, {job} = fired.j, {outcome} = fired.o, "
        f"{started} = %s, {column('last_finished_at')} = NULL FROM fired "
        f"WHERE {table}.{hashed} = fired.h "
        f"AND ({table}.{fire} IS NULL OR {table}.{fire} <= fired.f)"
    )


def _cased(table: str, column: Callable[[str], str], rows: list[tuple]) -> str:
    """The UPDATE with a CASE a column (any database: MySQL and MariaDB have no UPDATE
    ... FROM)."""
    fire, job, outcome, started = (column(name) for name in _FIRE_FIELDS)
    hashed = column("name_hash")
    fires = " ".join(f"WHEN {h} THEN {f}" for h, f, _, _ in rows)
    jobs = " ".join(f"WHEN {h} THEN '{job_id}'" for h, _, job_id, _ in rows)
    outcomes = " ".join(f"WHEN {h} THEN '{word}'" for h, _, _, word in rows)
    fire_case = f"CASE {hashed} {fires} END"
    return (
        f"UPDATE {table} SET {fire} = {fire_case}, "
        f"{job} = CASE {hashed} {jobs} END, "
        f"{outcome} = CASE {hashed} {outcomes} END, "
        f"{started} = %s, {column('last_finished_at')} = NULL "
        f"WHERE {hashed} IN ({', '.join(str(h) for h, _, _, _ in rows)}) "
        f"AND ({fire} IS NULL OR {fire} <= {fire_case})"
    )


def buffer_outcome(job_id: str, outcome: str) -> None:
    """Remember an occurrence's outcome; written with the next claim (or pass)."""
    with _outcomes_lock:
        _outcomes.append((job_id, outcome))


def write_outcomes() -> None:
    """Write the buffered outcomes: one UPDATE per outcome and 2,000 occurrences, of the
    rows whose last job they are (an outcome of an older occurrence changes nothing). The
    ids are occurrence ids, written as literals (checked), as in _record_fires."""
    global _outcomes
    if not _outcomes:
        return
    with _outcomes_lock:
        pending, _outcomes = _outcomes, []
    by_outcome: dict[str, list[str]] = defaultdict(list)
    for job_id, outcome in dict(pending).items():  # the last outcome of each job
        if _LITERAL.fullmatch(job_id):
            by_outcome[outcome].append(job_id)
    connection, table, column = _state_table(write=True)
    job, word, finished = (column(n) for n in ("last_job_id", "last_outcome", "last_finished_at"))
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    close_old_connections()
    try:
        with connection.cursor() as cursor:
            for outcome, ids in by_outcome.items():
                for start in range(0, len(ids), 2000):
                    listed = ", ".join(f"'{i}'" for i in ids[start : start + 2000])
                    cursor.execute(
                        f"UPDATE {table} SET {word} = %s, {finished} = %s "
                        f"WHERE {job} IN ({listed})",
                        [outcome, now],
                    )
    except DatabaseError as exc:
        _warn("cannot record the outcomes of recurring occurrences", exc)


def worker_stopped() -> None:
    """A worker's dispatcher stopped: the recorder's turn under way ends (its successors
    stored), then the buffered outcomes are written."""
    recorder.idle(WAIT)
    write_outcomes()


def _warn(message: str, exc: Exception) -> None:
    """Log a database or Redis problem at most once a minute."""
    global _warned_at
    if time.monotonic() - _warned_at > 60:
        _warned_at = time.monotonic()
        logger.warning("recurring schedules: %s: %s", message, exc)


def _shown(fire_ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(fire_ms / 1000, UTC).isoformat(timespec="seconds")


recorder = Recorder(_record_fires, _decide_claims)
