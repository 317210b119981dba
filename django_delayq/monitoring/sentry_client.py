"""The Sentry SDK, when a process uses it (a leaf of sentry.py and sentry_crons.py)."""

from __future__ import annotations

import sys
from types import ModuleType


def sdk() -> ModuleType | None:
    """The ``sentry_sdk`` module when it is imported and its client is active, else None.
    Never imports it, so a process without Sentry never loads it."""
    module = sys.modules.get("sentry_sdk")
    if module is None:
        return None
    try:
        return module if module.get_client().is_active() else None
    except Exception:  # an SDK older than 2.0 (no get_client): the extra needs >= 2
        return None
