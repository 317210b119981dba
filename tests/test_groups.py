"""Limits per group: @task(group_concurrency=N, group_rate="10/s") hold for each group= of a
task on its own, checked inside claim.lua. A due job of a group at its limit is parked out of
pending (so the jobs of other groups are claimed past it) and is still found, counted,
cancelled and listed as pending; a slot frees when its holder leaves running (acknowledged,
failed, handed back, recovered), and claim.lua's sweep heals a slot no hook freed."""

from __future__ import annotations

import time
import uuid

import pytest

from django_delayq import get_job, schedule, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.scheduling.options import check_group
from tests.test_async_api import astore as astore  # the fixture
from tests.test_async_api import run
from tests.test_store import DEAD_OPTS, T0, members
from tests.testapp import tasks as t

Q = "default"
GROUPED = "tests.grouped"


def put(store, group, task_name=GROUPED, now=T0, priority=0, delay=0.0):
    record = encode_record(task_name, [1], {}, None, 3, "g" if group else "", priority)
    return store.schedule(Q, new_job_id(), record, now=now, group=group, delay=delay).id


def claim(store, now, token, acks=(), limit=10):
    return store.claim(Q, limit, lease=30, token=token, instance="w", now=now, acks=acks)


def ids(reply):
    return [j.id for j in reply.jobs]


def limit(store, conc=None, rate=None, task_name=GROUPED):
    store.control.publish_group_limits([Q], {task_name: (conc, rate)})


def parked(store):
    return store.client.zcard(store.key(Q, "parked"))


def test_one_per_group_and_other_groups_are_not_held_up(store):
    limit(store, conc=1)
    a = [put(store, "shop:1") for _ in range(5)]
    b = put(store, "shop:2")
    first = claim(store, T0, "w#1")
    assert ids(first) == [a[0], b]  # one of shop:1, and shop:2's behind the other four
    assert parked(store) == 4  # parked: the next claims never read them again
    assert ids(claim(store, T0 + 1, "w#2")) == []
    for i in a[1:]:  # still pending to every reader
        job = store.fetch(Q, i)
        assert job is not None and job.status == "pending" and job.score == pytest.approx(T0)
    assert store.client.hget(store.key(Q, "state"), a[1]) is None  # no attempt counted
    # a[0] is acknowledged (in the next claim): the first parked job of shop:1 comes back.
    got = claim(store, T0 + 2, "w#3", acks=[(a[0], "w#1", "g")])
    assert ids(got) == [a[1]]
    assert parked(store) == 3


def test_group_limit_holds_per_task_and_group(store):
    limit(store, conc=2)
    limit(store, conc=2, task_name="tests.other")
    jobs = {g: [put(store, g) for _ in range(4)] for g in ("a", "b")}
    other = [put(store, "a", "tests.other") for _ in range(3)]
    got = ids(claim(store, T0, "w#1", limit=20))
    assert got == [*jobs["a"][:2], *jobs["b"][:2], *other[:2]]


def test_fail_release_and_recover_free_the_slot(store):
    limit(store, conc=1)
    a, b, c, d = (put(store, "g") for _ in range(4))
    assert ids(claim(store, T0, "w#1")) == [a]
    error = {"type": "x", "message": "y"}
    store.fail(Q, a, "w#1", error, delay=60, default_max_retries=3, now=T0 + 1, **DEAD_OPTS)
    assert ids(claim(store, T0 + 1, "w#2")) == [b]  # a's slot went to the first parked job
    assert store.release(Q, [(b, "w#2")], now=T0 + 2) == [1]
    got = ids(claim(store, T0 + 2, "w#3"))
    assert len(got) == 1 and got[0] in (b, c)
    # The holder's worker dies (no ack): recovery frees the slot once the lease expired.
    assert ids(claim(store, T0 + 3, "w#4")) == []
    store.recover(
        Q, token="r#1", instance="rescuer", default_max_retries=3, now=T0 + 40, **DEAD_OPTS
    )
    again = ids(claim(store, T0 + 40, "w#5"))
    assert len(again) == 1
    holders = store.client.hget(store.key(Q, "holds"), f"{GROUPED}\ng").decode().split()
    assert holders == [f"{again[0]}|w#5"]
    assert d in members(store, "pending") or parked(store) >= 1


