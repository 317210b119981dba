"""Epoch seconds as aware datetimes, for values read from Redis."""

from __future__ import annotations

from datetime import UTC, datetime


def to_datetime(epoch: float | None) -> datetime | None:
    """An aware UTC datetime, or None for None and for what no datetime can hold (a
    garbage score read from Redis must not break a page)."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
