"""The dispatcher's hint per queue (worker/claiming.py, design 4.3): a queue is claimed
through claim_plain.lua while it is plain for the jobs it claims, through claim.lua from the
claim that finds it using features (a prioritised job, a pause, a limit of the jobs' task)
until claim.lua finds it plain again; a limit of another task leaves it plain. In process,
on fakeredis and on the real server."""

from __future__ import annotations

import threading
import time
import uuid

from django_delayq import signals, task
from django_delayq.exceptions import DelayQError
from django_delayq.storage.store import Store
from django_delayq.worker import claiming
from django_delayq.worker.claiming import plain_ack
from django_delayq.worker.dispatch import Worker
from tests.testapp import tasks as t

TASK = "tests.testapp.tasks.remember"
NEVER_HELD = (1_000_000, 1000)  # a rate that holds none of these tests' jobs back


class Claims:
    """Each claim a worker sends: (script, its parsed reply), in order."""

    def __init__(self, monkeypatch, publish: bool = False) -> None:
        self.sent: list[tuple[str, object]] = []
        self.acks: list[tuple[str, object, list[str]]] = []  # (script, reply, acks' infos)
        self.on_features = lambda: None
        real = Store.claim_op

        def claim_op(store, *args, **kwargs):
            op = real(store, *args, **kwargs)
            parse, script = op.parse, op.name
            infos = [entry[2] for entry in kwargs.get("acks", ())]

            def read(reply, resent=False):
                claim = parse(reply)
                self.sent.append((script, claim))
                self.acks.append((script, claim, infos))
                if claim.features:
                    self.on_features()
                return claim

            op.parse = op.parse_resent = read
            return op

        monkeypatch.setattr(Store, "claim_op", claim_op)
        if not publish:  # the limits the tasks of other tests registered stay out
            monkeypatch.setattr(claiming, "publish_limits", lambda *args: True)

    def scripts(self) -> list[str]:
        return [
            name + ("/features" if c.features else "/plain" if c.plain else "")
            for name, c in self.sent
        ]


def drain(store, monkeypatch, feature, undo=None) -> Claims:
    """Five plain jobs drained by a burst worker at concurrency 1; ``feature()`` runs as the
    second job starts, ``undo()`` when claim_plain.lua answers 'features'."""
    claims = Claims(monkeypatch)
    if undo is not None:
        claims.on_features = undo
    for i in range(5):
        t.remember.schedule(i)
    started = []

    def on_start(sender, **kwargs):
        started.append(1)
        if len(started) == 2:
            feature()

    signals.job_started.connect(on_start, weak=False)
    try:
        worker = Worker(["default"], burst=True, concurrency=1)
        assert worker.run() == 0
    finally:
        signals.job_started.disconnect(on_start)
    assert worker.parts.exchange.plain == {"default": True}  # the hint at the end
    return claims


def flipped(scripts: list[str]) -> None:
    """Plain claims, then one answering 'features' and claim.lua at once, then claim.lua
    until it finds the queue plain, then plain claims again (if the drain goes on)."""
    first = scripts.index("claim_plain/features")
    assert all(s == "claim_plain/plain" for s in scripts[:first]), scripts
    assert scripts[first + 1].startswith("claim"), scripts
    assert not scripts[first + 1].startswith("claim_plain"), scripts
    back = next(i for i, s in enumerate(scripts) if s == "claim/plain" and i > first)
    assert all(not s.startswith("claim_plain") for s in scripts[first + 1 : back]), scripts
    assert all(s == "claim_plain/plain" for s in scripts[back + 1 :]), scripts


def test_a_plain_queue_is_claimed_through_claim_plain_only(store, monkeypatch):
    claims = drain(store, monkeypatch, lambda: None)
    assert set(claims.scripts()) == {"claim_plain/plain"}
    assert len(t.CALLS) == 5


def test_a_prioritised_job_turns_the_queue_general_until_it_ran(store, monkeypatch):
    claims = drain(store, monkeypatch, lambda: t.remember.schedule("high", priority=5))
    flipped(claims.scripts())
    assert sorted(str(c[0][0]) for c in t.CALLS) == sorted([*map(str, range(5)), "high"])


def test_a_pause_turns_the_queue_general_until_resumed(store, monkeypatch):
    claims = drain(
        store,
        monkeypatch,
        lambda: store.control.pause("default"),
        lambda: store.control.resume("default"),
    )
    flipped(claims.scripts())
    assert len(t.CALLS) == 5


def test_a_limit_of_the_jobs_task_turns_the_queue_general_until_removed(store, monkeypatch):
    """The limit is published with one more job of the task (the claim that reads it answers
    'features') beside another task's, and removed then: claim.lua reads that job and says
    'plain' (the other task's limit stays)."""

    def limit() -> None:
        store.control.publish_rates(["default"], {TASK: NEVER_HELD})
        store.control.publish_concurrency(["default"], {"tests.testapp.tasks.add": 1})
        t.remember.schedule("more")

    def unlimit() -> None:
        store.control.publish_rates(["default"], {TASK: None})

    claims = drain(store, monkeypatch, limit, unlimit)
    flipped(claims.scripts())
    assert store.client.hkeys(store.key("default", "control")) == [b"conc:tests.testapp.tasks.add"]
    assert len(t.CALLS) == 6


