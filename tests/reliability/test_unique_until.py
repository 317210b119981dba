"""unique_until="end" (issue 36 item 3) with real workers and a real Redis: a follower never
runs beside its leader. The task records "start/end <value> <job id> <t>" in the runs Redis
(one clock: the runs server's); the follower's start must come after the leader's last end,
when the leader's worker is SIGKILLed mid-run (recovery, then the leader's retry: the
follower still waits) and when the reply to the replace that stores the follower is lost
(schedule() sends it again: one follower, run once)."""

from __future__ import annotations

import signal

import redis

from django_delayq import get_job
from django_delayq.storage.store import Store
from tests.reliability.faults import FaultProxy, drop_reply, schedules
from tests.reliability.harness import (
    held_by,
    installed,
    runs,
    wait_until,
    waiting_workers,
    worker_env,
)
from tests.reliability.tasks import follows


def _events(runs_client, tag: str) -> list[tuple[str, str, str, float]]:
    return [(k, v, i, float(t)) for k, v, i, t in (r.split() for r in runs(runs_client, tag))]


def _ended(runs_client, tag: str, value: str) -> bool:
    return any(k == "end" and v == value for k, v, _, _ in _events(runs_client, tag))


def _never_beside(events, leader: str, follower: str) -> None:
    """The follower's every start comes after the leader's last end."""
    last_end = max(t for k, v, _, t in events if (k, v) == ("end", leader))
    starts = [t for k, v, _, t in events if (k, v) == ("start", follower)]
    assert starts and min(starts) >= last_end, events


def test_a_follower_waits_for_its_leader_through_a_sigkill_and_the_retry(
    servers, runs_server, runs_client, workers, prefix, tag
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    key = f"{tag}:customer:42"
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=3)
    procs = {
        name: workers.start(env, "--concurrency", "4", "-v", "0", name=name)
        for name in ("one", "two")
    }
    wait_until(lambda: waiting_workers(data) >= 2, 30, "both workers up")
    with installed(store, VISIBILITY_TIMEOUT=3):
        leader = follows.schedule(tag, "leader", 60, key=key)
        wait_until(
            lambda: any(k == "start" for k, *_ in _events(runs_client, tag)), 30, "the leader"
        )
        first = follows.schedule(tag, "first", 0, key=key)  # a follower: waits
        second = follows.schedule(tag, "second", 0, key=key)  # replaces the follower
        assert (first.outcome, first.status, first.waits_for) == ("created", "waiting", leader.id)
        assert (second.outcome, second.id) == ("replaced", first.id)
        holder = next(name for name in procs if leader.id in held_by(store, name))
        procs[holder].signal(signal.SIGKILL)
        procs[holder].wait(10)
        # The leader's lease runs out, it is recovered and retried: the follower waits.
        assert get_job(first.id).status == "waiting"
    wait_until(lambda: _ended(runs_client, tag, "second"), 60, "the follower to run")
    events = _events(runs_client, tag)
    _never_beside(events, "leader", "second")
    assert [v for k, v, _, _ in events if k == "start"] == ["leader", "leader", "second"]
    assert not any(v == "first" for _, v, _, _ in events)  # replaced before it ran
    assert store.client.hlen(store.key("default", "keys")) == 0  # nothing left behind


def test_a_lost_reply_to_the_replace_stores_one_follower(
    servers, runs_server, runs_client, workers, prefix, tag
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    key = f"{tag}:customer:7"
    workers.start(worker_env(data.url, runs_server.url, prefix), "-v", "0", name="runner")
    wait_until(lambda: waiting_workers(data) >= 1, 30, "the worker up")
    with installed(store):
        leader = follows.schedule(tag, "leader", 2, key=key)
    wait_until(lambda: _events(runs_client, tag), 30, "the leader to start")
    with FaultProxy(data.port) as proxy:
        lost = proxy.add_rule(schedules, drop_reply())
        producer = Store(redis.Redis.from_url(proxy.url, socket_timeout=60), prefix)
        with installed(producer):
            follower = follows.schedule(tag, "after", 0, key=key)
        assert lost.applied == 1  # Redis stored it; the reply was lost; schedule() re-sent
    assert (follower.outcome, follower.waits_for) == ("created", leader.id)
    wait_until(lambda: _ended(runs_client, tag, "after"), 60, "the follower to run")
    events = _events(runs_client, tag)
    _never_beside(events, "leader", "after")
    assert [(k, v) for k, v, _, _ in events] == [
        ("start", "leader"),
        ("end", "leader"),
        ("start", "after"),
        ("end", "after"),
    ]
    assert store.client.hlen(store.key("default", "jobs")) == 0
