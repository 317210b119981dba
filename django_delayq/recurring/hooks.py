"""What a worker does when an occurrence ends (receivers of django-delayq's signals,
connected by apps.py): the schedule's last outcome, buffered and written by the
reconcile loop's next look (claims.py, passes.py). The claim does everything an occurrence
needs before it runs (the missed policy, the durable record, the successor).

Ordinary jobs cost one look at three characters of their id here.
"""

from __future__ import annotations

from typing import Any

from django_delayq.recurring import known
from django_delayq.recurring.claims import buffer_outcome
from django_delayq.recurring.ids import may_be_occurrence


def forget_known() -> None:
    """Trust no pass's entries (tests)."""
    known.remember({})


def on_succeeded(sender: Any, job: Any, **kwargs: Any) -> None:
    buffer_outcome(job.id, "succeeded")


def on_failed(sender: Any, job: Any, will_retry: bool = False, **kwargs: Any) -> None:
    buffer_outcome(job.id, "retrying" if will_retry else "failed")


def on_dead(sender: Any, job: Any, **kwargs: Any) -> None:
    buffer_outcome(job.id, "dead")


def connect() -> None:
    """Hook the receivers above to the job signals (signals.hook: called directly, not
    through Django's dispatch, which every job would pay for), only for jobs whose id may be
    an occurrence's. They only append to a list, so they are safe on an event loop."""
    from django_delayq import signals

    signals.hook(signals.job_succeeded, on_succeeded, _maybe_occurrence)
    signals.hook(signals.job_failed, on_failed, _maybe_occurrence)
    signals.hook(signals.job_dead, on_dead, _maybe_occurrence)


def _maybe_occurrence(job: Any) -> bool:
    return may_be_occurrence(job.id)
