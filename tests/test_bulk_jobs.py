"""schedule_many()'s lean steps (scheduling/prepared.py): calls alike a first one encode as
that one would (Prepared.alike), and the Jobs of a chunk copied from its first created job
(jobs_of) are the Jobs Prepared.job makes, field for field."""

from __future__ import annotations

from django_delayq.jobs.record import encode_record
from django_delayq.scheduling.plan import Plan
from django_delayq.scheduling.prepared import Prepared, jobs_of
from django_delayq.storage.replies import Scheduled
from tests.testapp import tasks as t


def test_alike_calls_are_prepared_as_their_own_would_be():
    plan = Plan(t.remember, {"delay": 5, "priority": 3})
    first = Prepared(plan, (1,), {}, link="{}")
    for args in ((2, "x"), [3, [4]], ()):
        alike, own = first.alike(args), Prepared(plan, args, {}, link="{}")
        assert alike.record == own.record
        assert (alike.args, alike.kwargs, alike.link, alike.plain) == (
            own.args,
            own.kwargs,
            own.link,
            own.plain,
        )
        assert alike.id != first.id


def test_the_jobs_of_a_chunk_are_the_ones_prepared_job_makes():
    plan, other = Plan(t.remember, {}), Plan(t.remember, {"delay": 60, "key": "k"})
    first = Prepared(plan, (0,), {})
    chunk = [first, first.alike((1,)), Prepared(other, (2,), {}), Prepared(plan, (3,), {"a": 1})]
    chunk += [first.alike((4,)), first.alike((5,))]
    kept = encode_record("tests.testapp.tasks.remember", [9], {}, "k", 5)
    results = {
        p.id: Scheduled("created", p.id, 1_700_000_000.5 + i, None) for i, p in enumerate(chunk)
    }
    results[chunk[2].id] = Scheduled("kept", "0" * 26, 1_700_000_100.0, kept)
    results[chunk[5].id] = Scheduled("done", chunk[5].id, None, None)
    made = jobs_of(chunk, results)
    assert made == [p.job(results[p.id]) for p in chunk]
    assert [job.__dict__ for job in made] == [p.job(results[p.id]).__dict__ for p in chunk]
    assert made[1].errors is not made[0].errors  # a list of its own
