"""Fair queues across real worker processes (DELAYQ['QUEUES']['fair']['fair']): a backlog of
2,000 due jobs of group "a", then one of group "b". With fair, "b" starts after about one
claim's worth of "a" jobs (the order of starts is recorded in the runs Redis, so the check is
structural, not a race against the clock); without fair, after the backlog (the same check
then fails: it is not one that cannot). A worker SIGKILLed with jobs of a fair queue claimed
and bucketed loses none of them."""

from __future__ import annotations

import json
import signal

import pytest

from django_delayq import schedule_many
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, wait_until, worker_env
from tests.reliability.tasks import fair_turn

pytestmark = pytest.mark.reliability

BACKLOG = 2000
# A jobs started before B at most: the intake buckets 1,000 due jobs a claim (fair.lua), so
# B is bucketed by the third claim, which gives it a turn; a claim leases at most the
# worker's room (concurrency 4 plus its prefetch).
BOUND = 100


def fair_env(data_url, runs_url, prefix, fair: bool):
    return worker_env(data_url, runs_url, prefix, QUEUES=json.dumps({"fair": {"fair": fair}}))


FAIR = {"fair": {"fair": True}}  # for the scheduling process: group= is accepted there


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "not-fair"])
def test_one_groups_backlog_holds_another_back_by_one_claim(
    servers, runs_server, runs_client, workers, prefix, tag, report, fair
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    backlog = [{"args": [tag, "a", f"a{i}"], "group": "a"} for i in range(BACKLOG)]
    with installed(store, QUEUES=FAIR):  # group= is accepted here for a fair queue
        schedule_many(fair_turn, backlog, queue="fair")
        fair_turn.call(tag, "b", "b0").schedule(group="b", queue="fair")
    env = fair_env(data.url, runs_server.url, prefix, fair)
    proc = workers.start(env, "--concurrency", "4", "--queues", "fair", name="fair")
    wait_until(lambda: len(runs(runs_client, tag)) >= BACKLOG + 1, 180, "every job to run")
    proc.signal(signal.SIGTERM)
    code = proc.wait(60)
    started = runs(runs_client, f"{tag}:start")
    before_b = started.index("b0 b")
    report(
        scenario=f"fair={fair}: {BACKLOG} due jobs of one group, then one of another",
        jobs=BACKLOG + 1,
        a_started_before_b=before_b,
    )
    assert code == 0, proc.output()
    assert sorted(started) == sorted([f"a{i} a" for i in range(BACKLOG)] + ["b0 b"])
    if fair:
        assert before_b <= BOUND, before_b
    else:  # priority then due time: B waits for the backlog
        assert before_b > BACKLOG - BOUND, before_b
    assert not store.client.exists(store.key("fair", "parked"))
    assert not store.client.exists(store.key("fair", "groups"))


def test_a_sigkilled_worker_on_a_fair_queue_loses_nothing(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """The victim holds 4 jobs that would run an hour, and the rest wait in their buckets;
    SIGKILLed, its leases expire (VISIBILITY_TIMEOUT 5 s), the rescuer's recovery hands the
    jobs back, and every job of every group runs."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = fair_env(data.url, runs_server.url, prefix, True)
    jobs = [{"args": [tag, "g0", f"long{i}", -1.0], "group": "g0"} for i in range(4)]
    jobs += [{"args": [tag, f"g{i % 3}", f"short{i}"], "group": f"g{i % 3}"} for i in range(60)]
    jobs += [{"args": [tag, "-", f"loose{i}"]} for i in range(10)]
    victim = workers.start(env, "--concurrency", "4", "--queues", "fair", name="victim")
    with installed(store, QUEUES=FAIR):
        schedule_many(fair_turn, jobs[:4], queue="fair")
        wait_until(lambda: len(runs(runs_client, f"{tag}:start")) >= 4, 60, "the long ones")
        schedule_many(fair_turn, jobs[4:], queue="fair")
    victim.signal(signal.SIGKILL)
    victim.wait(30)
    rescuer = workers.start(env, "--concurrency", "4", "--queues", "fair", name="rescuer")
    wait_until(lambda: len(runs(runs_client, tag)) >= len(jobs), 120, "every job to run")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(60) == 0, rescuer.output()
    done = runs(runs_client, tag)
    report(scenario="fair: a SIGKILLed worker loses nothing", jobs=len(jobs), kills=1)
    assert sorted(v.split()[0] for v in done) == sorted(j["args"][2] for j in jobs), done
    assert not store.client.exists(store.key("fair", "parked"))
    assert not store.client.exists(store.key("fair", "pending"))