def test_limits_of_other_tasks_leave_the_queue_plain(store, monkeypatch):
    """A rate and a concurrency limit of another task, group limits of the jobs' task (its
    jobs are not grouped), published as the second job starts: claim_plain.lua goes on."""

    def limits():
        other = "tests.testapp.tasks.add"
        store.control.publish_rates(["default"], {other: (1, 1000)})
        store.control.publish_concurrency(["default"], {other: 1})
        store.control.publish_group_limits(["default"], {TASK: (1, (1, 1000))})

    claims = drain(store, monkeypatch, limits)
    assert set(claims.scripts()) == {"claim_plain/plain"}
    assert store.client.exists(store.key("default", "control"))
    assert len(t.CALLS) == 5


def test_beside_a_limited_task_plain_jobs_go_through_claim_plain_and_the_limit_holds(
    store, monkeypatch
):
    """The worker publishes every registered task's limits (publish_limits, not patched out),
    among them @task(concurrency=1) of a task of this test: the jobs of a task without
    limits are claimed through claim_plain.lua, no claim_plain.lua reply ever carries a job
    of the limited task, and at most one of those runs at once across three runners."""
    claims = Claims(monkeypatch, publish=True)
    lock, running, seen = threading.Lock(), [0], []

    def body(i: int) -> None:
        with lock:
            running[0] += 1
            seen.append(running[0])
        time.sleep(0.05)  # a chance for a second attempt to overlap, were it leased
        with lock:
            running[0] -= 1

    name = f"tests.limited_{uuid.uuid4().hex[:8]}"
    limited = task(name=name, concurrency=1, retry_backoff=0)(body)
    # 1. plain jobs alone, beside the published limit
    for i in range(5):
        t.remember.schedule(i)
    assert Worker(["default"], burst=True, concurrency=3).run() == 0
    assert store.client.hget(store.key("default", "control"), f"conc:{name}") == b"1"
    assert set(claims.scripts()) == {"claim_plain/plain"}, claims.scripts()
    assert len(t.CALLS) == 5
    # 2. jobs of both tasks at once (a worker that waits for the held-back ones)
    worker = Worker(["default"], concurrency=3)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        for i in range(4):
            limited.schedule(i)
            t.remember.schedule(f"p{i}")
        deadline = time.monotonic() + 30
        while (len(seen) < 4 or len(t.CALLS) < 9) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        worker.request_stop()
        thread.join(15)
    assert len(seen) == 4 and len(t.CALLS) == 9  # each ran, once
    assert max(seen) == 1, seen
    leased = [
        (script, c.record.split(b"\n")[1].decode()) for script, r in claims.sent for c in r.jobs
    ]
    assert ("claim", name) in leased and ("claim_plain", name) not in leased, leased


def test_an_ack_with_a_unique_key_goes_through_claim_lua(store, monkeypatch):
    claims = Claims(monkeypatch)
    t.remember.schedule("keyed", key="k")
    t.remember.schedule("plain")
    assert Worker(["default"], burst=True, concurrency=1).run() == 0
    assert len(t.CALLS) == 2
    carrying = [(name, infos) for name, _, infos in claims.acks if infos]
    assert ("claim", ["i=k"]) in carrying, carrying  # the unique key's ack: claim.lua
    for name, infos in carrying:
        assert name == ("claim" if any("=" in info for info in infos) else "claim_plain")


def test_plain_ack_takes_the_flags_that_leave_feature_keys_alone():
    assert all(map(plain_ack, ["", "i", "k", "u", "iku", "l", "ikl"]))  # 'l': a link's end
    assert not any(map(plain_ack, ["=k", "i=k", "ie", "g", "t", "ilt", "lg", "l=k"]))


def test_a_lost_reply_to_the_claim_after_features_is_sent_again_through_claim_lua(
    store, monkeypatch
):
    """claim_plain.lua said 'features'; claim.lua, sent at once, leased jobs but its reply
    was lost: the next round trip sends it again with its token (the hint is general now),
    and the jobs it leased run, once each."""
    claims = Claims(monkeypatch)
    store.control.publish_rates(["default"], {TASK: NEVER_HELD})
    for i in range(3):
        t.remember.schedule(i)
    real_run, lost = Store.run, []

    def run(self, ops, *args, **kwargs):
        replies = real_run(self, ops, *args, **kwargs)
        if not lost and ops and ops[-1].name == "claim" and replies[-1].jobs:
            lost.append([c.id for c in replies[-1].jobs])
            replies[-1] = DelayQError("the reply was lost")
        return replies

    monkeypatch.setattr(Store, "run", run)
    assert Worker(["default"], burst=True, concurrency=1).run() == 0
    assert sorted(c[0][0] for c in t.CALLS) == [0, 1, 2]  # each once
    scripts = claims.scripts()
    assert scripts[:3] == ["claim_plain/features", "claim", "claim"], scripts
    assert [c.id for c in claims.sent[2][1].jobs] == lost[0]  # the re-send: the same jobs
    assert not any(s.startswith("claim_plain") for s in scripts[1:]), scripts
