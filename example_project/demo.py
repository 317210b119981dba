"""Run the demo shop: web server + worker + a few orders, until Ctrl-C.

    python example_project/demo.py [--port 8000] [--autocancel 30] [--smoke]

Redis: $REDIS_URL if set (it must answer); else 127.0.0.1:6379 if a Redis answers there;
else an embedded Redis-protocol server (fakeredis, with Lua) is started inside this
process, and the output says so loudly. It holds jobs in memory only, for the demo.
--smoke: wait until the demo's unpaid order is auto-cancelled and the paid one is kept,
then stop everything and exit 0 (1 if that did not happen in time). Used by the tests.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BANNER = "!" * 78


def log(message: str) -> None:
    print(f"demo: {message}", flush=True)


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.exceptions.RedisError:
        return False


def start_embedded_redis() -> str:
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    # Handler threads must not keep the interpreter alive: at exit, this process's own
    # pooled connections are still open, so a non-daemon handler blocked reading one
    # would make Python wait for it forever (the demo then hangs after printing its result).
    server.daemon_threads = True
    server.block_on_close = False
    threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True).start()
    url = f"redis://127.0.0.1:{server.server_address[1]}/0"
    print(
        f"{BANNER}\n"
        f"demo: NO REDIS FOUND (no REDIS_URL, nothing on 127.0.0.1:6379), or --embedded-redis.\n"
        f"demo: Started an EMBEDDED Redis-protocol server (fakeredis) at {url}.\n"
        f"demo: It lives in this process and keeps jobs in memory only: fine for the demo,\n"
        f"demo: never for production (production settings never fall back like this).\n"
        f"{BANNER}",
        flush=True,
    )
    return url


def choose_redis(force_embedded: bool = False) -> str:
    if force_embedded:
        return start_embedded_redis()
    url = os.environ.get("REDIS_URL")
    if url:
        if not redis_answers(url):
            sys.exit(f"demo: REDIS_URL={url} does not answer")
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


def manage(*args: str, env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HERE / "manage.py"), *args], cwd=HERE, env=env, **kwargs
    )


def setup_django(env: dict) -> None:
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    import django

    django.setup()


def create_admin() -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(9)
    user, _ = get_user_model().objects.get_or_create(
        username="demo", defaults={"is_staff": True, "is_superuser": True}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return "demo", password


def place_demo_orders(autocancel: float) -> dict:
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone
    from shop.models import Order
    from shop.tasks import cancel_unpaid_order, send_delivery_reminder, sync_to_warehouse

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
    delivered = place("Grinder (delivered)")
    cancel(key=delivered.autocancel_key)
    Order.objects.filter(pk=delivered.pk).update(
        status=Order.Status.DELIVERED, paid_at=timezone.now(), delivered_at=timezone.now()
    )
    send_delivery_reminder.schedule(
        delivered.pk, delay=timedelta(days=7), key=f"order:{delivered.pk}:reminder"
    )
    sync_to_warehouse.schedule(paid.pk)  # fails twice, then succeeds: retries in the admin
    sync_to_warehouse.schedule(unpaid.pk, failures=99, max_retries=2)  # ends in dead-letter
    return {"unpaid": unpaid.pk, "paid": paid.pk, "delivered": delivered.pk}


def wait_for_outcome(orders: dict, timeout: float) -> bool:
    from shop.models import Order

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        unpaid = Order.objects.get(pk=orders["unpaid"])
        paid = Order.objects.get(pk=orders["paid"])
        if unpaid.status == Order.Status.CANCELLED and paid.synced_at is not None:
            ok = paid.status == Order.Status.PAID
            log(
                f"order #{unpaid.pk} was auto-cancelled; paid order #{paid.pk} is "
                f"{paid.status} (synced after {paid.sync_attempts} attempts)"
            )
            return ok
        time.sleep(0.2)
    log("timed out waiting for the auto-cancel")
    return False


def main() -> int:
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
        "--embedded-redis",
        action="store_true",
        help="use the embedded server even if a Redis answers",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="exit once the auto-cancel happened (for tests)"
    )
    args = parser.parse_args()

    redis_url = choose_redis(args.embedded_redis)
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": os.environ.get("DATABASE_URL", f"sqlite:///{HERE / 'db.sqlite3'}"),
        "ORDER_AUTOCANCEL_SECONDS": str(args.autocancel),
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
    username, password = create_admin()
    port = free_port(args.port)
    children = [
        manage("runserver", f"127.0.0.1:{port}", "--noreload", env=env),
        manage("delayq_worker", "--queues", "default,emails", "--concurrency", "4", env=env),
    ]

    def stop(*_: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=35)
            except subprocess.TimeoutExpired:
                child.kill()

    try:
        orders = place_demo_orders(args.autocancel)
        base = f"http://127.0.0.1:{port}"
        print(
            f"\n  Shop:          {base}/\n"
            f"  Delayed jobs:  {base}/admin/django_delayq/job/\n"
            f"  Admin login:   {username} / {password}\n\n"
            f"  Order #{orders['unpaid']} is unpaid: it is auto-cancelled in "
            f"{args.autocancel:g} s.\n"
            f"  Order #{orders['paid']} was paid: its auto-cancel job was cancelled.\n"
            f"  A warehouse sync fails twice then succeeds; another ends in the dead-letter set.\n"
            f"  Ctrl-C stops everything.\n",
            flush=True,
        )
        if args.smoke:
            return 0 if wait_for_outcome(orders, timeout=args.autocancel + 60) else 1
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        log("a process exited; stopping")
        return 1
    except KeyboardInterrupt:
        log("Ctrl-C: stopping the web server and the worker")
        return 0
    finally:
        stop()


if __name__ == "__main__":
    sys.exit(main())
