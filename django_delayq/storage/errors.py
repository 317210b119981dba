"""Redis's errors, read: which error replies mean Redis did not run a command, and how a
redis-py exception becomes django-delayq's (one place for every call of the storage layer).

- Redis did not run the command and it may succeed when sent again (:data:`NOT_RUN`):
  ``NOSCRIPT``, ``BUSY``, ``LOADING``, ``READONLY``, ``MASTERDOWN``, ``TRYAGAIN``,
  ``CLUSTERDOWN``, ``MOVED``, ``ASK``, ``NOREPLICAS`` or ``MISCONF``.
- A broken connection (:data:`BROKEN`): Redis may have run what was written before it broke.
- Any other error reply (``WRONGTYPE``, ``OOM``, a script's own ``DELAYQ_...`` code) is
  final: the scripts check before they write, so such a command changed nothing.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import redis

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConnectionError as DelayQConnectionError
from django_delayq.exceptions import DelayQError

# Error replies of commands Redis did not run and that may succeed when sent again.
NOT_RUN = (
    "BUSY",
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
    "MISCONF",
    "NOSCRIPT",
)
# Answers a refreshed map of the cluster's slots may cure.
SLOTS_MOVED = ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")
BROKEN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)

# redis-py strips the code from the error replies it maps to a class of its own.
_CODES: tuple[tuple[type, str], ...] = (
    (redis.exceptions.NoScriptError, "NOSCRIPT"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.MovedError, "MOVED"),
    (redis.exceptions.AskError, "ASK"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
)


def code(exc: BaseException) -> str:
    """The error code of a Redis error reply ("BUSY", "NOSCRIPT"...), or ""."""
    for kind, name in _CODES:
        if isinstance(exc, kind):
            return name
    status = getattr(exc, "status_code", None)
    if isinstance(status, str):
        return status.upper()
    text = str(exc)
    return text.split(" ", 1)[0].upper() if text else ""


def translate(exc: BaseException) -> Exception:
    """A redis-py exception as django-delayq's (one place for every call)."""
    if isinstance(exc, DelayQError):
        return exc
    if isinstance(exc, redis.exceptions.ResponseError):
        text = str(exc)
        if "DELAYQ_" in text:
            refused = text.split("DELAYQ_", 1)[1]
            return DelayQError(f"django-delayq script refused the operation: {refused}")
        if code(exc) == "OOM":
            return DelayQError(
                f"Redis refused the write: it is out of memory ({text}); raise maxmemory "
                "and keep maxmemory-policy noeviction"
            )
        return DelayQError(f"Redis answered an error: {text}")
    if isinstance(exc, BROKEN):
        return DelayQConnectionError(
            f"Redis is unreachable or the connection broke: {sentence(exc)} {what_to_check()}"
        )
    return DelayQError(f"unexpected error talking to Redis: {exc!r}")


def unavailable(exc: BaseException) -> Exception:
    """The last error of an op whose budget ran out: one Redis answers while it cannot take
    commands (a failover's READONLY, LOADING, a NOSCRIPT from a new master, BUSY...) is a
    ConnectionError like a refused connection, the op not run; anything else as translate()."""
    if code(exc) in NOT_RUN:
        return DelayQConnectionError(
            f"Redis did not take the command within its time budget (last answer: {exc}); "
            f"it may be failing over, loading or busy. {what_to_check()}"
        )
    return translate(exc)


def sentence(exc: BaseException) -> str:
    """``exc``'s text ending with one period (redis-py's often has one: "Connection
    refused.")."""
    return str(exc).rstrip().rstrip(".") + "."


def what_to_check() -> str:
    """Which Redis the settings point at (a URL's password left out) and what to check: a
    ConnectionError that reaches a web page must say where to look."""
    url = delayq_settings.REDIS_URL
    if url:
        where = f"DELAYQ['REDIS_URL'] is {without_password(str(url))!r}"
    else:
        from django.conf import settings

        alias = delayq_settings.CACHE
        caches = getattr(settings, "CACHES", {})
        location = caches.get(alias, {}).get("LOCATION") if isinstance(caches, dict) else None
        shown = f" (LOCATION {without_password(location)!r})" if isinstance(location, str) else ""
        where = f"django-delayq uses the Redis of the cache {alias!r}{shown} (DELAYQ['CACHE'])"
    return (
        f"{where}: check that this Redis runs, that this host can reach its host and port "
        "(firewall, DNS, TLS: rediss://) and that its password and database are right"
    )


def without_password(url: str) -> str:
    """``url`` with its password (in the user part or a ``password=`` query) as ``***``."""
    netloc = urlsplit(url).netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        if ":" in user:
            url = url.replace(netloc, f"{user.split(':', 1)[0]}:***@{host}", 1)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url)
