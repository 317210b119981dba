"""The expire transition (lua/expire.lua): claimed jobs whose expiry (``schedule(...,
expires=...)``, record flag 'x') passed by the claim's clock end as "expired" without running.

The worker decides which (worker/expiry.py), from the records and the ``now`` a claim returns;
this module only builds the call. A plain job (no flag 'x') never reaches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django_delayq.storage.finished import Keep, keep_setting
from django_delayq.storage.milliseconds import now_arg
from django_delayq.storage.ops import Op
from django_delayq.storage.replies import parse_ints

if TYPE_CHECKING:
    from django_delayq.storage.store import Store

EXPIRED, GONE, NOT_HELD = 1, 0, -1  # expire.lua's answer per job


def expire_op(
    store: Store,
    queue: str,
    entries: Iterable[tuple[str, str, float | None]],
    *,
    keep: Keep | None = None,
    now: float | None = None,
) -> Op:
    """End ``entries`` (job id, lease token, due time in epoch s or None) as expired: one
    int per entry, :data:`EXPIRED`, :data:`GONE` (already ended: a re-sent call) or
    :data:`NOT_HELD` (no longer under that lease: nothing changed). May be re-sent."""
    argv: list = [now_arg(now), *(keep or keep_setting(queue))]
    for job_id, token, due in entries:
        argv += [job_id, token, "" if due is None else round(due * 1000)]
    return store.op("expire", queue, argv, parse_ints)
