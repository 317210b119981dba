"""``python -m tests.reliability.skewed OFFSET <command> [args]``: run a manage.py command in
a process whose wall clock is off by OFFSET seconds (``time.time``, ``time.time_ns`` and
``django.utils.timezone.now``), to show that django-delayq runs jobs on Redis's clock.
Other scripts skew their own process with :func:`skew` (before importing django_delayq)."""

from __future__ import annotations

import sys
import time
from datetime import timedelta


def skew(offset: float) -> None:
    """This process's wall clock off by ``offset`` seconds from now on."""
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset
    time.time_ns = lambda: real_time_ns() + int(offset * 1e9)

    from django.utils import timezone

    real_now = timezone.now
    timezone.now = lambda: real_now() + timedelta(seconds=offset)


def main() -> None:
    skew(float(sys.argv[1]))

    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[2:]])


if __name__ == "__main__":
    main()
