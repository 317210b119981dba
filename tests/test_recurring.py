"""Recurring schedules (django_delayq.recurring): definitions and their errors, fire times
and DST in Europe/Berlin, the reconcile pass (idempotent, racing, after a flush), the chain
of successors, model changes, missed policies, checks and status. Time is injected: the
reconcile pass, the start hook and a burst worker share one clock; nothing sleeps."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from django_delayq import task
from django_delayq.models import Schedule, ScheduleState
from django_delayq.recurring import hooks
from django_delayq.recurring.definitions import ScheduleError, parse
from django_delayq.recurring.fire_times import fire_after, fires_between
from django_delayq.recurring.ids import parse_occurrence_id
from django_delayq.recurring.reconcile import LATE_GRACE_MS, Reconciler
from django_delayq.recurring.status import report
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.reliability import tasks as rtasks  # noqa: F401  (registers .occurrence)
from tests.testapp.tasks import runs_client

pytestmark = pytest.mark.django_db(transaction=True)
TASK = "tests.reliability.tasks.occurrence"
BERLIN = ZoneInfo("Europe/Berlin")


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class Sim:
    """One clock for the reconcile pass, the start hook and burst workers."""

    def __init__(self, store, start: datetime) -> None:
        self.store = store
        self.t = start.timestamp()
        self.tag = store.prefix
        runs_client().delete(f"runs:{self.tag}")
        hooks.forget_known()

    def clock(self) -> float:
        return self.t

    def reconcile(self):
        return Reconciler(self.store, clock=self.clock).run_pass()

    def work(self) -> None:
        worker = Worker(["default"], burst=True, clock=self.clock, store=self.store)
        assert worker.run() == 0

    def step(self, to: datetime) -> None:
        self.t = to.timestamp()
        self.reconcile()
        self.work()

    def runs(self) -> list[tuple[int, str, int]]:
        out = []
        for raw in runs_client().lrange(f"runs:{self.tag}", 0, -1):
            fire, job_id, attempt, _ = raw.decode().split()
            out.append((int(fire), job_id, int(attempt)))
        return out

    def fires(self) -> list[int]:
        return [fire for fire, _, _ in self.runs()]


@pytest.fixture
def sim_at(real_store):
    made = []

    def make(start: datetime, **schedules) -> Sim:
        tag = real_store.prefix
        full = {
            name: {**spec, "task": TASK, "kwargs": {"tag": tag}} for name, spec in schedules.items()
        }
        context = more_settings(real_store, SCHEDULES=full)
        context.__enter__()
        made.append(context)
        return Sim(real_store, start)

    yield make
    for context in made:
        context.__exit__(None, None, None)
    runs_client().delete(f"runs:{real_store.prefix}")


# -- definitions ------------------------------------------------------------------------


def test_parse_a_cron_and_an_interval_schedule():
    cron = parse(
        "nightly", {"task": "shop.tasks.sweep", "cron": "0  3 * * *", "tz": "Europe/Berlin"}
    )
    assert (cron.cron, cron.every_ms, cron.tz, cron.missed, cron.enabled) == (
        "0 3 * * *", None, "Europe/Berlin", "once", True,
    )  # fmt: skip
    every = parse("often", {"task": "a.b", "every": timedelta(minutes=2), "args": [1]})
    assert every.every_ms == 120_000 and every.args == (1,) and every.tz == "UTC"  # TIME_ZONE
    assert (
        parse("x", {"task": "a.b", "every": 30}).digest
        != parse("x", {"task": "a.b", "every": 31}).digest
    )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"task": "a.b"}, "exactly one of 'cron'"),
        ({"task": "a.b", "cron": "* * * *", "every": 5}, "exactly one of 'cron'"),
        ({"task": "a.b", "cron": "61 * * * *"}, "cron '61 * * * *' is not valid"),
        ({"task": "a.b", "cron": "0 3 * *"}, "five fields"),
        ({"task": "a.b", "every": 0.5}, "at least 1 second"),
        ({"task": "a.b", "every": "30"}, "number of seconds or a timedelta"),
        (
            {"task": "a.b", "every": 5, "tz": "Mars/Olympus"},
            "'Mars/Olympus' is not a known time zone",
        ),
        ({"task": "a.b", "every": 5, "missed": "twice"}, "'skip', 'once' or 'all'"),
        ({"task": "a.b", "every": 5, "args": [datetime(2020, 1, 1)]}, "JSON"),
        ({"task": "a.b", "every": 5, "queue": "no spaces"}, "invalid queue name"),
        ({"task": "a.b", "every": 5, "enabled": "yes"}, "True or False"),
        ({"task": "a.b", "every": 5, "when": 1}, "unknown key 'when'"),
        ({"task": "", "every": 5}, "dotted name"),
    ],
)
def test_bad_schedules_are_refused_with_what_to_do(spec, words):
    with pytest.raises(ScheduleError, match="schedule 'job'") as caught:
        parse("job", spec)
    assert words in str(caught.value)


# -- fire times and DST -----------------------------------------------------------------


def test_every_fires_at_multiples_of_the_interval_since_the_epoch():
    definition = parse("x", {"task": "a.b", "every": 30})
    assert fire_after(definition, 0) == 30_000
    assert fire_after(definition, 59_999) == 60_000
    assert fire_after(definition, 60_000) == 90_000
    assert fires_between(definition, 0, 150_000, 3) == [90_000, 120_000, 150_000]


def test_berlin_spring_gap_runs_once_at_the_shift_and_autumn_repeat_once():
    definition = parse("x", {"task": "a.b", "cron": "30 2 * * *", "tz": "Europe/Berlin"})
    spring = fires_between(
        definition,
        ms(datetime(2026, 3, 28, 12, tzinfo=UTC)),
        ms(datetime(2026, 3, 30, 12, tzinfo=UTC)),
        9,
    )
    assert [datetime.fromtimestamp(f / 1000, BERLIN).isoformat() for f in spring] == [
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist that night: at the shift
        "2026-03-30T02:30:00+02:00",
    ]
    autumn = fires_between(
        definition,
        ms(datetime(2026, 10, 24, 12, tzinfo=UTC)),
        ms(datetime(2026, 10, 26, 12, tzinfo=UTC)),
        9,
    )
    assert [datetime.fromtimestamp(f / 1000, UTC).isoformat() for f in autumn] == [
        "2026-10-25T00:30:00+00:00",  # 02:30 CEST, the first of the two 02:30s; not 01:30 UTC
        "2026-10-26T01:30:00+00:00",
    ]


def _night(sim: Sim, start: datetime, end: datetime, step: timedelta) -> None:
    moment = start
    while moment <= end:
        sim.step(moment)
        moment += step


def test_berlin_spring_forward_end_to_end_with_an_injected_clock(sim_at):
    start = datetime(2026, 3, 27, 12, tzinfo=UTC)
    sim = sim_at(start, nightly={"cron": "30 2 * * *", "tz": "Europe/Berlin"})
    _night(sim, start, datetime(2026, 3, 30, 12, tzinfo=UTC), timedelta(minutes=20))
    assert [datetime.fromtimestamp(f / 1000, BERLIN).isoformat() for f in sim.fires()] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert len({job for _, job, _ in sim.runs()}) == 3


def test_berlin_fall_back_end_to_end_runs_the_repeated_time_once(sim_at):
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    sim = sim_at(
        start,
        nightly={"cron": "30 2 * * *", "tz": "Europe/Berlin"},
        hourly={"cron": "0 * * * *", "tz": "Europe/Berlin"},
    )
    _night(sim, start, datetime(2026, 10, 26, 3, tzinfo=UTC), timedelta(minutes=10))
    nightly = sorted(f for f in sim.fires() if f % 3_600_000 == 1_800_000)
    assert [datetime.fromtimestamp(f / 1000, UTC).isoformat() for f in nightly] == [
        "2026-10-25T00:30:00+00:00",
        "2026-10-26T01:30:00+00:00",
    ]
    fires = sim.fires()
    assert len(fires) == len(set(fires))  # nothing twice
    # The hourly schedule runs every real hour, the repeated 02:00 both times (as cron does).
    hourly = sorted(f for f in fires if f % 3_600_000 == 0)
    assert hourly == list(range(hourly[0], hourly[-1] + 1, 3_600_000))


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (  # autumn, 2026-04-05: 01:30-02:00 repeats; 02:00 +10:30 is once, at 15:30 UTC
            datetime(2026, 4, 3, 14, tzinfo=UTC),
            ["04-04 02:00+1100", "04-04 02:30+1100", "04-05 02:00+1030", "04-05 02:30+1030"],
        ),
        (  # spring, 2026-10-04: 02:00-02:30 does not exist; the real 02:30 +11:00 runs
            datetime(2026, 10, 2, 14, tzinfo=UTC),
            ["10-03 02:00+1030", "10-03 02:30+1030", "10-04 02:30+1100", "10-05 02:00+1100"],
        ),
    ],
)
def test_lord_howe_chain_through_occurrence_jobs(sim_at, start, expected):
    """The 30-minute shift of Australia/Lord_Howe, through real occurrence jobs: one pass
    stores the first occurrence, then only the start hook's successors keep the chain
    going (a burst worker every half hour of the injected clock, no pass)."""
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    sim = sim_at(start, night={"cron": "*/30 2 * * *", "tz": "Australia/Lord_Howe"})
    assert sim.reconcile().created == 1
    moment = start
    while moment <= start + timedelta(days=2, hours=2):
        sim.t = moment.timestamp()
        sim.work()
        moment += timedelta(minutes=30)
    local = [
        datetime.fromtimestamp(f / 1000, lord_howe).strftime("%m-%d %H:%M%z") for f in sim.fires()
    ]
    assert local[: len(expected)] == expected
    assert len(sim.fires()) == len(set(sim.fires())) == len(local)


# -- the chain, the pass, races, flushes --------------------------------------------------


def test_the_successor_is_created_when_an_occurrence_starts(sim_at):
    start = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    sim = sim_at(start, tick={"every": 10})
    result = sim.reconcile()
    assert result.created == 1 and result.changed == ["tick"]
    for second in range(10, 60, 10):  # no pass: only the chain
        sim.t = start.replace(second=0).timestamp() + second
        sim.work()
    base = ms(start.replace(second=0))
    assert sim.fires() == [base + s * 1000 for s in range(10, 60, 10)]
    state = ScheduleState.objects.get(name="tick")
    assert state.last_fire_ms == base + 50_000 and state.last_outcome == "succeeded"


def _claim(sim, occurrences: list[tuple[str, int]]) -> tuple[list, dict[str, list[str]]]:
    """Hand ``occurrences`` ((schedule, fire time)) to claims.claimed as one claim's, at
    the sim's time: the attempts (``.skip`` set on those that do not run, once their event
    is set) and the SQL each thread ran (by thread name), on every connection."""
    from unittest import mock

    from django.db.backends.utils import CursorWrapper

    from django_delayq.recurring import claims

    attempts = _attempts(occurrences)
    ran: dict[str, list[str]] = {}
    real = CursorWrapper._execute

    def execute(self, sql, *args, **kwargs):
        ran.setdefault(threading.current_thread().name, []).append(sql)
        return real(self, sql, *args, **kwargs)

    with mock.patch.object(CursorWrapper, "_execute", execute):
        claims.claimed(sim.store, sim.t, attempts, sim.t)
        for attempt in attempts:  # decided and committed by the recorder's thread
            assert attempt.ready is not None and attempt.ready.wait(30)
        claims.recorder.idle(30)  # and the successors stored, after the commit
    return attempts, ran


def _attempts(occurrences: list[tuple[str, int]]) -> list:
    """Attempts of the occurrences ((schedule, fire time)) as a claim returns them."""
    from django_delayq.recurring.ids import occurrence_id
    from django_delayq.recurring.reconcile import version_of

    attempts = []
    for name, fire in occurrences:
        version = version_of(ScheduleState.objects.get(name=name))
        attempts.append(SimpleNamespace(id=occurrence_id(name, version, fire), skip=None, number=1))
    return attempts


def _db_schedules(sim_at, count: int) -> tuple[Sim, list[str], int]:
    """``count`` Schedule rows every 10 s from 12:00:00, passed once: (sim, names, 12:00)."""
    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start)
    names = [f"db{i}" for i in range(count)]
    for name in names:
        Schedule.objects.create(name=name, task=TASK, every=10, kwargs={"tag": sim.tag})
    sim.reconcile()
    return sim, names, ms(start)


def _rows(statements: list[str]) -> list[str]:
    return [sql for sql in statements if "django_delayq_schedule" in sql]


def _pending_ids(sim) -> set[str]:
    pending = sim.store.client.zrange(sim.store.key("default", "pending"), 0, -1)
    return {raw.decode() for raw in pending}


def test_a_claim_of_many_occurrences_costs_two_statements(sim_at):
    """Twenty schedules firing in the same second: the claiming thread runs no statement;
    the recorder's thread reads their states once and writes their durable records in one
    UPDATE, committed before any of them runs, then stores every successor (one script
    call); never the Schedule rows."""
    sim, names, base = _db_schedules(sim_at, 20)
    for step in (1, 2):
        sim.t += 10
        attempts, ran = _claim(sim, [(name, base + step * 10_000) for name in names])
        assert [a.skip for a in attempts] == [None] * 20
    assert _rows(ran.get(threading.current_thread().name, [])) == []
    sql = _rows(ran.get("delayq-recurring-records", []))
    assert [statement.split()[0] for statement in sql] == ["SELECT", "WITH"], sql
    assert "django_delayq_schedule " not in sql[0]  # the states only
    from django_delayq.recurring.ids import occurrence_id
    from django_delayq.recurring.reconcile import version_of

    for state in ScheduleState.objects.filter(name__in=names):
        assert state.last_fire_ms == base + 20_000 and state.last_outcome == "running"
        successor = occurrence_id(state.name, version_of(state), base + 30_000)
        assert successor in _pending_ids(sim)


def test_the_claiming_thread_never_waits_for_the_database(sim_at, monkeypatch):
    """The claim only hands its occurrences to the recorder's thread: while that thread
    waits for the database, claimed() has returned and the occurrences wait (their event
    unset); once it reads, they are decided and recorded before the event is set."""
    from django_delayq.recurring import claims

    sim, names, base = _db_schedules(sim_at, 3)
    sim.t += 10
    attempts = _attempts([(name, base + 10_000) for name in names])
    entered, release = threading.Event(), threading.Event()
    read = claims._read_states

    def slow(hashes):
        entered.set()
        release.wait(30)
        return read(hashes)

    monkeypatch.setattr(claims, "_read_states", slow)
    claims.claimed(sim.store, sim.t, attempts, sim.t)
    assert entered.wait(30)  # the recorder's thread is in the read: the claim returned
    ready = attempts[0].ready
    assert ready is not None and all(a.ready is ready for a in attempts)
    assert not ready.is_set()
    release.set()
    assert ready.wait(30) and claims.recorder.idle(30)
    assert [a.skip for a in attempts] == [None] * 3
    for state in ScheduleState.objects.filter(name__in=names):
        assert state.last_fire_ms == base + 10_000 and state.last_outcome == "running"


def test_an_occurrence_of_a_replaced_definition_does_not_run_after_the_change(sim_at):
    """Another worker changed the schedule (generation + 1) after this process's pass: the
    claim reads the state, so the old definition's occurrence due after the change does not
    run and gets no successor; its fire time is still recorded."""
    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start)
    Schedule.objects.create(name="db", task=TASK, every=10, kwargs={"tag": sim.tag})
    sim.reconcile()
    before = _pending_ids(sim)
    base = ms(start)
    sim.t += 10
    from types import SimpleNamespace

    from django_delayq.recurring import claims
    from django_delayq.recurring.ids import occurrence_id
    from django_delayq.recurring.reconcile import version_of

    old_version = version_of(ScheduleState.objects.get(name="db"))
    owed = SimpleNamespace(id=occurrence_id("db", old_version, base), skip=None, number=1)
    later = SimpleNamespace(id=occurrence_id("db", old_version, base + 10_000), skip=None, number=1)
    ScheduleState.objects.filter(name="db").update(generation=2, since_ms=base + 5_000)
    claims.claimed(sim.store, sim.t, [owed, later], sim.t)
    assert owed.ready.wait(30) and claims.recorder.idle(30)
    assert owed.skip is None  # due before the change took effect: owed, it runs
    assert later.skip and "changed" in later.skip
    assert ScheduleState.objects.get(name="db").last_fire_ms == base + 10_000
    assert _pending_ids(sim) == before  # no successor of the old version


def test_passes_are_idempotent_and_racing_workers_make_one_job_per_fire(sim_at):
    start = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    sim = sim_at(start, a={"every": 1}, b={"cron": "* * * * *"})
    sim.reconcile()
    barrier = threading.Barrier(3)
    results = []

    def racer():
        barrier.wait()
        results.append(Reconciler(sim.store, clock=sim.clock).run_pass())

    threads = [threading.Thread(target=racer) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r.created for r in results) == 0  # the first pass made them all
    for second in range(1, 40):
        sim.t = start.timestamp() + second
        for _ in range(3):  # three workers' passes at the same moment
            sim.reconcile()
        sim.work()
    fires = sim.fires()
    assert len(fires) == len(set(fires))
    every = sorted(f for f in fires if f % 60_000)
    assert every == list(range(every[0], every[-1] + 1, 1000))  # no gap
    assert min(fires) > ms(start)  # nothing at or before the schedule appeared


def test_a_flushed_redis_never_runs_a_fire_time_again(sim_at):
    start = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    sim = sim_at(start, a={"every": 1, "missed": "all"})
    sim.reconcile()
    for second in range(1, 6):
        sim.step(start + timedelta(seconds=second))
    ran = sim.fires()
    keys = list(sim.store.client.scan_iter(match=f"{sim.store.prefix}:*"))
    sim.store.client.delete(*keys)  # FLUSHALL, for this test's keys: tombstones gone too
    for second in range(6, 12):
        sim.step(start + timedelta(seconds=second))
    fires = sim.fires()
    assert fires[: len(ran)] == ran
    assert len(fires) == len(set(fires)), "a fire time ran twice"
    assert fires == list(range(fires[0], fires[-1] + 1, 1000))


def test_an_occurrence_run_early_by_hand_is_not_created_again(sim_at):
    from django_delayq.scheduling.api import get_job

    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start, slow={"every": 3600})
    sim.reconcile()
    (job_id,) = [
        i.decode() for i in sim.store.client.zrange(sim.store.key("default", "pending"), 0, -1)
    ]
    assert sim.store.run_now("default", [job_id], now=sim.t) == [True]  # the admin's "run now"
    sim.work()
    assert get_job(job_id) is None or get_job(job_id).status != "pending"
    assert [run[1] for run in sim.runs()] == [job_id]
    keys = list(sim.store.client.scan_iter(match=f"{sim.store.prefix}:*"))
    sim.store.client.delete(*keys)
    sim.t += 4000  # past the early job's real fire time
    sim.reconcile()
    sim.work()
    assert [run[1] for run in sim.runs()] == [job_id]  # its fire time never ran again


@pytest.mark.parametrize(("missed", "expected"), [("skip", 0), ("once", 1), ("all", 59)])
def test_missed_policies_after_an_outage(sim_at, missed, expected):
    start = datetime(2026, 1, 1, 12, 0, 45, tzinfo=UTC)
    sim = sim_at(start, m={"every": 60, "missed": missed})
    sim.reconcile()
    sim.step(start + timedelta(seconds=20))  # 12:01:00 runs
    assert len(sim.fires()) == 1
    keys = list(sim.store.client.scan_iter(match=f"{sim.store.prefix}:*"))
    sim.store.client.delete(*keys)  # the pending 12:02 is lost, no worker for an hour
    sim.step(start + timedelta(hours=1))  # 13:00:45: 12:02 ... 13:00 missed
    assert len(sim.fires()) == 1 + expected
    assert len(set(sim.fires())) == len(sim.fires())
    assert max(sim.fires()) <= ms(start + timedelta(hours=1)) - LATE_GRACE_MS or expected == 0


@pytest.mark.parametrize(
    ("missed", "back_at", "expected"),
    [
        # Back at 13:00:45: every fire time of 12:02 ... 13:00 is missed (over 30 s old).
        ("skip", 45, []),
        ("once", 45, [60]),
        ("all", 45, list(range(2, 61))),
        # Back at 13:00:10: 13:00 is late (10 s), so it runs whatever the policy.
        ("skip", 10, [60]),
        ("once", 10, [60]),
        ("all", 10, list(range(2, 61))),
    ],
)
def test_missed_policies_with_the_occurrence_stored_before_the_outage(
    sim_at, missed, back_at, expected
):
    """Every worker is down for an hour, Redis keeps the occurrence it had (12:02): when
    workers are back, 'skip' runs no missed fire time, 'once' only the latest, 'all' each
    one once; then the schedule goes on (13:01). Issue 25: 'skip' ran the stored 12:02 and
    'once' ran 12:02 and the latest."""
    start = datetime(2026, 1, 1, 12, 0, 45, tzinfo=UTC)
    sim = sim_at(start, m={"every": 60, "missed": missed})
    sim.reconcile()
    sim.step(start + timedelta(seconds=20))  # 12:01:05: 12:01 runs, 12:02 is stored
    minute = ms(datetime(2026, 1, 1, 12, 0, tzinfo=UTC)) // 60_000
    assert [f // 60_000 - minute for f in sim.fires()] == [1]
    sim.step(datetime(2026, 1, 1, 13, 0, back_at, tzinfo=UTC))
    for _ in range(3):  # the chain of 'all' runs one occurrence after another
        sim.work()
    assert [f // 60_000 - minute for f in sim.fires()] == [1, *expected]
    sim.step(datetime(2026, 1, 1, 13, 1, 5, tzinfo=UTC))
    assert [f // 60_000 - minute for f in sim.fires()][-1] == 61
    assert len(set(sim.fires())) == len(sim.fires())
    state = ScheduleState.objects.get(name="m")
    assert state.last_outcome == "succeeded"


def test_a_retry_or_a_redelivery_of_an_occurrence_runs_however_late(sim_at):
    """The policy decides an occurrence's first attempt only: one that started on time and
    is claimed again (a retry after its backoff, or recovered after its worker died
    mid-run) minutes later still runs, even under 'skip'."""
    from types import SimpleNamespace

    from django_delayq.recurring import claims
    from django_delayq.recurring.ids import occurrence_id
    from django_delayq.recurring.reconcile import version_of

    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start, m={"every": 60, "missed": "skip"})
    sim.reconcile()
    version = version_of(ScheduleState.objects.get(name="m"))
    fire = ms(start) + 60_000
    sim.t = start.timestamp() + 300  # four minutes after the fire time
    first = SimpleNamespace(id=occurrence_id("m", version, fire), skip=None, number=1)
    again = SimpleNamespace(id=occurrence_id("m", version, fire), skip=None, number=2)
    claims.claimed(sim.store, sim.t, [again], sim.t)
    assert again.skip is None and getattr(again, "ready", None) is None  # not decided
    claims.claimed(sim.store, sim.t, [first], sim.t)
    assert first.ready.wait(30)
    assert first.skip and "skip" in first.skip


def test_a_rolling_deploy_loses_no_fire_time_and_the_new_definition_takes_over(sim_at):
    """Old workers (settings A) and, from second 10, new ones (settings B: another
    definition of the same schedule) pass side by side for 30 s. The first new pass records
    B and no old pass records A back; every fire time runs once, those after the change
    under B. Issue 25: each pass flipped the definition, and 4 of 25 fire times were lost."""
    start = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
    sim = sim_at(start, tick={"every": 1, "missed": "once"})
    new = {"tick": {"task": TASK, "every": 1, "missed": "all", "kwargs": {"tag": sim.tag}}}
    sim.reconcile()
    digests = []
    for second in range(1, 41):
        sim.t = start.timestamp() + second
        sim.reconcile()  # an old worker
        if second >= 10:
            with more_settings(sim.store, SCHEDULES=new):
                sim.reconcile()  # a new worker
            sim.reconcile()  # an old worker again
        digests.append(ScheduleState.objects.get(name="tick").digest)
        sim.work()
    fires = sim.fires()
    assert len(fires) == len(set(fires))  # nothing twice
    assert fires == list(range(fires[0], fires[-1] + 1, 1000))  # no fire time lost
    assert fires[-1] == ms(start) - 500 + 40_000
    assert len(set(digests[9:])) == 1 and digests[9] != digests[0]  # B took over, for good
    state = ScheduleState.objects.get(name="tick")
    from django_delayq.recurring.reconcile import version_of

    versions = [parse_occurrence_id(job_id)[2] for _, job_id, _ in sim.runs()]
    assert versions[-25:] == [version_of(state)] * 25  # B's occurrences since the change


# -- database schedules -----------------------------------------------------------------


def test_model_schedules_are_added_changed_disabled_and_deleted(sim_at):
    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start)
    pending = sim.store.key("default", "pending")
    row = Schedule.objects.create(name="db", task=TASK, every=60, kwargs={"tag": sim.tag})
    assert sim.reconcile().created == 1
    (first,) = sim.store.client.zrange(pending, 0, -1, withscores=True)
    assert first[1] == ms(start) + 60_000
    row.every = 120
    row.save()
    result = sim.reconcile()
    assert (result.changed, result.cancelled, result.created) == (["db"], 1, 1)
    (second,) = sim.store.client.zrange(pending, 0, -1, withscores=True)
    assert second[1] == ms(start) + 120_000 and second[0] != first[0]
    row.enabled = False
    row.save()
    result = sim.reconcile()
    assert (result.cancelled, result.created) == (1, 0)
    assert sim.store.client.zcard(pending) == 0
    row.enabled = True
    row.save()
    assert sim.reconcile().created == 1
    row.delete()
    result = sim.reconcile()
    assert (result.changed, result.cancelled) == (["db"], 1)
    assert sim.store.client.zcard(pending) == 0
    assert ScheduleState.objects.get(name="db").digest == "deleted"
    sim.step(start + timedelta(minutes=10))
    assert sim.fires() == []


def test_settings_and_database_names_clash_is_reported(sim_at):
    sim = sim_at(datetime(2026, 1, 1, tzinfo=UTC), same={"every": 60})
    Schedule.objects.create(name="same", task=TASK, every=30)
    result = sim.reconcile()
    assert any("defined in DELAYQ['SCHEDULES'] and in the database" in e for e in result.errors)


# -- checks and status ------------------------------------------------------------------


def test_status_reports_missing_and_overdue_schedules(sim_at):
    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start, s={"every": 10})
    (never,) = report(sim.store, ms(start))
    assert never.missing  # no pass yet
    sim.reconcile()
    (fine,) = report(sim.store, ms(start))
    assert not fine.missing and not fine.overdue
    keys = list(sim.store.client.scan_iter(match=f"{sim.store.prefix}:*"))
    sim.store.client.delete(*keys)
    (late,) = report(sim.store, ms(start) + 120_000)
    assert late.missing and late.overdue
    assert parse_occurrence_id("not an id") is None


def test_delayq_status_and_metrics_report_a_missing_schedule(sim_at, client):
    import json

    from tests.test_metrics import TOKEN
    from tests.test_recurring_rows import status

    sim_at(datetime(2026, 1, 1, tzinfo=UTC), lost={"every": 60})
    code, out = status()  # no worker ever ran a pass: its next occurrence is missing
    assert code == 1 and "SCHEDULE lost (every 60 s): MISSING its next occurrence" in out
    code, out = status("--json")
    found = json.loads(out)
    assert found["healthy"] is False and found["schedules"][0]["missing"] is True
    from django_delayq.storage.connection import get_store

    Reconciler(get_store()).run_pass()  # Redis's clock: the next occurrence is stored
    assert status()[0] == 0
    with more_settings(get_store(), METRICS_TOKEN=TOKEN):
        text = client.get("/delayq/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert 'delayq_schedule_missing{schedule="lost"} 0.0' in text
    assert 'delayq_schedule_overdue{schedule="lost"} 0.0' in text


def test_a_successor_of_the_old_definition_stored_after_a_change_is_refused(sim_at):
    """A claim that read the state before a change may still send the successor of the
    old definition: the change's cancel left a tombstone under that id (flag 'i'), so
    occur.lua refuses it for DONE_TTL, longer than its call can stay fresh (STALE)."""
    from django_delayq.recurring.ids import occurrence_id
    from django_delayq.recurring.occurrences import encoded
    from django_delayq.recurring.reconcile import version_of

    start = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    sim = sim_at(start)
    row = Schedule.objects.create(name="db", task=TASK, every=10, kwargs={"tag": sim.tag})
    sim.reconcile()
    old_state = ScheduleState.objects.get(name="db")
    old_definition = parse("db", {"task": TASK, "every": 10, "kwargs": {"tag": sim.tag}})
    row.every = 60
    row.save()
    assert sim.reconcile().cancelled == 1
    straggler = occurrence_id("db", version_of(old_state), ms(start) + 10_000)
    record, queue = encoded(old_definition)
    sim.t += 5
    occur = sim.store.recurring.occur
    late = occur(queue, [(straggler, record, ms(start) + 10_000)], ms(start), sim.t)
    assert late == ["done"]
    sim.t += 61  # a decision over a minute old is refused whole
    assert occur(queue, [("X" * 26, record, ms(start))], ms(start), sim.t) == ["stale"]


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 * * * *", "*/7 1-3 * * 0", "15 3 29 2 *"])
def test_cron_fires_between_agrees_with_forward_iteration(cron):
    """fires_between walks backwards (cronsim's reverse): the same times as fire_after's
    forward walk, across both Berlin transitions, with bounds on and between fire times."""
    definition = parse("x", {"task": "a.b", "cron": cron, "tz": "Europe/Berlin"})
    low = ms(datetime(2026, 3, 27, tzinfo=UTC))
    forward = []
    t = low
    while True:
        t = fire_after(definition, t)
        if t > ms(datetime(2026, 11, 2, tzinfo=UTC)):
            break
        forward.append(t)
    for a, b in [(0, len(forward) - 1), (3, 9), (5, 5)]:
        if b < len(forward) and a < len(forward):
            assert (
                fires_between(definition, forward[a], forward[b], 10**6) == forward[a + 1 : b + 1]
            )
            assert (
                fires_between(definition, forward[a] - 1, forward[b] - 1, 2)
                == forward[max(a, b - 2) : b]
            )


@task(name="tests.recurring.urgent", priority=10, retry_backoff=0)
def urgent_occurrence(tag: str) -> None:
    """A recurring task with a priority (issue 20 item 2)."""


def test_an_occurrence_keeps_its_tasks_priority(real_store):
    """An occurrence of a priority-10 task goes where schedule() puts a priority-10 job (the
    ranked set): claimed before priority-0 jobs due at the same time, and found pending by
    the next pass without occur.lua."""
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.record import encode_record
    from tests.conftest import more_settings as settings_of

    spec = {"task": "tests.recurring.urgent", "every": 60, "kwargs": {"tag": "x"}}
    start = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    fire = ms(start.replace(second=0)) + 60_000
    with settings_of(real_store, SCHEDULES={"urgent": spec}):
        first = Reconciler(real_store, clock=start.timestamp).run_pass()
        assert first.created == 1
        plain = [
            real_store.schedule(
                "default",
                new_job_id(),
                encode_record("tests.testapp.tasks.add", [1, i], {}, None, 1, ""),
                delay=fire / 1000 - start.timestamp(),
                now=start.timestamp(),
            ).id
            for i in range(5)
        ]
        (occurrence_id,) = [
            m.decode() for m in real_store.client.zrange(real_store.key("default", "ranked"), 0, -1)
        ]
        assert parse_occurrence_id(occurrence_id)[0] == fire
        assert real_store.recurring.pending_due("default", [occurrence_id, plain[0], "nope"]) == [
            fire / 1000,
            fire / 1000,
            None,
        ]
        again = Reconciler(real_store, clock=start.timestamp).run_pass()
        assert (again.created, again.existing) == (0, 1)
        claim = real_store.claim("default", 1, lease=30, token="w#1", now=fire / 1000)
        assert [job.id for job in claim.jobs] == [occurrence_id]
        rest = real_store.claim("default", 10, lease=30, token="w#2", now=fire / 1000)
        assert sorted(job.id for job in rest.jobs) == sorted(plain)
