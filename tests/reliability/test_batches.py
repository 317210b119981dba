"""Batches (django_delayq.batches) with real redis-server and delayq_worker processes: a
batch drains while its workers are SIGKILLed and restarted, members die (a failure and a
worker that dies under its member), and replies on the way from a member's ack to its
callback are lost. Wanted every time: every member ran, each callback job is stored once
(one job id), runs once (more only when a killed worker held it), and never starts before
the last member ended. Each task records its runs in the separate "runs" Redis."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from django_delayq import batch, get_batch, schedule_many
from django_delayq.batches.links import derived_id
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, carries_acks, drop_reply, schedules, script
from tests.reliability.harness import held_by, installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import die, explode, timed

pytestmark = pytest.mark.reliability

KINDS = ("success", "complete", "death")


@dataclass(frozen=True)
class Run:
    """One line of the ``timed`` task: what ran, under which job id, and when."""

    value: str
    job_id: str
    batch_id: str
    start: float
    end: float


def timed_runs(client, tag: str) -> list[Run]:
    out = []
    for line in runs(client, tag):
        value, job_id, batch_id, start, end = line.split()
        out.append(Run(value, job_id, batch_id, float(start), float(end)))
    return out


def callbacks(tag: str) -> dict[str, object]:
    """A batch's three callbacks, each a ``timed`` run recorded under ``tag``."""
    return {f"on_{kind}": timed.call(tag, kind) for kind in KINDS}


class KillLoop:
    """``count`` worker processes (``--concurrency 2``, named ``<name>-<slot>-<generation>``),
    one SIGKILLed and restarted every ``every`` seconds while :meth:`run` waits; ``exposed``
    counts the jobs each killed worker held (a job may run again once for each).

    The ``every`` seconds count from when the worker killed next is on the roster (its
    start-up done, claiming): a kill made while a worker still imports Django kills one that
    holds nothing, and on a loaded machine, where a start takes longer than ``every``, such
    kills only stalled the scenario (until :meth:`run`'s limit) without exposing a job."""

    def __init__(self, workers: Any, env: dict, store: Store, name: str, count: int) -> None:
        self.workers, self.env, self.store, self.name = workers, env, store, name
        self.procs = [self.start(slot, 0) for slot in range(count)]
        self.exposed: Counter[str] = Counter()
        self.kills = 0

    def start(self, slot: int, generation: int) -> Any:
        name = f"{self.name}-{slot}-{generation}"
        return self.workers.start(self.env, "--concurrency", "2", "-v", "0", name=name)

    def run(self, done: Callable[[], bool], every: float, began: float, limit: float = 60) -> None:
        """Kill one worker in turn every ``every`` seconds until ``done()`` (or ``limit``
        seconds after ``began``)."""
        while not done() and time.monotonic() - began < limit:
            slot = self.kills % len(self.procs)
            self.wait_up([self.procs[slot]])
            time.sleep(every)
            self.procs[slot].signal(signal.SIGKILL)
            self.procs[slot].wait(10)
            self.kills += 1
            self.exposed.update(held_by(self.store, self.procs[slot].name))
            self.procs[slot] = self.start(slot, self.kills)

    def wait_up(self, procs: list[Any]) -> None:
        """Until every one of ``procs`` is on the roster (it joins after setting its signal
        handlers, just before it claims)."""
        names = {proc.name for proc in procs}
        wait_until(
            lambda: names <= {w.name for w in self.store.roster.live(time.time())},
            30,
            f"{sorted(names)} on the roster",
        )

    def stop(self) -> list[int]:
        """SIGTERM every worker once it is on the roster (one SIGTERMed before its signal
        handlers are set dies of it, -15; it joins the roster after setting them); their
        exit codes."""
        self.wait_up(self.procs)
        for proc in self.procs:
            proc.signal(signal.SIGTERM)
        return [proc.wait(30) for proc in self.procs]


def settled(store: Store) -> bool:
    """Nothing pending or running, and every member's end forwarded."""
    state = sizes(store)
    forwards = store.client.hlen(store.key("default", "forward"))
    return state["pending"] == 0 and state["running"] == 0 and forwards == 0


