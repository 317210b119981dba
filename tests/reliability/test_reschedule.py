"""reschedule() against a real redis-server and real worker processes (issue 36, item 1):
a reply lost after Redis moved the job (the re-send answers the first send and moves
nothing again), and reschedules racing the workers' claims around the jobs' due times (a
job is moved while pending or not at all: it never runs before the due time it was moved
to, and none is lost or runs twice). Observed from outside: the runs the tasks record on
the runs server, the queue's sets."""

from __future__ import annotations

import random
import signal
import time

import pytest
import redis

from django_delayq import reschedule, schedule
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, hold_then_cut, script
from tests.reliability.harness import (
    installed,
    runs,
    settled,
    sizes,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.tasks import stamp

pytestmark = [pytest.mark.reliability, pytest.mark.redis_server]
Q = "default"


@pytest.mark.parametrize("by", ["id", "key"])
def test_lost_reschedule_reply_moves_the_job_once(
    by, servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Redis moves the job; its reply is held, then lost with the connection; reschedule()
    sends the call again (after the cut, so a second count of ``delay=`` would land later).
    Wanted: the job is due ``delay`` after the first send's now, reschedule() returns that
    due time, and the job runs once, not before it."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    cut_at: list[float] = []

    def release() -> bool:  # polled while the reply is held: cut it after 0.3 s
        now = store.server_time()
        if now - began < 0.3:
            return False
        cut_at.append(now)
        return True

    with FaultProxy(data.port) as proxy:
        producer = Store(redis.Redis.from_url(proxy.url, socket_timeout=60), prefix)
        with installed(producer):
            job = schedule(stamp, tag, "once", delay=600, key=f"{tag}:login")
            lost = proxy.add_rule(script("reschedule"), hold_then_cut(30, until=release))
            began = store.server_time()
            target = {"id": {"job_id": job.id}, "key": {"key": f"{tag}:login"}}[by]
            moved = reschedule(**target, delay=1.5)
        assert (lost.applied, lost.met) == (1, 1), (lost.applied, lost.met)
    due = store.fetch(Q, job.id).score
    assert moved is not None and moved.id == job.id
    assert moved.due_at.timestamp() == due  # the answer is the first send's
    # Moved by the first send (its now before the cut), never again by the re-send.
    assert began + 1.5 - 0.01 <= due < cut_at[0] + 1.5, (began, due, cut_at)
    worker = workers.start(worker_env(data.url, runs_server.url, prefix), name="runner")
    wait_until(lambda: settled(store), 30, "the job to run")
    worker.signal(signal.SIGTERM)
    code = worker.wait(30)
    ran = runs(runs_client, tag)
    report(
        scenario=f"49. lost reply: reschedule (by {by})",
        jobs=1,
        lost=int(not ran),
        duplicates=max(len(ran) - 1, 0),
        held_ms=round((cut_at[0] - began) * 1000, 1),
        late_ms=round((float(ran[0].split()[1]) - due) * 1000, 1) if ran else None,
    )
    assert [r.split()[0] for r in ran] == ["once"]
    assert float(ran[0].split()[1]) >= due - 0.01  # never early
    assert code == 0, worker.output()


def test_reschedules_racing_claims_never_run_early_and_lose_nothing(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """200 jobs due one every 10 ms; as each comes due (within 20 ms either side, at
    random), it is rescheduled 1 s later, while two worker processes claim due jobs. Each
    reschedule either moved its job (then the job runs at or after its new due time) or
    returned None (a worker had claimed it: it runs once, as it was). Wanted: no job runs
    early, none is lost, none runs twice, and both answers happen."""
    count, spacing, push = 200, 0.01, 1.0
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix)
    procs = [
        workers.start(env, "--concurrency", "4", "-v", "0", name=f"claimer{n}") for n in range(2)
    ]
    wait_until(lambda: waiting_workers(data) >= 2, 30, "both workers to wait for jobs")
    rng = random.Random(36)
    new_due: dict[str, float] = {}  # value -> the due time reschedule() moved it to
    unmoved: list[str] = []
    with installed(store):
        first = 1.0 + store.server_time()
        jobs = [
            stamp.schedule(tag, f"j{i}", delay=first + i * spacing - store.server_time())
            for i in range(count)
        ]
        for i, job in enumerate(jobs):
            at = job.due_at.timestamp() + rng.uniform(-0.02, 0.02)
            pause = at - store.server_time()
            if pause > 0:
                time.sleep(pause)
            moved = reschedule(job.id, delay=push)
            if moved is None:
                unmoved.append(f"j{i}")
            else:
                new_due[f"j{i}"] = moved.due_at.timestamp()
        wait_until(lambda: runs_client.llen(f"runs:{tag}") >= count, 30, "every job to run")
        wait_until(lambda: settled(store), 30, "the queue to drain")
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(30) for proc in procs]
    ran: dict[str, list[float]] = {}
    for line in runs(runs_client, tag):
        value, at = line.split()
        ran.setdefault(value, []).append(float(at))
    early = {
        v: new_due[v] - ran[v][0] for v in new_due if v in ran and ran[v][0] < new_due[v] - 0.01
    }
    report(
        scenario="50. reschedule racing 2 workers' claims (200 jobs due 10 ms apart)",
        jobs=count,
        lost=count - len(ran),
        duplicates=sum(len(times) - 1 for times in ran.values()),
        moved=len(new_due),
        claimed_first=len(unmoved),
        early=len(early),
        min_lateness_ms=round(min(ran[v][0] - new_due[v] for v in new_due if v in ran) * 1000, 1)
        if new_due
        else None,
    )
    assert codes == [0, 0], workers.outputs()
    assert len(ran) == count and all(len(times) == 1 for times in ran.values()), ran
    assert early == {}, early  # a moved job never ran before its new due time
    assert new_due and unmoved, (len(new_due), len(unmoved))  # the race happened both ways
    assert sizes(store)["records"] == 0
