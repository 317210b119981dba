"""The worker: ``python manage.py delayq_worker`` builds a
:class:`~django_delayq.worker.dispatch.Worker` and runs it.

- ``dispatch``: the Worker: start, the dispatch loop, shutdown; ``parts``: what it is made
  of (one frozen ``Parts``); ``duties``: the one loop, backoff and failure log of its
  background duties (heartbeat, recovery, presence, the outbox relay, the recurring passes).
- ``claiming``: its round trips (deliver results, claim due jobs); ``prefetch``: how many to
  claim; ``holdings``: what it holds (leases, results not yet delivered), one owner, one lock.
- ``runners`` and ``execution``: the runner threads and one attempt of a job; ``starts``: the
  start marks that count an attempt; ``delivery``: results on their way to Redis.
- ``maintenance``: heartbeats, recovery of expired leases, handing jobs back; ``presence``: the
  roster entry.
- ``supervisor`` and ``supervised``: ``--processes N``, the supervisor and its children's side.
- ``upgrade``: refuse or convert the 0.1 key layout.
"""

from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    """``current_job`` at its 0.3 path, with a DeprecationWarning naming the new one."""
    if name == "current_job":
        warnings.warn(
            "django_delayq.worker.current_job is deprecated: import it from django_delayq "
            "(from django_delayq import current_job)",
            DeprecationWarning,
            stacklevel=2,
        )
        from django_delayq.worker.execution import current_job

        return current_job
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
