"""Chains: ``Call.then(...)`` (scheduling/calls.py) scheduled with ``Chain.schedule()``.

The steps after the first are stored once, in the chain's hash (its id is the first step's
job id: storage/batches.py), before the first step is scheduled; each step's job carries
the link ``{"c": chain id, "i": its index}`` (links.py), so its end is forwarded
(forwarding.py): a success schedules the next step, a death the chain's on_death call, and
the last step's end, a death or a cancel deletes the chain's hash.
"""

from __future__ import annotations

import json
from typing import Any

from django_delayq.batches import links
from django_delayq.batches.steps import chain_spec
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.job import Job
from django_delayq.scheduling import membership
from django_delayq.scheduling.api import schedule_call
from django_delayq.scheduling.calls import Chain, use_scheduler
from django_delayq.storage.connection import get_store


def step_fields(spec: dict[str, Any]) -> dict[str, str]:
    """The chain hash's fields: step index -> step (JSON), from the second step on, and
    "death" -> the on_death step."""
    fields = {str(i): json.dumps(step) for i, step in enumerate(spec["steps"]) if i > 0}
    if spec.get("death"):
        fields["death"] = json.dumps(spec["death"])
    return fields


def schedule_chain(chain: Chain, options: dict[str, Any]) -> Job:
    """:meth:`Chain.schedule`: check every step, store the later ones, schedule the first
    (a member of the open batch, if any: the whole chain counts as that member)."""
    spec = chain_spec(chain)  # every step checked before anything is stored
    chain_id = new_job_id()
    fields = step_fields(spec)
    store = get_store()
    if fields:
        store.call(store.batches.write_chain_op(chain_id, fields))
    link: dict[str, Any] = {"c": chain_id, "i": 0, "n": len(spec["steps"])}
    member_of = membership.current()
    if member_of is not None and member_of.link:
        link.update(links.loads(member_of.link))
        link["m"] = chain_id
    first, _ = chain.steps[0]
    return schedule_call(first, dict(options), links.dumps(link), chain_id)


use_scheduler("chain", schedule_chain)
