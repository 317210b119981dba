"""A callback or a chain step as stored (JSON), and storing one as a job under an id derived
from what decided it (links.derived_id), at most once.

A step is ``{"t": task, "a": args, "k": kwargs, "o": options}`` (options: ``delay`` in
seconds, ``queue``, ``priority``, ``max_retries``); a chain is ``{"steps": [step, ...],
"death": step or null}``. Every step is checked when it is made (its task, its arguments
against the task's signature, its options), so a bad callback fails in the ``batch()``
call or ``Call.then()``, not later in a worker.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from django_delayq import signals
from django_delayq.jobs.record import JobSpec, encode_job
from django_delayq.scheduling.calls import Call, Chain
from django_delayq.scheduling.plan import Plan
from django_delayq.scheduling.prepared import Prepared
from django_delayq.storage.connection import get_store
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.batches")

STEP_OPTIONS = frozenset({"delay", "queue", "priority", "max_retries"})


def step_options(options: dict[str, Any], what: str) -> dict[str, Any]:
    """The options of a callback or step, checked (as schedule() checks them)."""
    unknown = set(options) - STEP_OPTIONS
    if unknown:
        raise TypeError(
            f"{what} takes the options {', '.join(sorted(STEP_OPTIONS))}, not "
            f"{sorted(unknown)[0]!r}"
        )
    delay = options.get("delay")
    if isinstance(delay, timedelta):
        delay = delay.total_seconds()
    checked = {k: v for k, v in options.items() if v is not None}
    if delay is not None:
        checked["delay"] = delay
    return checked


def step_of(call: Call, options: dict[str, Any], what: str) -> dict[str, Any]:
    """A step as stored, after the checks schedule() makes (it is never stored here)."""
    if not isinstance(call, Call):
        raise TypeError(
            f"{what} must be a Call (Task.call(...) or django_delayq.call(...)), got {call!r}"
        )
    options = step_options(options, what)
    Prepared(Plan(call.task, options), call.args, dict(call.kwargs), link="")
    return {"t": call.task, "a": list(call.args), "k": dict(call.kwargs), "o": options}


def spec_of(value: Call | Chain, what: str) -> str:
    """A callback (a Call, or a Chain) as stored: JSON."""
    if isinstance(value, Chain):
        return json.dumps(chain_spec(value), separators=(",", ":"))
    return json.dumps({"steps": [step_of(value, {}, what)], "death": None}, separators=(",", ":"))


def chain_spec(chain: Chain) -> dict[str, Any]:
    steps = [step_of(call, options, "a chain step") for call, options in chain.steps]
    death = None if chain.death is None else step_of(chain.death, {}, "on_death")
    return {"steps": steps, "death": death}


def store_step(
    step: dict[str, Any],
    job_id: str,
    link: str,
    start_ms: int,
    store: Store | None = None,
) -> None:
    """Store ``step`` as a job under ``job_id``, due its delay after ``start_ms``, at most
    once: sent as a re-send (schedule.lua ARGV[8]), so a job of that id that is stored,
    or finished within a day (flags 'i' and 'e'), is not stored again."""
    options = dict(step.get("o") or {})
    delay = float(options.pop("delay", 0) or 0)
    plan = Plan(step["t"], options)
    prepared = Prepared(plan, step.get("a") or [], step.get("k") or {}, link=link, job_id=job_id)
    spec = JobSpec(
        plan.name,
        prepared.args,
        prepared.kwargs,
        None,
        plan.max_retries,
        plan.priority,
        undecided=plan.undecided,
        tombstone=True,
        relayed=True,
        long_tombstone=True,
        linked=bool(link),
        expires_ms=prepared.expires_ms,
    )
    record = encode_job(spec).data
    store = store or get_store()
    result = store.schedule(
        plan.queue, job_id, record, at=start_ms / 1000 + delay, relay=True, link=link
    )
    if result.outcome == "created":
        signals.send(signals.job_scheduled, prepared.sender, job=prepared.job(result))
