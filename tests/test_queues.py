"""Queue names (storage/queues.py) and the one list of queues (health.iter_known_queues)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from django_delayq import get_job, schedule
from django_delayq.monitoring.health import iter_known_queues
from django_delayq.scheduling.registry import registered
from django_delayq.storage.queues import check_queue_name, queue_list
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.testapp import tasks as t


@pytest.mark.parametrize("name", ["default", "a", "Emails_2", "x.y-z", "q" * 64])
def test_valid_queue_names_pass(name):
    assert check_queue_name(name) == name


@pytest.mark.parametrize("name", ["", "not ok", "a{b}", "q" * 65, "é", None, 3, b"default"])
def test_invalid_queue_names_are_refused_by_name(name):
    with pytest.raises(ValueError, match="invalid queue name"):
        check_queue_name(name)


def test_a_queue_option_is_stripped_and_each_name_checked():
    assert queue_list(" default, emails ,x") == ["default", "emails", "x"]
    with pytest.raises(ValueError, match="'not ok'"):
        queue_list("default,not ok")
    with pytest.raises(ValueError, match="''"):
        queue_list("default,,emails")


def test_known_queues_come_in_order_each_once_invalid_ones_skipped(store):
    store.client.sadd(store.queues_key, "zeta", "default", "bad name")
    workers = [SimpleNamespace(queues=["w1", "zeta", "bad{q", "w1"])]
    with more_settings(store, DEFAULT_QUEUE="first", QUEUES=["default", "second", "not ok"]):
        known = list(iter_known_queues(store, workers))  # type: ignore[arg-type]
        tasks = [task.queue for task in registered().values() if task.queue]
    local = list(dict.fromkeys(["first", "default", "second", *tasks]))
    assert known == local + [q for q in ("zeta", "w1") if q not in local]


def test_redis_is_read_only_once_the_configured_queues_are_used_up(store, monkeypatch):
    reads = []
    remembered = store.queues
    monkeypatch.setattr(store, "queues", lambda: reads.append(1) or remembered())
    known = iter_known_queues(store)
    assert next(known) == "default"
    assert reads == []
    list(known)
    assert reads == [1]


def test_get_job_reads_the_queue_registry_only_for_a_job_it_did_not_find(store, monkeypatch):
    job = schedule(t.add, 1, 2, delay=60)
    reads = []
    remembered = store.queues
    monkeypatch.setattr(store, "queues", lambda: reads.append(1) or remembered())
    assert get_job(job.id).id == job.id
    assert reads == []
    assert get_job("01NOSUCHJOB000000000000000") is None
    assert reads == [1]


def test_a_queue_whose_registry_entry_was_lost_is_listed_and_drained(store):
    """Every schedule() adds its queue to ``{prefix}:queues`` again (the script does it off a
    cluster): nothing in this process remembers having added it, so after the set is lost
    (DEL, a restart without persistence) the queue's next job lists it again, for this
    process, a fresh Store and get_job() without a queue; a worker serving it drains both
    jobs whatever the set holds."""
    first = schedule(t.add, 1, 2, queue="elsewhere")
    assert "elsewhere" in store.queues()
    store.client.delete(store.queues_key)
    assert "elsewhere" not in store.queues()
    assert get_job(first.id) is None  # the registry was how it was found
    second = schedule(t.add, 3, 4, queue="elsewhere")
    assert "elsewhere" in store.queues()
    assert "elsewhere" in iter_known_queues(store)
    assert "elsewhere" in Store(store.client, store.prefix).queues()  # no process cache
    assert get_job(first.id).queue == get_job(second.id).queue == "elsewhere"
    store.client.delete(store.queues_key)
    assert Worker(["elsewhere"], burst=True).run() == 0
    assert store.size("elsewhere", "pending") == 0
    assert store.client.hlen(store.key("elsewhere", "jobs")) == 0  # both ran and were acked


def test_one_schedule_is_one_command_with_one_reply_off_a_cluster(store, monkeypatch):
    """On one Redis the script adds the queue itself (schedule.lua's KEYS[16],
    schedule_plain.lua's KEYS[5] for a plain job): schedule() sends a single EVALSHA, no
    SADD beside it."""
    sent = []
    run = store.transport.run
    monkeypatch.setattr(
        store.transport, "run", lambda ops, *a, **k: sent.append(ops) or run(ops, *a, **k)
    )
    schedule(t.add, 1, 2, queue="elsewhere")
    schedule(t.add, 1, 2, queue="keyed", key="k")
    assert [[op.name for op in ops] for ops in sent] == [["schedule_plain"], ["schedule"]]
    head = sent[0][0].args
    assert head[2] == b"5" and head[7] == store.queues_key.encode()  # 4 keys + the registry
    head = sent[1][0].args
    assert head[2] == b"17" and head[19] == store.queues_key.encode()  # 16 keys + the registry
    assert {"elsewhere", "keyed"} <= set(store.queues())
