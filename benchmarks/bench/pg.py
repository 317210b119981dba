"""A throw-away PostgreSQL database for the ORM workload, and its baseline loop.

``postgres_database()`` creates ``delayq_bench_<random>`` on 127.0.0.1:5432 as user
postgres and drops it on the way out, whatever happened (``DROP ... WITH (FORCE)``
ends a worker's leftover connection). Run as a module, this file is the baseline: a
plain loop doing the ORM query of ``orm_query`` the same number of times, in a fresh
process of the same interpreter with the same settings as the worker::

    DELAYQ_BENCH_PG_DB=... python -m benchmarks.bench.pg 5000
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HOST, PORT, USER = "127.0.0.1", 5432, "postgres"


class PostgresUnavailable(RuntimeError):
    pass


def _connect() -> Any:
    """An autocommit connection to the ``postgres`` database (psycopg 3, else psycopg2)."""
    try:
        import psycopg
    except ImportError:
        try:
            import psycopg2
        except ImportError:
            raise PostgresUnavailable(
                f"neither psycopg nor psycopg2 is installed in {sys.executable}: "
                "pip install 'psycopg[binary]' (run.py --python ... installs it)"
            ) from None
        try:
            conn = psycopg2.connect(host=HOST, port=PORT, user=USER, dbname="postgres")
        except psycopg2.Error as exc:
            raise PostgresUnavailable(
                f"cannot connect to PostgreSQL at {HOST}:{PORT} as {USER}: {exc}"
            ) from None
        conn.autocommit = True
        return conn
    try:
        return psycopg.connect(host=HOST, port=PORT, user=USER, dbname="postgres", autocommit=True)
    except psycopg.Error as exc:
        raise PostgresUnavailable(
            f"cannot connect to PostgreSQL at {HOST}:{PORT} as {USER}: {exc}"
        ) from None


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """The name of a new, empty database; dropped on exit, even on error or Ctrl-C."""
    name = f"delayq_bench_{secrets.token_hex(4)}"
    conn = _connect()
    try:
        with conn.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        try:
            yield name
        finally:
            with conn.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        conn.close()


def _python(args: list[str], root: Path, env: dict[str, str], what: str) -> str:
    """Run ``python <args>`` in the worker's interpreter; its stdout, or RuntimeError."""
    done = subprocess.run(
        [sys.executable, *args], cwd=root, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def migrate(root: Path, env: dict[str, str]) -> None:
    """``manage.py migrate`` of the benchmark settings, in the worker's interpreter."""
    _python(["-m", "django", "migrate", "--noinput", "-v", "0"], root, env, "migrate")


def baseline(root: Path, env: dict[str, str], n: int) -> dict[str, float]:
    """Run this module in a fresh process: {"seconds", "cpu"} of n ORM queries."""
    out = _python(["-m", "benchmarks.bench.pg", str(n)], root, env, "the ORM baseline loop")
    return json.loads(out.strip().splitlines()[-1])


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    n = int(sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    from benchmarks.models import BenchItem
    from benchmarks.tasks import ROWS

    cpu = _cpu()
    started = time.perf_counter()
    for i in range(n):  # the query of benchmarks.tasks.orm_query
        BenchItem.objects.filter(pk=i % ROWS + 1).first()
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "cpu": _cpu() - cpu}))


if __name__ == "__main__":
    main()
