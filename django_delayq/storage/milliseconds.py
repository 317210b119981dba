"""Seconds and milliseconds: the store speaks epoch seconds (floats); scripts and
sorted-set scores use integer epoch milliseconds (lua/include/base.lua says why). These convert,
one way and back."""

from __future__ import annotations

import math
from typing import Any


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds (what scripts take). What no time can be (inf, nan)
    becomes a number beyond every script's range, which they refuse (DELAYQ_BAD_DUE)."""
    if not math.isfinite(seconds):
        return -(10**16) if seconds < 0 else 10**16
    return round(seconds * 1000)


def now_arg(now: float | None) -> str | int:
    """A script's ``now`` argument: "" lets the script read Redis's clock (TIME)."""
    return "" if now is None else ms(now)


def seconds(score: Any) -> float | None:
    """A score read from Redis (integer epoch milliseconds) as epoch seconds; garbage (a
    score written by someone else) stays a number or None, never an exception."""
    try:
        return None if score in (None, False, b"", "") else float(score) / 1000
    except (TypeError, ValueError):
        return None
