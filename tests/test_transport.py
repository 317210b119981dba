"""The transport's retry policy against a real Redis behind the fault proxy of
tests/reliability/faults.py: what is sent again after a lost reply or an error answer, and
what the caller is told when Redis cannot say whether it ran an operation."""

from __future__ import annotations

import re

import pytest

from django_delayq import DelayQError, OutcomeUnknown, cancel, get_job, schedule
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.storage.store import Store
from tests.conftest import real_redis
from tests.reliability.faults import (
    BUSY,
    NOSCRIPT,
    WRONGTYPE,
    cut,
    drop_reply,
    error,
    schedules,
    script,
)
from tests.testapp import tasks as t


def test_a_lost_schedule_reply_is_sent_again_and_stores_the_job_once(proxied):
    proxy, store = proxied
    lost = proxy.add_rule(schedules, drop_reply())
    job = schedule(t.remember, 1, delay=60)
    assert lost.applied == 1 and lost.matched == 2  # Redis ran it, then got it again
    assert job.outcome == "created"
    assert store.size("default", "pending") == 1
    assert get_job(job.id).args == [1]


def test_a_lost_cancel_reply_is_not_sent_again_and_says_so(proxied):
    proxy, _ = proxied
    job = schedule(t.remember, 1, delay=60)
    lost = proxy.add_rule(script("cancel"), drop_reply())
    with pytest.raises(OutcomeUnknown, match="cancel"):
        cancel(job.id)
    assert lost.matched == 1  # sent once
    assert get_job(job.id) is None  # Redis had run it


def test_a_re_sent_schedule_that_cannot_reach_redis_again_is_an_unknown_outcome(proxied):
    """Redis stored the job, its reply was lost, and every re-send is cut before Redis
    sees it until the call's budget runs out: the caller is told the job may be stored,
    and which one, not that nothing happened."""
    proxy, store = proxied
    proxy.add_rule(schedules, drop_reply())
    proxy.add_rule(schedules, cut(), nth=2, times=None)
    with pytest.raises(OutcomeUnknown, match=r"may have been stored: get_job") as info:
        schedule(t.remember, 1, delay=60)
    assert isinstance(info.value, DelayQConnectionError)  # what callers already catch
    (job_id,) = re.findall(r"get_job\('(\w+)'\)", str(info.value))
    direct = Store(real_redis(), store.prefix)
    assert direct.fetch("default", job_id) is not None  # it was stored, once
    assert direct.size("default", "pending") == 1


def test_a_schedule_that_could_not_be_sent_is_a_plain_connection_error(proxied):
    """No connection could be made: Redis certainly did not run it."""
    proxy, store = proxied
    proxy.close()
    with pytest.raises(DelayQConnectionError) as info:
        schedule(t.remember, 1, delay=60)
    assert not isinstance(info.value, OutcomeUnknown)
    assert Store(real_redis(), store.prefix).size("default", "pending") == 0


@pytest.mark.parametrize("reply", [BUSY, NOSCRIPT])
def test_answers_meaning_not_run_are_sent_again(proxied, reply):
    proxy, _ = proxied
    fault = proxy.add_rule(schedules, error(reply), times=2)
    job = schedule(t.remember, 1, delay=60)
    assert fault.applied == 2 and fault.matched == 3
    assert get_job(job.id) is not None


def test_other_error_answers_are_final_and_not_sent_again(proxied):
    proxy, _ = proxied
    fault = proxy.add_rule(schedules, error(WRONGTYPE), times=None)
    with pytest.raises(DelayQError, match="WRONGTYPE"):
        schedule(t.remember, 1, delay=60)
    assert fault.matched == 1