def check_callbacks(
    store: Store,
    batch_id: str,
    ran: list[Run],
    wanted: set[str],
    last_member_end: float,
    exposed: Counter[str],
) -> None:
    """Each wanted callback: one job id (the one derived from its decision), run once (or
    again only as often as a killed worker held it), started after the last member ended;
    the others never ran."""
    fields = {
        k.decode(): v.decode()
        for k, v in store.client.hgetall(store.batch_keys(batch_id)[0]).items()
    }
    by_kind: dict[str, list[Run]] = {kind: [r for r in ran if r.value == kind] for kind in KINDS}
    for kind in KINDS:
        got = by_kind[kind]
        if kind not in wanted:
            assert got == [], f"on_{kind} ran: {got}"
            continue
        ids = {r.job_id for r in got}
        assert len(ids) == 1, f"on_{kind} was stored {len(ids)} times: {ids}"
        (job_id,) = ids
        assert job_id == derived_id(batch_id, kind, int(fields[f"fire:{kind}"]))
        assert len(got) <= 1 + exposed[job_id], f"on_{kind} ran {len(got)} times: {got}"
        assert all(r.batch_id == batch_id for r in got)
        if kind != "death":
            first = min(r.start for r in got)
            assert first >= last_member_end, (
                f"on_{kind} started {last_member_end - first:.3f} s before the last member ended"
            )


def test_a_batch_drains_while_workers_are_killed(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """200 members of 0.1 s due over 8 s, 3 worker processes (a 2 s lease), one SIGKILLed
    and restarted every 2 s until both callbacks ran."""
    members, spread = 200, 8.0
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)

    loop = KillLoop(workers, env, store, "bk", 3)
    cb_tag = f"{tag}:cb"
    began = time.monotonic()
    with installed(store):
        with batch(**callbacks(cb_tag)) as b:
            calls = [
                {"args": [tag, str(i), 0.1], "delay": spread * i / members} for i in range(members)
            ]
            schedule_many(timed, calls)

        def callbacks_ran() -> bool:
            values = {r.value for r in timed_runs(runs_client, cb_tag)}
            return {"success", "complete"} <= values

        loop.run(callbacks_ran, 2.0, began)
        wait_until(lambda: settled(store), 60, "the batch to drain and its ends to be forwarded")
        time.sleep(1.0)  # a callback stored twice would show up now
        state = get_batch(b.id)
        codes = loop.stop()
    exposed, kills = loop.exposed, loop.kills
    ran = timed_runs(runs_client, tag)
    done = Counter(r.value for r in ran)
    by_id = Counter(r.job_id for r in ran)
    report(
        scenario="batches: 200 members, SIGKILL every 2 s",
        jobs=members,
        kills=kills,
        lost=members - len(done),
        duplicates=sum(n - 1 for n in done.values()),
        exposed=sum(exposed.values()),
    )
    assert codes == [0, 0, 0], workers.outputs()
    assert set(done) == {str(i) for i in range(members)}
    assert all(n <= 1 + exposed[job_id] for job_id, n in by_id.items()), "unexplained re-runs"
    last_end = max(r.end for r in ran)
    check_callbacks(
        store, b.id, timed_runs(runs_client, cb_tag), {"success", "complete"}, last_end, exposed
    )
    assert (state.total, state.succeeded, state.dead, state.pending, state.done) == (
        members,
        members,
        0,
        0,
        True,
    )
    assert state.callbacks == {"death": None, "success": "scheduled", "complete": "scheduled"}


