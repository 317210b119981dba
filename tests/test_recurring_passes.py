"""When the reconcile loop runs a full pass (recurring/passes.py): a look that finds nothing
changed runs none; a saved row, another worker's recorded change, a flushed Redis, a lost
successor or FULL_EVERY seconds do. Against the real Redis and the test database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_delayq.models import Schedule, ScheduleState
from django_delayq.recurring import claims
from django_delayq.recurring.passes import PassLoop
from django_delayq.recurring.reconcile import Reconciler
from tests.test_recurring import TASK, sim_at  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def settle(loop: PassLoop) -> int:
    """Looks until one runs no pass: how many passes ran (a pass that records something
    itself changes what the next look sees, so one more pass follows it)."""
    for ran in range(4):
        if not loop.run_once():
            return ran
    raise AssertionError("the loop never settles")


def test_a_look_runs_a_full_pass_only_when_something_changed(sim_at):  # noqa: F811
    sim = sim_at(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC), tick={"every": 60})
    loop = PassLoop(Reconciler(sim.store, clock=sim.clock), full_share=1e-9)
    assert settle(loop) == 2  # the first look, and the one after it recorded the schedule
    assert not loop.run_once()  # nothing changed
    row = Schedule.objects.create(name="db", task=TASK, every=10, kwargs={"tag": sim.tag})
    assert settle(loop) >= 1  # a new row (updated_at)
    assert ScheduleState.objects.filter(name="db").exists()
    row.every = 20
    row.save()
    assert settle(loop) >= 1  # a changed row
    ScheduleState.objects.filter(name="db").update(generation=9)
    assert settle(loop) == 1  # another worker recorded a change
    sim.store.client.delete(*sim.store.client.scan_iter(match=f"{sim.store.prefix}:*"))
    assert settle(loop) == 1  # Redis lost everything: the pass stores the occurrences again
    assert sim.store.client.zcard(sim.store.key("default", "pending")) == 2
    claims.successors_lost.set()
    assert settle(loop) == 1 and not claims.successors_lost.is_set()


def test_a_row_changed_by_update_is_picked_up_by_the_periodic_full_pass(sim_at):  # noqa: F811
    """QuerySet.update() leaves updated_at alone: no look sees it, the periodic full pass
    does (at most FULL_SHARE of a core: with few schedules, at the next look)."""
    sim = sim_at(datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC))
    Schedule.objects.create(name="db", task=TASK, every=10, kwargs={"tag": sim.tag})
    loop = PassLoop(Reconciler(sim.store, clock=sim.clock), full_share=1e-9)
    assert settle(loop) >= 1
    digest = ScheduleState.objects.get(name="db").digest
    Schedule.objects.filter(name="db").update(every=30)
    assert not loop.run_once()
    loop.full_share = 1e9  # as with few schedules: the periodic full pass is every look
    loop.reconciler.interval = 0.0  # (and the look is due: no waiting here)
    assert loop.run_once()
    assert ScheduleState.objects.get(name="db").digest != digest
