"""Producer processes of scenarios 30-32 (tests/reliability/test_outbox_promises.py). They
talk to the test through lists in the runs Redis, ``promise:<tag>:<name>:<what>``:

- ``race <tag> <name> <key> <delay>``: push the runs server's time (``before``); in one
  transaction, push this connection's backend pid (``pid``), schedule ``whoami(tag, name)``
  with ``key=<key>, on_commit=True, delay=<delay>``, push the returned id (``scheduled``),
  wait for ``go``, commit, push ``committed`` (a commit hook registered before the job's),
  let the job's commit hook relay, exit 0.
- ``locked <tag> <count>``: in one transaction, schedule ``count`` jobs of ``mark`` with
  ``on_commit=True``; a commit hook registered before theirs pushes ``committed``; the
  jobs' hooks relay; exit 0. The test gives this process a ``lock_timeout`` and makes its
  DELETEs wait.
- ``skewed <tag> <offset> <count>``: this process's clock off by ``offset`` seconds
  (skewed.skew); schedule ``count`` jobs of ``stamp`` each way (on_commit within the
  horizon, on_commit beyond it, plain beyond it), pushing to ``due`` "<value> <earliest
  due on the runs server's clock>" for each: the runs server's time just before the call
  (before the transaction, for a call inside one) plus its delay; exit 0.

Usage: ``python -m tests.reliability.promise_producer <mode> <tag> ...``, with the
environment of a worker (tests.reliability.settings, DELAYQ_DATABASE, DELAYQ_HORIZON).
"""

from __future__ import annotations

import sys
import time

if __name__ == "__main__" and sys.argv[1] == "skewed":
    from tests.reliability.skewed import skew

    skew(float(sys.argv[3]))  # before anything reads the clock

import django

django.setup()

from django.db import connection, transaction  # noqa: E402

from tests.reliability.tasks import mark, stamp, whoami  # noqa: E402
from tests.testapp.tasks import runs_client  # noqa: E402

WAIT = 60  # seconds a producer waits for the test's go-ahead


def wait_for(key: str) -> bool:
    """Pop from the runs Redis list ``key`` within WAIT seconds (1-s BLPOPs: the client's
    socket timeout is shorter than WAIT); False if nothing came."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if runs_client().blpop([key], timeout=1) is not None:
            return True
    return False


def now_on_runs_server() -> float:
    seconds, micros = runs_client().time()
    return seconds + micros / 1e6


def race(tag: str, name: str, key: str, delay: float) -> int:
    client = runs_client()
    signal = f"promise:{tag}:{name}"
    client.rpush(f"{signal}:before", repr(now_on_runs_server()))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            client.rpush(f"{signal}:pid", cursor.fetchone()[0])
        transaction.on_commit(lambda: client.rpush(f"{signal}:committed", 1))  # runs first
        job = whoami.schedule(tag, name, key=key, delay=delay, on_commit=True)
        client.rpush(f"{signal}:scheduled", job.id)
        if not wait_for(f"{signal}:go"):
            print("no go from the test", flush=True)
            return 2
    return 0


def locked(tag: str, count: int) -> int:
    client = runs_client()
    signal = f"promise:{tag}:producer"
    with transaction.atomic():
        transaction.on_commit(lambda: client.rpush(f"{signal}:committed", 1))  # runs first
        jobs = [mark.schedule(tag, str(i), on_commit=True) for i in range(count)]
    print(" ".join(job.id for job in jobs), flush=True)
    return 0


def skewed(tag: str, count: int) -> int:
    client = runs_client()
    due = f"promise:{tag}:due"

    def one(value: str, delay: float, on_commit: bool, began: float | None = None) -> None:
        before = now_on_runs_server() if began is None else began
        stamp.schedule(tag, value, delay=delay, on_commit=on_commit)
        client.rpush(due, f"{value} {before + delay:.6f}")

    with transaction.atomic():
        began = now_on_runs_server()  # whatever instant the database takes as "now" in it
        for i in range(count):
            one(f"near{i}", 2.0 + 0.5 * i, True, began)  # within the horizon: the fast path
            one(f"far-on-commit{i}", 6.0 + 0.5 * i, True, began)  # beyond it: a row
    for i in range(count):
        one(f"far{i}", 6.0 + 0.5 * i, False)  # no transaction, beyond the horizon: a row
    return 0


def main() -> int:
    mode, tag, *rest = sys.argv[1:]
    if mode == "race":
        return race(tag, rest[0], rest[1], float(rest[2]))
    if mode == "locked":
        return locked(tag, int(rest[0]))
    if mode == "skewed":
        return skewed(tag, int(rest[1]))
    raise SystemExit(f"unknown mode {mode!r}: race, locked or skewed")


if __name__ == "__main__":
    sys.exit(main())