def test_dead_members_run_on_death_and_on_complete_once(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """20 members succeed; one fails twice (its last attempt: fail.lua dead-letters it) and
    one ends its worker process (max_retries=0: recover.lua dead-letters it once its lease
    expired). on_death and on_complete run once each, on_success never."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
    procs = [workers.start(env, "-v", "0", name=f"dm-{slot}-0") for slot in range(2)]
    cb_tag = f"{tag}:cb"
    restarts = 0
    with installed(store):
        with batch(**callbacks(cb_tag)) as b:
            schedule_many(timed, [(tag, str(i)) for i in range(20)])
            explode.schedule(tag, "explodes")
            die.schedule(f"{tag}:died", "dies", max_retries=0, delay=0.5)

        def finished() -> bool:
            nonlocal restarts
            for slot, proc in enumerate(procs):
                if not proc.alive():
                    restarts += 1
                    procs[slot] = workers.start(env, "-v", "0", name=f"dm-{slot}-{restarts}")
            values = {r.value for r in timed_runs(runs_client, cb_tag)}
            return "complete" in values and settled(store)

        wait_until(finished, 60, "on_complete to run and the batch to drain", step=0.2)
        time.sleep(1.0)
        state = get_batch(b.id)
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    ran = timed_runs(runs_client, tag)
    report(scenario="batches: dead members (fail.lua, recover.lua)", jobs=22, kills=restarts)
    assert codes == [0, 0], workers.outputs()
    assert runs(runs_client, f"{tag}:died") == ["dies"] and restarts == 1
    # explode: both attempts; or its retry was claimed by the worker that died, and the
    # recovery charged it (the second attempt never ran: dead all the same).
    assert 1 <= len(runs(runs_client, f"{tag}:failed")) <= 2
    last_end = max(r.end for r in ran)
    check_callbacks(
        store, b.id, timed_runs(runs_client, cb_tag), {"death", "complete"}, last_end, Counter()
    )
    assert (state.total, state.succeeded, state.dead, state.done) == (22, 20, 2, True)
    assert state.callbacks == {"death": "scheduled", "success": None, "complete": "scheduled"}
    assert sizes(store)["dead"] == 2


LOST = {
    "ack": carries_acks,  # the member's ack ran; the worker sends it again
    "batch_ended": script("batch_ended"),  # the batch took the outcome; the sweep re-sends it
    "callback's schedule": schedules,  # the callback was stored; the sweep re-sends it
}


@pytest.mark.parametrize("where", list(LOST))
def test_a_lost_reply_between_ack_and_callback(
    where, servers, runs_server, runs_client, workers, prefix, tag, report
):
    """One worker behind the fault proxy; a batch of 5 members whose callbacks are stored
    by that worker. The reply of ``where`` is lost (three times) with the connection:
    the callbacks still run once each, after every member."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    cb_tag = f"{tag}:cb"
    with FaultProxy(data.port) as proxy, installed(store):
        lost = proxy.add_rule(LOST[where], drop_reply(), times=3)
        with batch(**callbacks(cb_tag)) as b:
            schedule_many(timed, [(tag, str(i)) for i in range(5)])
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
        worker = workers.start(env, "-v", "1", name="acker")

        def callbacks_ran() -> bool:
            values = {r.value for r in timed_runs(runs_client, cb_tag)}
            return {"success", "complete"} <= values and settled(store)

        # A forward entry left by a lost reply is re-sent by the sweep after 10 s.
        wait_until(callbacks_ran, 45, "both callbacks to run")
        time.sleep(1.0)
        state = get_batch(b.id)
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
    ran = timed_runs(runs_client, tag)
    report(scenario=f"batches: lost reply: {where}", jobs=5, lost=5 - len(ran))
    assert lost.applied >= 1, f"no {where} reply was dropped"
    assert code == 0, worker.output()
    assert sorted(r.value for r in ran) == [str(i) for i in range(5)]
    last_end = max(r.end for r in ran)
    check_callbacks(
        store, b.id, timed_runs(runs_client, cb_tag), {"success", "complete"}, last_end, Counter()
    )
    assert state.done and state.callbacks["complete"] == "scheduled"


def test_a_lost_ack_reply_forwards_the_end_at_once(
    servers, runs_server, runs_client, workers, prefix, tag
):
    """The ack of a batch's only member loses its reply once: the worker that sent it
    knows the job ended (its re-sent ack finds it gone) and forwards its end itself; it
    does not report a lost lease."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    cb_tag = f"{tag}:cb"
    with FaultProxy(data.port) as proxy, installed(store):
        lost = proxy.add_rule(carries_acks, drop_reply())
        with batch(on_complete=timed.call(cb_tag, "complete")):
            timed.schedule(tag, "only")
        env = worker_env(proxy.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)
        worker = workers.start(env, "-v", "1", name="acker")
        wait_until(lambda: timed_runs(runs_client, cb_tag), 45, "on_complete to run")
        worker.signal(signal.SIGTERM)
        code = worker.wait(30)
    assert lost.applied == 1 and code == 0
    assert "lease lost" not in worker.output(), worker.output()