def test_cancel_fetch_and_run_now_of_a_parked_job(store):
    limit(store, conc=1)
    a, b, c = (put(store, "g") for _ in range(3))
    claim(store, T0, "w#1")
    assert parked(store) == 2
    job = store.fetch(Q, b)
    assert job is not None and job.status == "pending"
    assert store.cancel(Q, b, now=T0 + 1) is not None
    assert store.fetch(Q, b) is None
    assert parked(store) == 1
    assert store.client.hget(store.key(Q, "groups"), b) is None  # forgotten with the job
    assert store.run_now(Q, [c], now=T0 + 1) == [True]
    claim(store, T0 + 2, "w#2", acks=[(a, "w#1", "g")])
    assert store.client.hlen(store.key(Q, "groups")) == 1  # c's only (a finished)


def test_sweep_heals_a_slot_no_hook_freed(store):
    """A holder acknowledged by a worker that does not know groups (0.5.0's ack.lua: no
    group_left): the parked job comes back by the claim's sweep."""
    limit(store, conc=1)
    a, b = put(store, "g"), put(store, "g")
    assert ids(claim(store, T0, "w#1")) == [a]
    assert parked(store) == 1
    store.ack(Q, [(a, "w#1", "")], now=T0 + 1)  # info without 'g': as 0.5.0 sends it
    assert ids(claim(store, T0 + 1, "w#2")) == [b]
    assert parked(store) == 0
    # At most one sweep per 50 ms: the next may come at T0 + 1.05 s.
    at = store.client.hget(store.key(Q, "control"), "gsweep_at")
    assert int(at) == int((T0 + 1) * 1000) + 50


def test_raising_the_limit_releases_parked_jobs(store):
    limit(store, conc=1)
    jobs = [put(store, "g") for _ in range(3)]
    claim(store, T0, "w#1")
    limit(store, conc=None)  # the limit removed: the sweep releases them
    assert sorted(ids(claim(store, T0 + 1, "w#2"))) == sorted(jobs[1:])


def test_group_rate_spreads_the_jobs_of_one_group(store):
    limit(store, rate=(2, 1000))  # 2/s: one every 500 ms
    a = [put(store, "x") for _ in range(4)]
    b = put(store, "y")
    assert ids(claim(store, T0, "w#1")) == [a[0], b]
    dues = sorted(store.fetch(Q, i).score for i in a[1:])
    assert dues == pytest.approx([T0 + 0.5, T0 + 1.0, T0 + 1.5])
    assert ids(claim(store, T0 + 0.5, "w#2")) == [a[1]]


def test_priority_kept_while_parked(store):
    limit(store, conc=1)
    a = put(store, "g")
    low, high = put(store, "g", priority=-5), put(store, "g", priority=5)
    assert ids(claim(store, T0, "w#1")) == [high]
    assert store.fetch(Q, low).status == "pending"
    # high leaves: the next in claim order (a: priority 0 before -5) takes the slot.
    assert ids(claim(store, T0 + 1, "w#2", acks=[(high, "w#1", "g")])) == [a]
    assert ids(claim(store, T0 + 2, "w#3")) == []
    assert store.fetch(Q, low).status == "pending"
    assert ids(claim(store, T0 + 3, "w#4", acks=[(a, "w#2", "g")])) == [low]


def test_fast_path_untouched_without_groups(store):
    """A queue with no control state and no parked job reads pending only (the guard is one
    EXISTS of ranked, control and parked)."""
    plain = put(store, None)
    assert ids(claim(store, T0, "w#1")) == [plain]
    assert not store.client.exists(store.key(Q, "holds"), store.key(Q, "groups"))


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 257, "tab\there"])
def test_bad_group_names_are_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match="group="):
        check_group(bad)


