"""Chains (Call.then) with delays between steps, while worker processes are SIGKILLed and
restarted: each step stored once (one job id), in order, never before its delay after the
step before it ended; a dead step runs the chain's on_death once and ends the chain. Each
task records its runs in the separate "runs" Redis (tests/reliability/tasks.py timed)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from django_delayq.storage.store import Store
from tests.reliability.harness import installed, sizes, wait_until, worker_env
from tests.reliability.tasks import explode, timed
from tests.reliability.test_batches import KillLoop, Run, settled, timed_runs

pytestmark = pytest.mark.reliability

CHAINS, STEPS, DELAY = 6, 4, 1.0


def check_chain(ran: list[Run], chain: int, exposed: Counter[str]) -> None:
    """Steps 0..STEPS-1 of ``chain``: each under one job id, run once (or again as often as
    a killed worker held it), each started DELAY after the step before it ended."""
    previous_end = None
    for step in range(STEPS):
        got = [r for r in ran if r.value == f"{chain}.{step}"]
        ids = {r.job_id for r in got}
        assert len(ids) == 1, f"step {chain}.{step} stored {len(ids)} times: {got}"
        (job_id,) = ids
        assert 1 <= len(got) <= 1 + exposed[job_id], f"step {chain}.{step} ran {len(got)} times"
        if previous_end is not None:
            waited = min(r.start for r in got) - previous_end
            # The next step is due DELAY after the ack (which follows the recorded end).
            assert waited >= DELAY - 0.05, f"step {chain}.{step} started {waited:.3f} s after"
        previous_end = max(r.end for r in got)


def test_chains_with_delays_while_workers_are_killed(
    servers, runs_server, runs_client, workers, prefix, tag, report
):
    """Six chains of four steps, 1 s apart, and a chain whose second step dies; two worker
    processes (a 2 s lease), one SIGKILLed and restarted every 1.5 s until every chain
    ended."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, VISIBILITY_TIMEOUT=2, MAX_SLEEP=1)

    loop = KillLoop(workers, env, store, "ch", 2)
    death_tag = f"{tag}:death"
    with installed(store):
        firsts = []
        for c in range(CHAINS):
            chain = timed.call(tag, f"{c}.0", 0.4)
            for step in range(1, STEPS):
                chain = chain.then(timed.call(tag, f"{c}.{step}", 0.4), delay=DELAY)
            firsts.append(chain.schedule())
        dying = (
            timed.call(tag, "d.0")
            .then(explode.call(tag, "d.1"), delay=DELAY)
            .then(timed.call(tag, "d.2"), delay=DELAY)
            .on_death(timed.call(death_tag, "death"))
            .schedule()
        )
        began = time.monotonic()

        def ended() -> bool:
            values = {r.value for r in timed_runs(runs_client, tag)}
            lasts = {f"{c}.{STEPS - 1}" for c in range(CHAINS)}
            return lasts <= values and bool(timed_runs(runs_client, death_tag))

        loop.run(ended, 1.5, began)
        wait_until(lambda: settled(store), 60, "every chain to end and its ends to be forwarded")
        time.sleep(DELAY + 0.5)  # a step stored twice would run now
        codes = loop.stop()
    exposed, kills = loop.exposed, loop.kills
    ran = timed_runs(runs_client, tag)
    by_id = Counter(r.job_id for r in ran)
    report(
        scenario="chains: 6 x 4 steps 1 s apart + a dying chain, SIGKILL every 1.5 s",
        jobs=CHAINS * STEPS + 3,
        kills=kills,
        duplicates=sum(n - 1 for n in by_id.values()),
        exposed=sum(exposed.values()),
    )
    assert codes == [0, 0], f"{[r.value for r in ran]}\n{workers.outputs()}"
    for c in range(CHAINS):
        check_chain(ran, c, exposed)
    dying_runs = [r for r in ran if r.value.startswith("d.")]
    assert {r.value for r in dying_runs} == {"d.0"}  # d.1 died, d.2 never ran
    # d.0 stored once, run once or again as often as a killed worker held it (CI once saw it
    # twice: its worker was SIGKILLed before acknowledging it)
    (d0,) = {r.job_id for r in dying_runs}
    assert len(dying_runs) <= 1 + exposed[d0], f"d.0 ran {len(dying_runs)} times"
    deaths = timed_runs(runs_client, death_tag)
    assert len({r.job_id for r in deaths}) == 1 and len(deaths) <= 1 + exposed[deaths[0].job_id]
    assert deaths[0].batch_id == "-"  # a chain's on_death belongs to no batch
    assert sizes(store)["dead"] == 1
    chain_keys = [store.chain_key(j.id) for j in firsts]
    assert store.client.exists(*chain_keys) == 0, "a chain's hash outlived its end"
    # The dying chain waits for a requeue of its dead step (docs/howto/batches.rst) while
    # dead jobs are kept, its on_death stored already (once).
    waiting = store.chain_key(dying.id)
    assert b"death" not in store.client.hkeys(waiting) and store.client.hexists(waiting, "dead")
    assert store.client.pttl(waiting) > 0
