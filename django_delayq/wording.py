"""Words for log lines and messages: counts with the right plural, articles."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``0 jobs`` (``plural`` for irregular words)."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def article(word: str) -> str:
    """``word`` with its indefinite article: ``an int``, ``a list``."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` closest to ``name`` (a typo's likely meaning), None when none
    is close: the "did you mean" of every error that names an unknown name."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None