@pytest.mark.parametrize("bad", [42, b"shop", ("a",)])
def test_group_must_be_a_str(bad):
    with pytest.raises(TypeError, match=r"group= must be a str.*got"):
        check_group(bad)


@pytest.mark.parametrize(
    ("option", "bad"), [("group_concurrency", 0), ("group_concurrency", "2"), ("group_rate", "9")]
)
def test_bad_group_limits_are_refused_naming_the_value(option, bad):
    with pytest.raises(ValueError, match=rf"{option}=.*got {bad!r}"):
        task(name=f"tests.bad_group_{uuid.uuid4().hex}", **{option: bad})(lambda: None)


def test_unknown_option_suggests_the_group_one():
    with pytest.raises(TypeError, match="did you mean 'group_concurrency'"):
        task(group_concurency=2)


def test_group_for_a_task_without_group_limits_is_refused(store):
    plain = task(name=f"tests.nogroup_{uuid.uuid4().hex}")(lambda: None)
    with pytest.raises(ValueError, match=rf"task {plain.name}, which has no limits per group"):
        schedule(plain, group="shop:1")


def test_schedule_api_stores_the_group(store):
    grouped = task(name=f"tests.g_{uuid.uuid4().hex}", group_concurrency=1)(lambda n: None)
    job = grouped.schedule(1, group="shop:42")
    stored = store.client.hget(store.key(Q, "groups"), job.id).decode()
    assert stored == f"{grouped.name}\nshop:42"
    assert b"g" in store.client.hget(store.key(Q, "jobs"), job.id).split(b"\n")[0]
    assert job.group == "shop:42" and get_job(job.id).group == "shop:42"
    other = grouped.schedule(2, group="shop:42")
    limit(store, conc=1, task_name=grouped.name)  # as a worker publishes it
    claim(store, time.time() + 1, "w#1")  # job runs, other is parked behind it
    assert parked(store) == 1
    parked_job = get_job(other.id)
    assert (parked_job.status, parked_job.group) == ("pending", "shop:42")
    assert schedule(t.add, 1, 2).group is None


def test_parked_jobs_are_counted_and_listed_as_pending(store):
    limit(store, conc=1)
    plain = put(store, None)
    _, b, c = (put(store, "g") for _ in range(3))
    claim(store, T0, "w#1", limit=2)  # plain and the first
    assert ids(claim(store, T0, "w#2")) == []  # b and c parked
    late = put(store, None, delay=60)
    assert parked(store) == 2
    assert store.size(Q, "pending") == 3
    counts = store.counts(Q, T0 + 1)
    assert (counts["pending"], counts["parked"], counts["running"]) == (3, 2, 2)
    assert store.page_ids(Q, "pending", 0, 10) == [late, b, c]
    assert store.page_ids(Q, "pending", 1, 1) == [b]
    page = store.page(Q, "pending", 0, 10)
    assert [(j.id, j.score) for j in page][1:] == [(b, T0), (c, T0)]
    assert plain not in store.page_ids(Q, "pending", 0, 10)


def test_rate_state_of_quiet_groups_is_dropped(store):
    limit(store, rate=(10, 1000))
    for g in range(30):
        put(store, f"g{g}")
    claim(store, T0, "w#1", limit=30)
    holds = store.key(Q, "holds")
    assert store.client.hlen(holds) == 30  # each group's next free time
    for i in range(4):  # later claims that pace a group look at 20 fields each
        put(store, "late", now=T0 + 10)
        claim(store, T0 + 10 + i, f"w#{i + 2}")
    assert store.client.hkeys(holds) in ([], [b"\n" + f"{GROUPED}\nlate".encode()])


def _grouped_task():
    return task(name=f"tests.g_{uuid.uuid4().hex}", group_concurrency=1)(lambda n: None)


def test_every_way_to_schedule_takes_a_group(store):
    from django_delayq import call, schedule_many

    grouped = _grouped_task()
    jobs = [
        schedule(grouped, 1, group="s:1"),
        grouped.call(2).schedule(group="s:2"),
        call(grouped, 3).schedule(group="s:3"),
        *schedule_many(grouped, [(4,), {"args": [5], "group": "s:5"}], group="s:4"),
    ]
    groups = store.key(Q, "groups")
    stored = [store.client.hget(groups, j.id) for j in jobs]
    assert [g.decode().split("\n")[1] for g in stored] == ["s:1", "s:2", "s:3", "s:4", "s:5"]


