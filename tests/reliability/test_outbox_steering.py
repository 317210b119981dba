"""Issue 36's options through the outbox with real processes: a debounce scheduled with
``on_commit=True`` on the real PostgreSQL, relayed by a real delayq_worker into a real
redis-server. Each call is a new row whose relay takes the key over from the job in Redis
(schedule.lua in relay mode, capped by that job's first due time): the job runs at its
first due time plus max_wait at the latest, not after the last call, and the last call's
job is never lost."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction

from django_delayq.storage.store import Store
from tests.reliability.harness import installed, runs, wait_until, worker_env
from tests.reliability.tasks import stamp
from tests.reliability.test_outbox import SETTLE, pg, row_count  # noqa: F401

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True, databases=["default", "pg"]),
]


def test_an_on_commit_debounce_runs_by_its_cap_and_loses_no_last_call(
    servers,
    runs_server,
    runs_client,
    workers,
    prefix,
    tag,
    pg,  # noqa: F811
):
    delay, max_wait, calls, every = 2.0, 3.0, 24, 0.3  # calls over 7.2 s, past the cap
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, DATABASE=pg, MAX_SLEEP=1)
    proc = workers.start(env, "--concurrency", "2", "-v", "1", name="debounced")
    due: dict[str, float] = {}
    with installed(store):
        time.sleep(1.0)  # the worker is up
        for i in range(calls):
            with transaction.atomic(using="pg"):
                job = stamp.schedule(
                    tag, str(i), key=f"{tag}:k", delay=delay, max_wait=max_wait, on_commit="pg"
                )
            assert job.outcome == "deferred"
            due[str(i)] = time.time() + delay
            time.sleep(every)
        last = str(calls - 1)
        wait_until(lambda: last in [r.split(" ")[0] for r in runs(runs_client, tag)], 30, "last")
        time.sleep(SETTLE)
    proc.signal(signal.SIGTERM)
    code = proc.wait(30)
    lines = [line.split(" ") for line in runs(runs_client, tag)]
    ran = [(value, float(at)) for value, at in lines]
    assert code == 0, workers.outputs()
    assert row_count() == 0
    # Debounced: far fewer runs than calls, each once, the last call's job among them.
    assert 2 <= len(ran) <= 4, ran
    assert len({v for v, _ in ran}) == len(ran) and ran[-1][0] == last
    # The first run came by the first call's due time plus max_wait (not 2 s after the
    # last call, 7 s later): the relays of the calls in between were capped.
    first_run = ran[0][1]
    assert first_run <= due["0"] + max_wait + 1.0, (first_run - due["0"], ran)
    assert first_run >= due["0"] + max_wait - 0.5  # pushed back up to the cap, not earlier
