"""signals.hook: the package's own per-job hooks (the recurring schedules'), called by
signals.send without Django's dispatch, before the receivers, only for the jobs their
predicate accepts; a failing hook is logged and never breaks the send; needs_thread asks
the hooks' predicates too (the event loop)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from django.dispatch import Signal

from django_delayq import signals


def test_hooks_run_once_each_before_receivers_and_a_failure_is_logged(caplog):
    signal = Signal()
    seen: list[str] = []

    def first(sender, **kwargs):
        seen.append(f"hook {kwargs['job']}")

    def broken(sender, **kwargs):
        raise RuntimeError("hook broke")

    def receiver(sender, **kwargs):
        seen.append(f"receiver {kwargs['job']}")

    signals.hook(signal, first)
    signals.hook(signal, first)  # once, however often
    signals.hook(signal, broken)
    signal.connect(receiver, weak=False)
    with caplog.at_level(logging.ERROR, "django_delayq.signals"):
        signals.send(signal, None, job="j1")
    assert seen == ["hook j1", "receiver j1"]
    assert "hook broke" in caplog.text


def test_a_hook_alone_runs_without_receivers():
    signal = Signal()
    seen = []
    signals.hook(signal, lambda sender, **kwargs: seen.append(kwargs["job"]))
    assert not signal.receivers
    signals.send(signal, None, job="j2")
    assert seen == ["j2"]


def test_a_hook_runs_only_for_the_jobs_its_predicate_accepts():
    signal = Signal()
    seen = []
    signals.hook(
        signal,
        lambda sender, **kwargs: seen.append(kwargs["job"].id),
        lambda job: job.id.startswith("occ"),
    )
    signals.send(signal, None, job=SimpleNamespace(id="plain"))
    signals.send(signal, None, job=SimpleNamespace(id="occ-2"))
    assert seen == ["occ-2"]


def test_an_ordinary_job_id_is_turned_away_by_the_recurring_predicate():
    """What every job pays: an ordinary job's id fails the three-character look (a random
    ULID passes it once in 32,768, then fails the full parse); an occurrence's passes."""
    from django_delayq.recurring import hooks
    from django_delayq.recurring.ids import occurrence_id

    for job_id in ("01M8FPHPZ2S2ZF4AWW4XMZ04R2", "01M88FQK3ZEB0BEGH7671JAD21", "short"):
        assert not hooks._maybe_occurrence(SimpleNamespace(id=job_id))
    occurrence = occurrence_id("nightly", 7, 1_800_000_000_000)
    assert hooks._maybe_occurrence(SimpleNamespace(id=occurrence))


def test_hooks_never_send_a_job_through_a_thread():
    """Hooks only append to a list (recurring/hooks.py): an occurrence's end costs an
    event loop no thread hop."""
    signal = Signal()
    signals.hook(signal, lambda sender, **kwargs: None, lambda job: job.id.startswith("occ"))
    assert not signals.needs_thread(signal, SimpleNamespace(id="occ-1"))
    assert not signals.needs_thread(signal, SimpleNamespace(id="plain"))


def test_the_recurring_hooks_are_hooks_not_receivers():
    """Every job pays for a receiver's dispatch; the recurring hooks are on the hook list."""
    from django_delayq.recurring import hooks

    assert (hooks.on_succeeded, hooks._maybe_occurrence) in signals._HOOKS[signals.job_succeeded]
    started = [f.__module__ for f, _ in signals._HOOKS.get(signals.job_started, [])]
    assert hooks.__name__ not in started  # the claim handles an occurrence's start
    uids = [entry[0][0] for entry in signals.job_succeeded.receivers]
    assert "delayq-recurring-succeeded" not in uids