def test_aschedule_takes_a_group(astore):
    from django_delayq import aschedule

    grouped = _grouped_task()
    job = run(aschedule, grouped, 1, group="s:9")
    assert astore.client.hget(astore.key(Q, "groups"), job.id).endswith(b"\ns:9")


def test_a_claim_reads_past_the_jobs_it_parks(store):
    """With parked jobs about, a claim reads past its room (twice it, at most 16 more):
    the jobs of full groups it meets are parked, it leases what its room allows, and leaves
    the rest pending untouched (due now: a wake token for a peer)."""
    limit(store, conc=1)
    hot = [put(store, "hot") for _ in range(3)]
    cold = [put(store, f"c{i}") for i in range(3)]
    assert ids(claim(store, T0, "w#1", limit=1)) == [hot[0]]
    assert ids(claim(store, T0, "w#2", limit=1)) == []  # hot[1] parked (no parked job before)
    # Room 2, 4 read: hot[2] parked on the way, cold[0] and cold[1] leased, cold[2] left.
    assert ids(claim(store, T0, "w#3", limit=2)) == cold[:2]
    assert parked(store) == 2
    assert cold[2] in members(store, "pending")
    assert store.client.hget(store.key(Q, "state"), cold[2]) is None
    assert store.client.llen(store.key(Q, "wake")) >= 1
    assert ids(claim(store, T0, "w#4", limit=5)) == cold[2:]


def test_a_dead_job_keeps_its_group_until_deleted(store):
    limit(store, conc=1)
    a, b = put(store, "g"), put(store, "g")
    assert ids(claim(store, T0, "w#1")) == [a]
    error = {"type": "x", "message": "y"}
    outcome = store.fail(
        Q, a, "w#1", error, delay=-1, default_max_retries=0, now=T0 + 1, **DEAD_OPTS
    )
    assert outcome[0] == "dead"
    groups = store.key(Q, "groups")
    assert store.client.hget(groups, a) == f"{GROUPED}\ng".encode()  # kept for a requeue
    assert ids(claim(store, T0 + 1, "w#2")) == [b]  # a's slot went to b
    assert store.requeue(Q, [a], now=T0 + 2) == [1]
    assert ids(claim(store, T0 + 2, "w#3")) == []  # b holds the group's slot: a is parked
    assert store.fetch(Q, a).status == "pending"
    # b leaves: the claim that acknowledges it takes a back from parked, in the same call.
    assert ids(claim(store, T0 + 3, "w#4", acks=[(b, "w#2", "g")])) == [a]
    store.fail(Q, a, "w#4", error, delay=-1, default_max_retries=0, now=T0 + 5, **DEAD_OPTS)
    assert store.delete_dead(Q, [a], now=T0 + 6) == [True]
    assert store.client.hget(groups, a) is None
    assert not store.client.exists(groups, store.key(Q, "parked"), store.key(Q, "holds"))


def test_a_replace_by_unique_key_moves_a_parked_job_to_its_new_group(store):
    limit(store, conc=1)

    def keyed(group):
        record = encode_record(GROUPED, [1], {}, "the-key", 3, "g")
        return store.schedule(Q, new_job_id(), record, now=T0, key="the-key", group=group)

    a = put(store, "old")
    held = keyed("old").id
    assert ids(claim(store, T0, "w#1")) == [a]
    assert ids(claim(store, T0, "w#2")) == []  # the keyed job is parked behind a
    replaced = keyed("new")
    assert (replaced.outcome, replaced.id) == ("replaced", held)
    assert parked(store) == 0  # out of parked, pending in its new group
    assert store.client.hget(store.key(Q, "groups"), held) == f"{GROUPED}\nnew".encode()
    assert ids(claim(store, T0 + 1, "w#3")) == [held]  # "new" has a free slot
