"""Whether a claimed occurrence runs: the ``missed`` policies, decided when a worker first
claims it (claims.py leaves retries and redeliveries alone: they started once already).

A fire time is *late* while it is at most LATE_GRACE_MS old when its occurrence is claimed
(on Redis's clock), and *missed* once older, whatever kept it waiting: every worker down,
Redis down, or a backlog in its queue. A late occurrence always runs. A missed one:

- ``"all"``: runs, unless more than MISSED_ALL later fire times are missed too (only the
  latest MISSED_ALL run);
- ``"skip"``: does not run; its successor is the first fire time that is not missed;
- ``"once"``: runs only if it is the latest fire time up to now; otherwise it does not run
  and its successor is the first late fire time, else the latest missed one (which then runs,
  being the latest).

So after an outage, whatever occurrences were stored before it, ``"skip"`` runs none of the
missed fire times, ``"once"`` exactly one (the latest, unless a late one runs) and ``"all"``
each of them (the latest 100). The reconcile pass (reconcile.py) creates occurrences by the
same rules; this module decides the ones that were already stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_delayq.recurring.definitions import Definition
from django_delayq.recurring.fire_times import fire_after, fires_between

LATE_GRACE_MS = 30_000  # a fire time this recent that never started is late, not missed
MISSED_ALL = 100  # most missed occurrences "all" runs


@dataclass(frozen=True)
class Verdict:
    skip: str | None  # why the occurrence does not run; None: it runs
    after_ms: int  # its successor is the first fire time after this

    @property
    def runs(self) -> bool:
        return self.skip is None


def verdict(definition: Definition, fire_ms: int, now_ms: int) -> Verdict:
    """What happens to the occurrence of ``definition`` at ``fire_ms``, claimed at ``now_ms``."""
    edge = now_ms - LATE_GRACE_MS
    if fire_ms > edge:
        return Verdict(None, fire_ms)
    policy = definition.missed
    if policy == "all":
        later = fires_between(definition, fire_ms, edge, MISSED_ALL)
        if len(later) < MISSED_ALL:
            return Verdict(None, fire_ms)
        return Verdict(f"more than {MISSED_ALL} later fire times were missed too", later[0] - 1)
    if policy == "skip":
        return Verdict("missed, and its schedule's policy is 'skip'", edge)
    latest = fires_between(definition, fire_ms, now_ms, 1)
    if not latest:
        return Verdict(None, fire_ms)
    why = "missed, and a later fire time replaces it (its schedule's policy is 'once')"
    if fire_after(definition, edge) <= now_ms:
        return Verdict(why, edge)  # late ones run: the first of them is next
    return Verdict(why, latest[0] - 1)  # the latest missed one is next, and runs
