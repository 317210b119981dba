"""The dispatcher's hint per queue (worker/claiming.py, design 4.3): a queue is claimed
through claim_plain.lua while it is plain, through claim.lua from the claim that finds it
using features (a prioritised job, a pause, a group limit) until claim.lua finds it plain
again. In process (burst workers), on fakeredis and on the real server."""

from __future__ import annotations

from django_delayq import signals
from django_delayq.exceptions import DelayQError
from django_delayq.storage.store import Store
from django_delayq.worker import claiming
from django_delayq.worker.claiming import plain_ack
from django_delayq.worker.dispatch import Worker
from tests.testapp import tasks as t

TASK = "tests.testapp.tasks.remember"


class Claims:
    """Each claim a worker sends: (script, its parsed reply), in order."""

    def __init__(self, monkeypatch) -> None:
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
        # The limits other tests' tasks would publish make every queue general.
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


def test_a_group_limit_turns_the_queue_general_until_removed(store, monkeypatch):
    def limits(conc):
        store.control.publish_group_limits(["default"], {TASK: (conc, None)})

    claims = drain(store, monkeypatch, lambda: limits(1), lambda: limits(None))
    flipped(claims.scripts())
    assert len(t.CALLS) == 5


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
    assert all(map(plain_ack, ["", "i", "k", "u", "iku"]))
    assert not any(map(plain_ack, ["=k", "i=k", "ie", "l", "g", "t", "ilt"]))


def test_a_lost_reply_to_the_claim_after_features_is_sent_again_through_claim_lua(
    store, monkeypatch
):
    """claim_plain.lua said 'features'; claim.lua, sent at once, leased jobs but its reply
    was lost: the next round trip sends it again with its token (the hint is general now),
    and the jobs it leased run, once each."""
    claims = Claims(monkeypatch)
    store.control.publish_rates(["default"], {"tests.testapp.tasks.add": (5, 1000)})
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
