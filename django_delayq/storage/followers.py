"""Followers left waiting (lua/promote_followers.lua): a follower (``unique_until="end"``,
lua/include/followers.lua) is promoted by the end of its leader, but a 0.7.0 worker's ack,
failure or recovery of the leader (a rolling deploy) promotes nothing. The recovery duty
(worker/maintenance.py) scans each queue's ``keys`` hash for follower marks, a step per
pass from the cursor it keeps, and promotes those whose leader has ended. A queue without
keys pays one call that finds an empty hash; one without followers, an HSCAN step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_delayq.storage.milliseconds import now_arg
from django_delayq.storage.ops import Op
from django_delayq.storage.replies import text

if TYPE_CHECKING:
    from django_delayq.storage.calls import Calls

SCAN_COUNT = 500  # fields of `keys` one step looks at (HSCAN's COUNT hint)


def parse_promoted(reply: list) -> tuple[int, list[str]]:
    return int(reply[0]), [text(fid) for fid in reply[1:]]


class FollowerStore:
    """A Store's followers left waiting (``store.followers``)."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def promote_op(
        self, queue: str, cursor: int = 0, count: int = SCAN_COUNT, now: float | None = None
    ) -> Op:
        """One step of the scan of ``queue``'s ``keys`` from ``cursor``: (the next cursor, 0
        when the scan went round; the ids of the followers it made pending). May be
        re-sent: a re-send promotes nothing twice."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive integer, not {count!r}")
        argv = (now_arg(now), int(cursor), count)
        return self._store.op("promote_followers", queue, argv, parse_promoted)

    def promote(
        self, queue: str, cursor: int = 0, count: int = SCAN_COUNT, now: float | None = None
    ) -> tuple[int, list[str]]:
        """:meth:`promote_op`, sent."""
        return self._store.call(self.promote_op(queue, cursor, count, now))
