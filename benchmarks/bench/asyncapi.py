"""The async API's figure (issue 21): aschedule() one call per job, awaited one after the
other and as one ``asyncio.gather`` of every call, beside the sync schedule() loop of the
same run (its baseline)."""

from __future__ import annotations

import asyncio
from typing import Any

from .common import Timer, cleanup, figure, pending_count


def bench_aschedule(store: Any, prefix: str, n: int, runs: int) -> list[dict[str, Any]]:
    """Three loops per run, n jobs each (due in 1 h): schedule(), aschedule() awaited in
    turn, and aschedule() gathered (the client's pool, 100 connections by default, caps the
    calls in flight; the rest wait for a connection)."""
    from benchmarks.tasks import noop
    from django_delayq import aschedule

    async def sequential() -> float:
        await aschedule(noop, -1, delay=3600)  # connect and load the script
        with Timer() as timer:
            for i in range(n):
                await aschedule(noop, i, delay=3600)
        return timer.seconds

    async def gathered() -> float:
        await aschedule(noop, -1, delay=3600)
        with Timer() as timer:
            await asyncio.gather(*(aschedule(noop, i, delay=3600) for i in range(n)))
        return timer.seconds

    syncs, seqs, gathers = [], [], []
    for _ in range(runs):
        cleanup(store.client, prefix)
        noop.schedule(-1, delay=3600)
        with Timer() as timer:
            for i in range(n):
                noop.schedule(i, delay=3600)
        syncs.append(n / timer.seconds)
        for loop, rates in ((sequential, seqs), (gathered, gathers)):
            cleanup(store.client, prefix)
            rates.append(n / asyncio.run(loop()))
            assert pending_count(store) == n + 1
    cleanup(store.client, prefix)
    note = "baseline: schedule(), one call per job, same run"
    return [
        figure(
            "aschedule_sequential",
            f"aschedule() jobs/s, awaited one after the other ({n:,} due in 1 h)",
            seqs,
            syncs,
            "jobs/s",
            "beside schedule() (no target)",
            None,
            note=note,
        ),
        figure(
            "aschedule_gather",
            f"aschedule() jobs/s, {n:,} calls in one asyncio.gather",
            gathers,
            syncs,
            "jobs/s",
            "beside schedule() (no target)",
            None,
            note=note,
        ),
    ]
