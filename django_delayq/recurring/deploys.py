"""Which version of ``DELAYQ["SCHEDULES"]`` workers follow while old and new code run side
by side (a rolling deploy).

Each worker's reconcile pass records its version of the settings' schedules (a digest of
every valid entry) in Redis with the time a worker first and last ran it. The newest version
that a worker ran in the last ALIVE_MS is *current*: only workers running it record new,
changed or removed settings schedules. The others leave those schedules alone, and keep the
recorded definitions' chains going (claims.py follows the definition recorded in the
database, whatever a worker's own settings say). So the first worker of a deploy takes over
at its first pass, workers of the old code never record their definitions back, and after a
rollback the older version is current again once no worker has run the newer one for
ALIVE_MS.
"""

from __future__ import annotations

import hashlib
import json
import logging

from django_delayq.exceptions import DelayQError
from django_delayq.recurring.definitions import Definition
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.recurring")

ALIVE_MS = 60_000  # a version no worker ran for this long is not current any more
FORGET_MS = 7 * 86_400_000  # versions no worker ran for a week are dropped


def settings_version(found: dict[str, Definition]) -> str:
    """A digest of the settings' schedules (their names and definitions)."""
    pairs = sorted((name, d.digest) for name, d in found.items() if d.source == "settings")
    text = json.dumps(pairs, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def is_current(store: Store, version: str, now_ms: int) -> bool:
    """Record that this worker runs ``version`` and say whether it is the current one (True
    when Redis cannot say: a worker alone with Redis down keeps its own schedules)."""
    try:
        sets = store.recurring.schedule_sets(version, now_ms)
    except DelayQError as exc:
        logger.warning("recurring schedules: cannot compare settings versions: %s", exc)
        return True
    stale = [name for name, (_, seen) in sets.items() if seen < now_ms - FORGET_MS]
    if stale:
        store.recurring.forget_schedule_sets(stale)
    newest = _newest(sets, now_ms) or version
    if newest != version:
        logger.debug("recurring schedules: settings version %s is current, not ours", newest)
    return newest == version


def current_version(store: Store, now_ms: int) -> str | None:
    """The version workers follow now, recording nothing (the admin asks it); None when no
    worker ran any in the last ALIVE_MS. Raises DelayQError when Redis cannot say."""
    return _newest(store.recurring.schedule_set_times(), now_ms)


def _newest(sets: dict[str, tuple[int, int]], now_ms: int) -> str | None:
    """The version first seen last among those a worker ran in the last ALIVE_MS."""
    alive = [(first, name) for name, (first, seen) in sets.items() if seen >= now_ms - ALIVE_MS]
    return max(alive)[1] if alive else None
