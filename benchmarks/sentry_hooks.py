"""What the Sentry integration (django_delayq/monitoring/sentry.py) costs a worker, in process
and without Redis or a network: the job signals a worker sends per attempt, with the hooks
not connected, connected while Sentry is not initialised, and initialised with a transport
that drops every envelope; and one dead job's event, built and handed to that transport
(with the HGET of its batch on the Redis of tests/settings.py, 127.0.0.1 by default).

Usage (from the repository root, sentry-sdk installed: pip install -e '.[sentry]')::

    python benchmarks/sentry_hooks.py [--jobs 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    jobs = parser.parse_args().jobs
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django_delayq import signals
    from django_delayq.jobs.ids import new_job_id
    from django_delayq.jobs.job import DEAD, make_job
    from django_delayq.jobs.record import Fields

    job = make_job(new_job_id(), "default", DEAD, Fields("shop.tasks.f", [1], {}), 0, attempts=1)
    try:
        raise ValueError("kaputt")
    except ValueError as exc:
        error = exc

    def attempt() -> None:  # an ordinary job's start and success
        signals.send(signals.job_started, None, job=job)
        signals.send(signals.job_succeeded, None, job=job, result=None, duration=0.001)

    def death() -> None:  # its last failure, then its death
        signals.send(signals.job_failed, None, job=job, exception=error, will_retry=False)
        signals.send(signals.job_dead, None, job=job, error="ValueError: kaputt")

    def best(func, number: int) -> float:
        return min(timeit.repeat(func, number=number, repeat=5)) / number * 1e6

    rows = [("no hooks (sentry_sdk not imported)", best(attempt, jobs), None)]
    import sentry_sdk
    from sentry_sdk.transport import Transport

    from django_delayq.monitoring import sentry

    sentry.connect()
    rows.append(("hooks, Sentry not initialised", best(attempt, jobs), best(death, 1000)))

    class Drop(Transport):
        def capture_envelope(self, envelope) -> None:
            pass

    sentry_sdk.init(transport=Drop(), default_integrations=False)
    rows.append(("hooks, Sentry initialised", best(attempt, jobs), best(death, 1000)))
    print(f"{'':36} {'per attempt (µs)':>17} {'per dead job (µs)':>18}")
    for name, per_attempt, per_death in rows:
        shown = f"{per_death:18.1f}" if per_death is not None else f"{'-':>18}"
        print(f"{name:36} {per_attempt:17.2f} {shown}")


if __name__ == "__main__":
    main()
