"""A model-based test of the public API (issue 17): hypothesis drives random sequences of
schedule (expires= too) / cancel / replace / keep / reschedule / get_job, inside and outside
transactions (commit, rollback, nested savepoints), with DELAYQ["HORIZON"] turned on and off
between steps while rows wait, worker relay turns, burst worker runs on an injected clock,
and injected faults (a lost reply of a schedule or a reschedule, Redis down at a commit, a
refused DELETE of a relayed row), on the real Redis (a unique prefix, through a fault
proxy) and SQLite, then PostgreSQL. After every step it checks the public answers against
the plain model of tests/api_model.py (the outbox's promises I1-I9 in docs/internals.rst):

- schedule() returns the id the model says (the existing job's for a replace of a row, a
  replace of a Redis job outside a transaction and a keep; a fresh one otherwise) and the
  job's arguments;
- cancel() returns True iff the model had the job (by id or key) pending;
- reschedule(id / key=, delay= / at=) returns the job the model has pending (by key a row
  holding it first) with its id, arguments and the new due time, or None when the model has
  none; a row moves in the caller's transaction (a rollback puts its old due time back), a
  Redis job at once; a lost reply's re-send answers the first send;
- get_job(id) of every pending job (the transaction's own rows too, I1; rows whatever
  HORIZON is, I8) answers with the model's arguments, key and due time; of every other id
  ever returned it answers None (or a finished job);
- a worker run runs only pending jobs, with the model's arguments, never before their due
  time on the injected clock, each once, never one whose expires= passed before the run
  began; every Redis job due on that clock runs or, past its expiry, ends "expired"
  (get_job(id, finished=True)), never both;
- at the end (rolled back, HORIZON off, a relay turn, a worker far in the future) every job
  the model has pending runs exactly once with its arguments, and nothing else ever ran.

Left open by the spec, so the model accepts either answer: where a committed job waits (a
fast path that failed or was paused, a relay that has or has not run: the model observes the
placement, never what exists or runs); whether a worker's relay turn moved a row due on the
worker's clock (such a row may run or not; a Redis job due on it must run); whether a row
left by a failed fast path waits out outbox.GRACE once HORIZON is off (the drain waits,
bounded). Not generated (the spec says nothing): a keyed plain call inside a transaction, a
far replace of a Redis job, a keyed call or an in-transaction cancel on a job whose relayed
row stayed after a refused DELETE.

On 0.2.0 the machine fails at once (item 11, the shortest); the sequences at the end of this
file fail there on items 1, 2, 8, 9 and 11 each, and so do focused runs of the machine (rule
sets restricted so one item does not mask another; shrunk sequences in the issue's notes).

Budget: SETTINGS below (derandomized, no example database), printed by the test: 60
examples of up to 25 steps per database, about 10 s on SQLite and 12 s on PostgreSQL on a
2-core machine (measured on 0.2.0 with the checks recording instead of failing), plus about
5 s for the sequences.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.db import DatabaseError, connections, transaction
from django.test import override_settings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_delayq import cancel, get_job, reschedule, signals
from django_delayq.exceptions import DelayQError
from django_delayq.models import OutboxJob
from django_delayq.outbox import relay as relaying
from django_delayq.outbox import rows as outbox
from django_delayq.storage import connection
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.api_model import NEW, Mismatch, Model
from tests.conftest import _installed, real_redis, real_redis_proxy
from tests.reliability.faults import FaultProxy, drop_reply, script
from tests.reliability.harness import free_port
from tests.routers import OutboxDatabases, OutboxTo
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "pg"])

Q = "default"
HORIZON = 600.0
DELAYS = (0.0, 30.0, 3600.0)  # 3600 > HORIZON: beyond the horizon when it is on
ADVANCES = (0.0, 40.0, 4000.0)  # seconds the worker's clock moves on before a run
SLACK = 5.0  # seconds between the model's clock and the code's (same machine)
KEYS = ("k1", "k2")
# schedule(expires=...): none, passed by a worker 40 s ahead (ADVANCES), not by one 40 s ahead.
EXPIRES = (None, None, 20.0, 600.0)
SETTINGS = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
    report_multiple_bugs=False,
)


class World:
    """What the machine drives: the store (through the fault proxy), the database alias,
    the settings with HORIZON on or off, and the faults."""

    def __init__(self, alias: str, store: Store, proxy: FaultProxy) -> None:
        self.alias, self.store, self.proxy = alias, store, proxy
        self.horizon_on = False
        self._override: override_settings | None = None
        self.down_at_commit = False
        self.refuse_delete = False
        self._delete = outbox.delete
        self.ran: list[tuple[str, list, float]] = []
        self.clock_offset = 0.0

    def set_horizon(self, on: bool) -> None:
        if self._override is not None:
            self._override.disable()
        delayq = {**django_settings.DELAYQ, "HORIZON": HORIZON if on else None}
        self._override = override_settings(DELAYQ=delayq)
        self._override.enable()
        self.install(self.store)
        self.horizon_on = on

    def install(self, store: Store) -> None:
        connection._stores[(None, False, "default", self.store.prefix)] = store

    def arm_refused_delete(self) -> None:
        """The next DELETE of relayed rows (rows whose jobs are pending in Redis: the fast
        path's or a relay's) raises DatabaseError, as a lock timeout would."""
        world = self

        def refused(alias, ids, *args, **kwargs):
            ids = list(ids)
            pending = world.store.key(Q, "pending")
            relayed = ids and all(real_redis().zscore(pending, i) is not None for i in ids)
            if not relayed:
                return world._delete(alias, ids, *args, **kwargs)
            outbox.delete = world._delete
            world.refuse_delete = False
            raise DatabaseError("injected: the outbox DELETE is refused (a lock timeout)")

        outbox.delete = refused
        self.refuse_delete = True

    def reset(self) -> None:
        """Between examples: faults off, HORIZON off, no rows, no keys, no runs."""
        outbox.delete = self._delete
        self.refuse_delete = self.down_at_commit = False
        self.proxy.rules.clear()
        self.set_horizon(False)
        OutboxJob.objects.using(self.alias).all().delete()
        keys = list(real_redis().scan_iter(match=f"{self.store.prefix}:*", count=1000))
        if keys:
            real_redis().delete(*keys)
        self.ran.clear()
        self.clock_offset = 0.0
        relaying._fast_failed_at = -relaying.FAST_PAUSE

    def observe(self) -> tuple[set[str], set[str]]:
        """(ids pending in Redis, ids with an outbox row): where jobs wait, for the model's
        placement only."""
        client = real_redis()
        in_redis = {i.decode() for i in client.zrange(self.store.key(Q, "pending"), 0, -1)}
        in_table = set(OutboxJob.objects.using(self.alias).values_list("id", flat=True))
        return in_redis, in_table

    def run_worker(self, advance: float) -> float:
        self.clock_offset += advance
        offset = self.clock_offset
        clock: Callable[[], float] = lambda: time.time() + offset  # noqa: E731
        started = clock()
        worker = Worker([Q], burst=True, store=self.store, relay=True, clock=clock)

        def seen(sender, job, **kwargs):
            self.ran.append((job.id, list(job.args), clock()))

        signals.job_started.connect(seen, weak=False)
        try:
            assert worker.run() == 0
        finally:
            signals.job_started.disconnect(seen)
        return started


class APIMachine(RuleBasedStateMachine):
    world: World  # set by the test before the machine runs
    # When get_job() is checked after a step: "always"; "outside" transactions only; "never"
    # (the focused sequences below use these to show one item without another masking it).
    check_gets = "always"

    def __init__(self) -> None:
        super().__init__()
        self.w = self.world
        self.w.reset()
        self.m = Model()
        self.blocks: list[transaction.Atomic] = []
        self.counter = 0
        self.last = ""  # the id the last schedule() returned
        self.log: list[str] = []

    # -- helpers ------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.log.append(text)

    def fail(self, text: str) -> None:
        raise Mismatch(f"{text}\n  steps so far:\n    " + "\n    ".join(self.log))

    def _sync(self) -> None:
        try:
            self.m.sync(*self.w.observe())
        except Mismatch as exc:
            self.fail(str(exc))

    def _check_gets(self) -> None:
        if self.check_gets == "never" or (self.check_gets == "outside" and self._tx()):
            return
        pending = self.m.pending()
        for job in pending.values():
            got = get_job(job.id)
            if got is None:
                self.fail(f"get_job({job.id}) is None; the model has it pending (args {job.args})")
                continue
            if got.args != [job.args] or got.key != job.key:
                self.fail(
                    f"get_job({job.id}) has args {got.args} key {got.key!r}; the model says "
                    f"{[job.args]} key {job.key!r}"
                )
            due = got.due_at.timestamp()
            if abs(due - job.due) > SLACK:
                self.fail(f"get_job({job.id}) is due at {due:.0f}; the model says {job.due:.0f}")
            expires = None if got.expires_at is None else got.expires_at.timestamp()
            if (expires is None) != (job.expires is None) or (
                expires is not None and abs(expires - job.expires) > SLACK
            ):
                self.fail(f"get_job({job.id}) expires at {expires}; the model says {job.expires}")
        for job_id in self.m.issued - set(pending):
            got = get_job(job_id)
            if got is not None and got.status == "pending":
                self.fail(f"get_job({job_id}) is pending (args {got.args}); the model has none")

    def _after(self) -> None:
        if self.m.depth == 0:
            self._sync()
        self._check_gets()

    def _tx(self) -> bool:
        return self.m.depth > 0

    # -- schedule / cancel / get_job ------------------------------------------------------------

    @rule(
        key=st.sampled_from(KEYS),
        delay=st.sampled_from(DELAYS),
        on_commit=st.booleans(),
        keep=st.booleans(),
        expires=st.sampled_from(EXPIRES),
    )
    def schedule_keyed(self, key, delay, on_commit, keep, expires=None):
        """The same as schedule() with a unique key: replaces and keeps are what break."""
        self.schedule(key=key, delay=delay, on_commit=on_commit, keep=keep, expires=expires)

    @rule(
        key=st.sampled_from((None, *KEYS)),
        delay=st.sampled_from(DELAYS),
        on_commit=st.booleans(),
        keep=st.booleans(),
        expires=st.sampled_from(EXPIRES),
    )
    def schedule(self, key, delay, on_commit, keep, expires=None):
        in_tx = on_commit and self._tx()
        if key is not None and (self.m.stale_key(key) or (self._tx() and not on_commit)):
            # Not generated: a key whose relayed row stays (the spec does not say which of the
            # two a replace finds), and a keyed call outside on_commit inside a transaction.
            key = None
        far = self.w.horizon_on and delay > HORIZON
        if (
            far
            and key is not None
            and not in_tx
            and any(j.place == "redis" for j in self.m.holders(key))
        ):
            delay, far = DELAYS[1], False  # plain far replace of a Redis job: left open
        if (
            far
            and key is not None
            and in_tx
            and any(j.place == "redis" for j in self.m.holders(key))
        ):
            delay, far = DELAYS[1], False  # far row adopting a Redis job's key: left open
        self.counter += 1
        args = self.counter
        expected, target, how = self.m.schedule(key, args, 0, far, on_commit, keep)
        options = {"key": key, "delay": delay}
        if keep:
            options["on_conflict"] = "keep"
        if expires is not None:
            options["expires"] = expires
        due = time.time() + delay
        expires_at = None if expires is None else time.time() + expires
        job = t.remember.schedule(args, on_commit=self.w.alias if on_commit else False, **options)
        self.last = job.id
        self.note(
            f"schedule(args={args}, key={key!r}, delay={delay:.0f}, on_commit={on_commit}, "
            f"keep={keep}, expires={expires}) -> {job.id}  [{how}{', far' if far else ''}]"
        )
        fresh = job.id not in self.m.pending() and job.id not in self.m.issued
        if not (job.id in expected or (NEW in expected and fresh)):
            want = " or ".join("a new id" if e == NEW else e for e in sorted(expected))
            self.fail(f"schedule() returned {job.id}; the model says {want}")
            return
        if how == "keep":
            kept = self.m.pending()[job.id]
            if job.args != [kept.args]:
                self.fail(f"keep returned args {job.args}; the kept job has {[kept.args]}")
        else:
            if job.args != [args]:
                self.fail(f"schedule() returned args {job.args}, not {[args]}")
            self.m.apply_schedule(how, job.id, target, key, args, due, far, in_tx, expires_at)
        self._after()

    @rule(data=st.data(), by=st.sampled_from(("pending id", "key", "any id")))
    def cancel(self, data, by):
        if by == "key":
            self.cancel_one(key=data.draw(st.sampled_from(KEYS), label="key"))
            return
        # In the order schedule() returned them (ULIDs): a pending job's (the transaction's
        # rows too), or any id ever returned (cancelled, finished, rolled back, replaced).
        ids = sorted(self.m.pending() if by == "pending id" else self.m.issued)
        if ids:
            self.cancel_one(job_id=data.draw(st.sampled_from(ids), label="job id"))

    def cancel_one(self, job_id: str | None = None, key: str | None = None) -> None:
        job = self.m.pending().get(job_id) if job_id else None
        if self._tx() and (self.m.stale_key(key) or (job is not None and job.stale)):
            return  # not generated: a relayed row left behind, cancelled inside a transaction
        expected = self.m.cancel(job_id, key)
        got = cancel(job_id) if job_id else cancel(key=key)
        self.note(f"cancel({job_id or f'key={key!r}'}) -> {got}")
        if got != expected:
            self.fail(f"cancel returned {got}; the model says {expected}")
        self._after()

    @rule(
        data=st.data(),
        by=st.sampled_from(("pending id", "key", "any id")),
        delay=st.sampled_from(DELAYS),
        at=st.booleans(),
    )
    def reschedule(self, data, by, delay, at):
        """reschedule(id / key=, delay= or at=) inside and outside transactions (savepoints
        too: a rollback puts a row's old due time back); None when nothing is pending."""
        if by == "key":
            key, job_id = data.draw(st.sampled_from(KEYS), label="key"), None
        else:
            ids = sorted(self.m.pending() if by == "pending id" else self.m.issued)
            if not ids:
                return
            key, job_id = None, data.draw(st.sampled_from(ids), label="job id")
        job = self.m.to_reschedule(job_id, key)
        if self.m.stale_key(key) or (job is not None and job.stale):
            return  # not generated: a relayed row left behind (which of the two moves: open)
        due = time.time() + delay
        when = {"at": datetime.now(UTC) + timedelta(seconds=delay)} if at else {"delay": delay}
        got = reschedule(job_id, key=key, **when)
        self.note(
            f"reschedule({job_id or f'key={key!r}'}, {'at' if at else 'delay'}={delay:.0f}) -> "
            f"{None if got is None else got.id}"
        )
        if job is None:
            if got is not None:
                self.fail(f"reschedule returned {got.id} (due {got.due_at}); the model has none")
            return
        if got is None:
            self.fail(f"reschedule returned None; the model has {job.id} pending ({job.place})")
            return
        if (got.id, got.outcome, got.args) != (job.id, "rescheduled", [job.args]):
            self.fail(
                f"reschedule returned {got.id} {got.outcome} args {got.args}; the model says "
                f"{job.id} rescheduled args {[job.args]}"
            )
        if abs(got.due_at.timestamp() - due) > SLACK:
            self.fail(f"reschedule returned due {got.due_at}; the model says {due:.0f}")
        self.m.reschedule(job, due, self.w.horizon_on and delay > HORIZON)
        self._after()

    # -- transactions ---------------------------------------------------------------------------

    @precondition(lambda self: self.m.depth < 2)
    @rule()
    def begin(self):
        block = transaction.atomic(using=self.w.alias)
        block.__enter__()
        self.blocks.append(block)
        self.m.begin()
        self.note("atomic: begin" + (" (savepoint)" if self.m.depth > 1 else ""))
        self._after()

    @precondition(lambda self: self.m.depth > 0)
    @rule()
    def commit(self):
        block = self.blocks.pop()
        outermost = not self.blocks
        down = outermost and self.w.down_at_commit
        if down:  # Redis down at commit: the fast path fails, rows wait for a worker
            # Refused at once: redis-py's own connect retries (three, with backoff) would
            # spend half of this machine's time sleeping and prove nothing of the fast path.
            dead = redis.Redis(
                port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
            )
            self.w.install(Store(dead, prefix=self.w.store.prefix))
            self.w.down_at_commit = False
        try:
            block.__exit__(None, None, None)
        finally:
            if down:
                self.w.install(self.w.store)
                relaying._fast_failed_at = -relaying.FAST_PAUSE
        self.m.release()
        self.note("atomic: commit" + (" (Redis down)" if down else ""))
        self._after()

    @precondition(lambda self: self.m.depth > 0)
    @rule()
    def rollback(self):
        block = self.blocks.pop()
        exc = RuntimeError("roll back")
        block.__exit__(RuntimeError, exc, None)
        self.m.rollback()
        self.note("atomic: rollback")
        self._after()

    # -- settings, relays, workers ------------------------------------------------------------

    @precondition(lambda self: self.m.depth == 0)
    @rule(on=st.booleans())
    def horizon(self, on):
        self.w.set_horizon(on)
        self.m.horizon = HORIZON if on else None
        self.note(f"HORIZON {'on' if on else 'off'}")
        self._after()

    @precondition(lambda self: self.m.depth == 0)
    @rule()
    def relay(self):
        try:
            moved = relaying.Relay(self.w.store, threading.Event()).turn()
        except (DelayQError, DatabaseError) as exc:
            moved = f"failed ({exc})"
        self.note(f"relay turn -> {moved}")
        self._after()

    @precondition(lambda self: self.m.depth == 0)
    @rule(advance=st.sampled_from(ADVANCES))
    def worker(self, advance):
        before = {j.id: j.due for j in self.m.redis.values()}
        start = len(self.w.ran)
        clock = self.w.run_worker(advance)
        runs = self.w.ran[start:]
        self.note(f"worker burst, clock +{self.w.clock_offset:.0f} s -> ran {[r[0] for r in runs]}")
        self._check_runs(runs, clock)
        self._check_expired(clock)
        self._sync()  # a row the worker's relay turn moved adopts its key: the holder is gone
        for job_id, due in before.items():
            if due + SLACK <= clock and job_id in self.m.redis:
                self.fail(f"job {job_id} waits in Redis, due on this clock, and did not run")
        self._after()

    def _check_expired(self, started: float) -> None:
        """After a worker run whose clock began at ``started``: each pending job with an
        expiry that a worker ended is "expired" (kept as finished), and it had expired by the
        run's clock; one whose expiry passed before the run began and was claimed must be
        one of them (a due Redis job is claimed: the caller checks what waits)."""
        end = time.time() + self.w.clock_offset
        for job in list(self.m.pending().values()):
            if job.expires is None:
                continue
            kept = get_job(job.id, finished=True)
            if kept is None or kept.status != "expired":
                continue
            if job.expires > end + SLACK or job.due > end + SLACK:
                self.fail(
                    f"job {job.id} ended expired; the model has it expiring at "
                    f"{job.expires:.0f}, due at {job.due:.0f}, the run's clock ended {end:.0f}"
                )
            self.note(f"  {job.id} expired (never ran)")
            self.m.expire(job.id)

    def _check_runs(self, runs, started: float) -> None:
        """``started``: the worker's clock when the run began (every claim's is later)."""
        for job_id, args, at in runs:
            job = self.m.pending().get(job_id)
            if job is None:
                why = "ran already" if job_id in self.m.ran else "is not pending in the model"
                self.fail(f"job {job_id} ran with args {args} but {why}")
                continue
            if args != [job.args]:
                self.fail(f"job {job_id} ran with args {args}; the model says {[job.args]}")
            if job.due > at + SLACK:
                self.fail(f"job {job_id} ran {job.due - at:.0f} s early")
            if job.expires is not None and job.expires + SLACK <= started:
                self.fail(f"job {job_id} ran {started - job.expires:.0f} s after its expiry")
            if job.place == "row" and job.key is not None:  # relayed by the worker: it
                for other in self.m.holders(job.key):  # adopted its key from a Redis job
                    if other.place == "redis":
                        self.m.redis.pop(other.id)
            self.m.finished(job_id)

    # -- faults ---------------------------------------------------------------------------------

    @rule(kind=st.sampled_from(("lost reply", "Redis down at commit", "refused delete")))
    def fault(self, kind):
        """One rule for the three faults, so that schedule() and cancel() stay frequent."""
        if kind == "lost reply":  # the next schedule/relay/reschedule runs, its reply is lost
            self.w.proxy.add_rule(
                lambda c: (
                    script("schedule")(c) or script("schedule_many")(c) or script("reschedule")(c)
                ),
                drop_reply(),
            )
        elif kind == "Redis down at commit":  # the next outermost commit's fast path fails
            self.w.down_at_commit = True
        else:
            self.w.arm_refused_delete()
        self.note(f"fault: {kind}")

    # -- the end --------------------------------------------------------------------------------

    def drain(self) -> None:
        """Roll back what is open, turn faults and HORIZON off, relay, run everything: every
        pending job runs exactly once (I4, I6, I8)."""
        while self.blocks:
            self.rollback()
        outbox.delete = self.w._delete
        self.w.refuse_delete = False
        self.w.proxy.rules.clear()
        if self.w.horizon_on:
            self.horizon(False)
        self.relay()
        # HORIZON is off: every row is relayed at once (I8). A row written by a commit whose
        # fast path failed may wait out its GRACE (the spec leaves that open): the loop ends
        # when none is left, about GRACE on; the 30 s more only bound a hang (2 s, as before,
        # could be used up by one relay turn held up on a loaded machine).
        waited = time.monotonic()
        while self.w.observe()[1] and time.monotonic() - waited < outbox.GRACE + 30:
            time.sleep(0.2)
            self.relay()
        start = len(self.w.ran)
        clock = self.w.run_worker(10**6)
        runs = self.w.ran[start:]
        self.note(f"drain: worker far ahead -> ran {[r[0] for r in runs]}")
        self._check_runs(runs, clock)
        self._check_expired(clock)  # every job with an expiry left: far past it
        left = self.m.pending()
        if left:
            self.fail(f"after the drain, jobs never ran: {sorted(left)}")

    def teardown(self):
        try:
            self.drain()
        finally:
            while self.blocks:
                self.blocks.pop().__exit__(RuntimeError, RuntimeError("teardown"), None)
            self.w.reset()


# -- running it -------------------------------------------------------------------------------


@pytest.fixture(params=["default", "pg"])
def world(request):
    """The machine's world on SQLite, then PostgreSQL; the real Redis through a fault proxy."""
    alias = request.param
    with (
        real_redis_proxy() as proxy,
        override_settings(DATABASE_ROUTERS=[OutboxTo(alias), OutboxDatabases()]),
    ):
        OutboxDatabases.extra = {"pg"}
        installed = _installed(redis.Redis.from_url(proxy.url, socket_timeout=5))
        store = next(installed)
        w = World(alias, store, proxy)
        try:
            yield w
        finally:
            w.reset()
            if w._override is not None:
                w._override.disable()
            store.client = real_redis()
            installed.close()
            OutboxJob.objects.using("pg").all().delete()
            OutboxDatabases.extra = set()
            connections.close_all()


@pytest.mark.slow  # the suite's longest test (40-90 s a database): started first
def test_api_model(world):
    print(
        f"hypothesis: max_examples={SETTINGS.max_examples} "
        f"stateful_step_count={SETTINGS.stateful_step_count} derandomize={SETTINGS.derandomize}"
    )
    APIMachine.world = world
    run_state_machine_as_test(APIMachine, settings=SETTINGS)


# -- issue 17's items as explicit sequences (each failed on 0.2.0) ------------------------------


def S(key=None, delay=0.0, on_commit=False, keep=False):
    return ("schedule", {"key": key, "delay": delay, "on_commit": on_commit, "keep": keep})


BEGIN, COMMIT, ROLLBACK = ("begin", {}), ("commit", {}), ("rollback", {})
CANCEL_LAST = ("cancel_one", "last")
HORIZON_ON, HORIZON_OFF = ("horizon", {"on": True}), ("horizon", {"on": False})
# Where get_job() is checked in each sequence: item 11 (get_job in the transaction) would mask
# 1, 2 and 9, and item 8's get_job the replace of item 8's second sequence.
CHECK_GETS = {
    "8-replace-of-a-row-after-horizon-off": "never",
    "11-get-job-in-its-transaction": "always",
}
SEQUENCES = {
    # 1. cancel(id) / cancel(key=) of an on_commit job inside its transaction: it must not run.
    "1-cancel-id-in-its-transaction": [BEGIN, S(on_commit=True), CANCEL_LAST, COMMIT],
    "1-cancel-key-in-its-transaction": [
        BEGIN,
        S("k1", on_commit=True),
        ("cancel_one", {"key": "k1"}),
        COMMIT,
    ],
    # 2. The last replace of an on_commit keyed job wins (and near-then-far keeps the job).
    "2-replace-twice-in-one-transaction": [
        BEGIN,
        S("k1", on_commit=True),
        S("k1", delay=30.0, on_commit=True),
        COMMIT,
    ],
    "2-near-then-far-in-one-transaction": [
        HORIZON_ON,
        BEGIN,
        S("k1", on_commit=True),
        S("k1", delay=3600.0, on_commit=True),
        COMMIT,
    ],
    # 8. HORIZON turned off while rows wait: get_job finds them, a plain replace keeps the row.
    "8-get-job-of-a-row-after-horizon-off": [HORIZON_ON, S(delay=3600.0), HORIZON_OFF],
    "8-replace-of-a-row-after-horizon-off": [
        HORIZON_ON,
        S("k1", delay=3600.0),
        HORIZON_OFF,
        S("k1", delay=30.0),
    ],
    # 9. schedule(key=K, on_commit=True) over a pending Redis job: its id is the job's.
    "9-on-commit-replace-of-a-redis-job": [
        S("k1", delay=30.0),
        BEGIN,
        S("k1", on_commit=True),
        COMMIT,
    ],
    "9-on-commit-keep-of-a-redis-job": [
        S("k1", delay=30.0),
        BEGIN,
        S("k1", on_commit=True, keep=True),
    ],
    # 11. get_job() inside the transaction that scheduled the job (HORIZON off).
    "11-get-job-in-its-transaction": [BEGIN, S(on_commit=True)],
}


def play(world: World, steps: list, check_gets: str = "always") -> None:
    """Run the machine through ``steps`` and its final drain (hypothesis not involved)."""
    APIMachine.world = world
    machine = APIMachine()
    machine.check_gets = check_gets
    try:
        for name, kwargs in steps:
            if kwargs == "last":
                machine.cancel_one(job_id=machine.last)
            else:
                getattr(machine, name)(**kwargs)
    except BaseException:
        with contextlib.suppress(Exception):
            machine.teardown()
        raise
    machine.teardown()


@pytest.mark.parametrize("item", SEQUENCES)
def test_issue_17_sequence(world, item):
    play(world, SEQUENCES[item], CHECK_GETS.get(item, "outside"))
