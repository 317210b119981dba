"""Worker names (``delayq_worker --name``): whatever the name, its lease tokens never collide
with the markers the scripts read ('~' settled, '|' state, '#' token counter, '/r' claims
field, whitespace and newlines in the claims hash), so a worker of any name acks, heartbeats
and runs each job once. Fakeredis and the real server."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from django_delayq import get_job, task
from django_delayq.jobs.state import encode_instance_name, parse_state, worker_of
from django_delayq.worker.dispatch import Worker
from tests.testapp import tasks as t

NASTY = [
    "~x",
    "~",
    "~~",
    "a|b",
    "|",
    "#",
    "x#y#",
    "a b\tc\nd",
    "w/r",
    "50%",
    "%7E",
    "{tag}",
    "é~ü",
    "-",
]


@pytest.mark.parametrize("name", NASTY)
def test_a_worker_of_any_name_acks_and_heartbeats_and_runs_each_job_once(store, name):
    extended = []

    @task(name="tests.beats_while_running", retry_backoff=0)
    def beats_while_running():
        held = worker.holding()
        flags = store.extend("default", [a.lease for a in held], 30)
        extended.extend(flags)
        state = store.client.hget(store.key("default", "state"), held[0].id)
        extended.append(parse_state(state) == (0, held[0].token))

    jobs = [beats_while_running.schedule(), t.remember.schedule(1), t.remember.schedule(2)]
    worker = Worker(["default"], burst=True, name=name)
    assert worker.run() == 0
    assert extended == [True, True]  # the heartbeat took the lease; the state reads it back
    assert [get_job(job.id) for job in jobs] == [None, None, None]  # acked: gone
    assert sorted(args for args, _ in t.CALLS) == [(1,), (2,)]  # each ran once
    assert worker.processed == 3 and worker.failed == 0
    assert store.client.hlen(store.key("default", "claims")) == 0  # stopped: entries dropped


@pytest.mark.parametrize("name", NASTY)
def test_an_instance_name_holds_no_marker_and_names_its_worker(name):
    encoded = encode_instance_name(name)
    assert encoded and not encoded.startswith("~")
    assert not any(c in encoded for c in "~|#/{} \t\r\n")
    assert encoded.isprintable()
    token = f"{encoded}~0a1b2c3d#7"
    assert parse_state(f"3|{token}") == (3, token)  # held, not read as settled
    assert parse_state(f"3|~{token}") == (3, token)
    assert worker_of(token) == f"{encoded}~0a1b2c3d"


def test_names_that_would_collide_stay_apart():
    names = ["~x", "%7Ex", "%x", "x"]
    assert len({encode_instance_name(n) for n in names}) == len(names)
    assert encode_instance_name("web-1:4242") == "web-1:4242"  # a plain name reads as it is


def test_a_name_utf8_cannot_carry_is_refused_naming_it(fake_store):
    with pytest.raises(ValueError, match=r"worker name '\\udcff' .*UTF-8"):
        Worker(["default"], name="\udcff")
    with pytest.raises(CommandError, match=r"worker name '\\udcff'"):
        call_command("delayq_worker", "--burst", "--name", "\udcff")


def test_the_roster_names_a_worker_by_its_given_name(store):
    from django_delayq.storage.roster import decode_description

    worker = Worker(["default"], name="~x y")
    worker.parts.presence.beat()
    (live,) = store.roster.live(store.server_time())
    assert live.name == "~x y" and live.instance == worker.instance
    assert live.instance.startswith("%7Ex%20y~")
    # A description without its name (garbage): the name is read back from the instance.
    assert decode_description(worker.instance, b"{}", 1000, 0.0).name == "~x y"
