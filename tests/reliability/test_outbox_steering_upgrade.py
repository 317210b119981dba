"""A rolling deploy of migration 0007_outbox_steering (docs/howto/upgrading.rst, "From
0.7.0"): outbox rows a new producer writes with the new columns (``max_wait``,
``first_due_at``, ``group``) relayed by a real 0.7.0 worker, whose relay names none of them.
The producer's commit-time relay is off (as when the producer died right after its commit,
or could not reach Redis), so the rows wait for the worker's relay pass. Every row is relayed
and its job runs (nothing lost); what the 0.7.0 relay loses: the cap (the debounced row
replaces the key's Redis job at its own due time, past the first due time plus max_wait)
and the group (the job is stored in no group: no ``groups`` entry). The first due time left
behind then names a job that is gone: the key's next debounce starts afresh."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction

from django_delayq import cancel
from django_delayq.outbox import relay as relaying
from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, sizes, wait_until, worker_env
from tests.reliability.tasks import grouped_span, mark, stamp
from tests.reliability.test_batch_outbox_edges import RELEASE_0_7
from tests.reliability.test_batch_upgrade import old_tree, start_old_worker
from tests.reliability.test_outbox import pg, row_count  # noqa: F401

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
]

FIRST, MAX_WAIT, LATER = 6.0, 2.0, 12.0  # the first call's delay, its cap, the next call's


def test_a_0_7_relay_moves_new_rows_without_their_cap_or_group(
    servers,
    runs_server,
    runs_client,
    prefix,
    tag,
    tmp_path,
    report,
    monkeypatch,
    pg,  # noqa: F811
):
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg, MAX_SLEEP=1)
    old = start_old_worker(old_tree(tmp_path, RELEASE_0_7, "0.7.0"), env, tmp_path / "o", "default")
    monkeypatch.setattr(relaying, "relay_now", lambda *args, **kwargs: False)
    key, grouped = f"{tag}:k", f"{tag}-g"
    try:
        with installed(store):
            began = time.time()
            first = stamp.schedule(tag, "first", key=key, delay=FIRST, max_wait=MAX_WAIT)
            cap = began + FIRST + MAX_WAIT  # where a new relay would hold the next call
            with transaction.atomic(using="pg"):
                later = stamp.schedule(
                    tag, "later", key=key, delay=LATER, max_wait=MAX_WAIT, on_commit="pg"
                )
                in_group = grouped_span.call(grouped, "g1", "grouped", 0.0).schedule(
                    group="g1", delay=FIRST, on_commit="pg"
                )
                mark.schedule(tag, "plain", on_commit="pg")
            assert later.outcome == in_group.outcome == "deferred"
            wait_until(lambda: row_count() == 0, 60, "the 0.7.0 relay to move every row")
            pending = dict(
                store.client.zrange(store.key("default", "pending"), 0, -1, withscores=True)
            )
            # The debounce replaced the key's job (the first call's never runs) at its own
            # due time: the cap (first due time + max_wait) is lost.
            assert runs(runs_client, tag) in ([], ["plain"])  # "first" did not run
            assert store.client.hget(store.key("default", "keys"), key).decode() == later.id
            assert first.id not in {i.decode() for i in pending}
            assert pending[later.id.encode()] / 1000 > cap + 1.0, (pending, cap)
            # The grouped row's job is pending in no group: the 0.7.0 relay sent none, so
            # `groups` names none for it (a new relay's schedule.lua joins it to "g1").
            assert in_group.id.encode() in pending
            assert store.client.hget(store.key("default", "groups"), in_group.id) is None

            def ran() -> bool:
                done = [line.split()[0] for line in runs(runs_client, tag)]
                return "later" in done and runs(runs_client, grouped) and "plain" in done

            wait_until(ran, 60, "every relayed job to run on the 0.7.0 worker")
            wait_until(lambda: sizes(store)["running"] == 0, 60, "the last ack")
    finally:
        old.send_signal(signal.SIGTERM)
        code = old.wait(30)
    done = [line.split()[0] for line in runs(runs_client, tag)]
    report(
        scenario="upgrade: a 0.7.0 relay moves rows of migration 0007 (cap, group lost)",
        jobs=4,
        lost=3 - len({"later", "plain"} & set(done)) - len(runs(runs_client, grouped)),
        duplicates=len(done) - len(set(done)),
    )
    assert sorted(done) == ["later", "plain"]
    assert runs(runs_client, grouped) == ["grouped g1"]
    assert sizes(store) == {"pending": 0, "running": 0, "dead": 0, "records": 0}
    assert code == 0, (tmp_path / "o").read_text()
    # The first call's first due time ("\0d" + key) is left behind, naming the job the 0.7.0
    # relay replaced; the key's next debounce finds it names another job and starts afresh:
    # capped from its own first due time, not from the stale one (long past: due at once).
    keys = store.key("default", "keys")
    assert store.client.hget(keys, f"\0d{key}").decode().startswith(f"{first.id}|")
    with installed(store):
        before = time.time()
        again = stamp.schedule(tag, "again", key=key, delay=30, max_wait=5)
        stamp.schedule(tag, "again2", key=key, delay=60, max_wait=5)  # replaces it, capped
        after = time.time()
        held = store.client.hget(keys, key).decode()
        due = store.client.zscore(store.key("default", "pending"), held) / 1000
        assert before + 30 - 0.5 <= due <= after + 35 + 0.5, (due - before, again)
        assert cancel(held)
