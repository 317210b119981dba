"""Settings of the django-delayq demo shop.

Everything that differs between machines comes from the environment:

- ``REDIS_URL``: the Redis jobs live in (default ``redis://127.0.0.1:6379/0``). The demo
  runner (``./example_project/run``) starts an embedded Redis-protocol server when none
  answers and passes its URL here; these settings never fall back silently.
- ``DATABASE_URL``: ``sqlite:///path`` (the default, ``db.sqlite3`` here) or
  ``postgres://user@host:port/name``.
- ``ORDER_AUTOCANCEL_SECONDS``: how long an order may stay unpaid (default 1800).
- ``INVOICE_SECONDS``: how long the (pretend) invoice rendering task takes (default 8).
- ``DEMO_SECRET_KEY``, ``DEMO_DEBUG``.
"""

import os
from pathlib import Path
from urllib.parse import urlparse

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DEMO_SECRET_KEY", "demo-only-not-secret")
DEBUG = os.environ.get("DEMO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_delayq",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "demo_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "demo_site.wsgi.application"


def database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        # The worker (its outbox relay) and the web server write to one file: immediate
        # transactions wait for the lock instead of failing at once (delayq.W005).
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": parsed.path or ":memory:",
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    if parsed.scheme in ("postgres", "postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parsed.path.lstrip("/"),
            "USER": parsed.username or "",
            "PASSWORD": parsed.password or "",
            "HOST": parsed.hostname or "",
            "PORT": parsed.port or "",
        }
    raise ValueError(f"DATABASE_URL {url!r}: use sqlite:///path or postgres://user@host/name")


DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
    )
}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
    }
}
DELAYQ = {
    "CACHE": "default",
    "PREFIX": os.environ.get("DELAYQ_PREFIX", "delayq-demo"),
    "QUEUES": ["default", "emails"],
    # Short backoff so the flaky task's retries show in the admin within seconds.
    "RETRY_BACKOFF": 2,
    # Jobs due more than a day ahead (the 7-day delivery reminders) wait in the database,
    # not in Redis memory; the worker moves them into Redis a day before they are due.
    "HORIZON": 24 * 60 * 60,
    # Recurring jobs (docs/howto/recurring.rst): every night at 03:00 (Berlin time), cancel
    # the orders still unpaid after a day. Every worker keeps it going; it runs once a night.
    "SCHEDULES": {
        "nightly-unpaid-sweep": {
            "task": "shop.tasks.sweep_unpaid_orders",
            "cron": "0 3 * * *",
            "tz": "Europe/Berlin",
            "kwargs": {"older_than_hours": 24},
        },
    },
}
ORDER_AUTOCANCEL_SECONDS = float(os.environ.get("ORDER_AUTOCANCEL_SECONDS", 1800))
INVOICE_SECONDS = float(os.environ.get("INVOICE_SECONDS", 8))
DELIVERY_REMINDER_DAYS = 7

EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = "shop@example.com"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/admin/login/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "shop": {"handlers": ["console"], "level": "INFO"},
        "django_delayq": {"handlers": ["console"], "level": "INFO"},
    },
}
