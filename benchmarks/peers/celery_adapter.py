"""Celery: a ``Celery`` app on the Redis broker with its defaults (JSON, no result
backend, prefetch multiplier 4, visibility timeout 1 h), ``apply_async(countdown=/eta=)``,
one call per job.

The worker is ``celery worker -P prefork -c 1 -l INFO``: the default pool with one child
process running tasks, and the main process that receives them. An ETA task is sent to
the ``celery`` list like any other; the main process takes it at once and keeps it in
memory until due (raising its prefetch limit for each one), while the Redis transport
keeps a copy in its ``unacked`` hash until the task is acknowledged. Celery's docs ask
for a visibility timeout longer than the longest ETA. (``-P solo`` is not used: its event
loop fires at most 10 due timers per iteration and then waits up to 1 s for I/O, so it
ran a backlog of due ETA tasks at about 20 a second.)
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from importlib.metadata import version

from celery import Celery

from benchmarks.peers.recorder import URL_ENV
from benchmarks.peers.recorder import record as _record

app = Celery("bench", broker=os.environ[URL_ENV])
app.conf.broker_connection_retry_on_startup = True  # the default; set to silence a warning

WORKER = ["celery", "-A", "benchmarks.peers.celery_adapter", "worker", "-P", "prefork", "-c", "1"]
WORKER += ["-l", "INFO"]
SETUP = "celery worker -P prefork -c 1 -l INFO (ETA tasks held in the main process until due)"


@app.task
def record(tag: str) -> None:
    _record(tag)


def versions() -> dict[str, str]:
    return {"system": version("celery"), "kombu": version("kombu")}


def schedule_in(tag: str, seconds: float) -> None:
    record.apply_async((tag,), countdown=seconds)


def schedule_at(tag: str, epoch: float) -> None:
    record.apply_async((tag,), eta=datetime.fromtimestamp(epoch, UTC))


def pending() -> int:
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        return client.llen("celery") + client.hlen("unacked")
