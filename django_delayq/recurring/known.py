"""What this process's last reconcile pass saw of each enabled schedule, keyed by name hash,
so that a claim's occurrences (claims.py) need not parse the recorded definitions again, and
still have successors while the database cannot be read. An entry is used only when its
digest is the one the database records (claims.py reads the states first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Known:
    name: str
    generation: int
    digest: str
    since_ms: int  # set with the generation: both change together (reconcile._changed)
    version: int  # the occurrence ids' version: version_hash(digest, generation)
    definition: Any  # the Definition (definitions.py imports the registry: no import)


_known: dict[int, Known] = {}


def remember(entries: dict[int, Known]) -> None:
    """Replace every entry (one pass saw them all)."""
    global _known
    _known = entries


def known(name_hash: int) -> Known | None:
    return _known.get(name_hash)
