"""The link of a job: the JSON stored beside a linked job's record (record flag 'l', the
`links` hash of its queue, lua/include/links.lua), read only by Python.

Fields, each optional: ``b`` the batch the job counts for, ``m`` the member it counts as
(a chain's later step counts as the chain's first step, the member the batch knows), ``c``
the chain it is a step of (its id: the first step's id), ``i`` its index there and ``n`` the
chain's number of steps (an end of a step before the last whose chain is gone is stale), ``of``
the batch whose callback it is (``current_job().batch_id`` tells the task).

Ids of what a forwarding stores are derived from what decided it (:func:`derived_id`), so a
forwarding re-sent after a crash stores nothing twice: the job is there, or its tombstone
is (kept a day: record flags 'i' and 'e').
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def dumps(link: dict[str, Any]) -> str:
    return json.dumps(link, separators=(",", ":"), sort_keys=True)


def loads(text: str | bytes | None) -> dict[str, Any]:
    """A link as a dict ({} for none or garbage: a link that cannot be read links nothing)."""
    if not text:
        return {}
    try:
        link = json.loads(text)
    except ValueError:
        return {}
    return link if isinstance(link, dict) else {}


def derived_id(parent: str, tag: str, at_ms: int) -> str:
    """A ULID-shaped id: ``at_ms`` as its time, 80 bits of a hash of (parent, tag)."""
    digest = hashlib.blake2b(f"{parent}/{tag}".encode(), digest_size=10).digest()
    value = (int(at_ms) << 80) | int.from_bytes(digest, "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def lookup(queue: str, job_id: str) -> str | None:
    """Job.batch_id (jobs/job.py): the batch of the job's link in Redis."""
    from django_delayq.storage.connection import get_store

    return batch_of(loads(get_store().batches.read_link(queue, job_id)))


def batch_of(link: dict[str, Any]) -> str | None:
    """The batch a job belongs to, as a member or as a callback."""
    found = link.get("b") or link.get("of")
    return found if isinstance(found, str) else None
