"""Words for log lines and messages: counts with the right plural, articles."""

from __future__ import annotations


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``0 jobs`` (``plural`` for irregular words)."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def article(word: str) -> str:
    """``word`` with its indefinite article: ``an int``, ``a list``."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
