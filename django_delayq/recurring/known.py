"""What this process's last reconcile pass saw of each enabled schedule, keyed by name hash,
so that the start hook (hooks.py) need not read the database twice per occurrence.

An entry is only trusted together with the conditional UPDATE that writes the occurrence's
durable record: that UPDATE names the entry's generation and digest, so it changes no row
once the schedule changed in the database, and the hook then takes its slow path (reads
the state and the definition). A stale entry costs a round trip, never a wrong successor.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_delayq.recurring.definitions import Definition


@dataclass(frozen=True)
class Known:
    name: str
    generation: int
    digest: str
    since_ms: int  # set with the generation: both change together (reconcile._changed)
    version: int  # the occurrence ids' version: version_hash(digest, generation)
    definition: Definition


_known: dict[int, Known] = {}


def remember(entries: dict[int, Known]) -> None:
    """Replace every entry (one pass saw them all)."""
    global _known
    _known = entries


def known(name_hash: int) -> Known | None:
    return _known.get(name_hash)
