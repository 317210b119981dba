import os

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

SECRET_KEY = "django-delayq-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "django.contrib.staticfiles",
    "django_delayq",
    "tests.testapp",
]
try:  # Django 5.2 + the django-tasks backport: its app registers the TASKS system checks
    import django.tasks  # noqa: F401
except ImportError:
    try:
        import django_tasks  # noqa: F401
    except ImportError:
        pass
    else:
        INSTALLED_APPS.append("django_tasks")
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
# Every admin test makes a user (pytest-django's admin_user, staff() of test_admin.py): with
# Django's default PBKDF2 each password hash costs 0.3-2.5 s of CPU (1.2 million iterations),
# 75 s of the suite's setups on this machine. No test is about password hashing.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
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
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DELAYQ_TEST_DB", ":memory:"),
        "TEST": {"NAME": os.environ.get("DELAYQ_TEST_DB")},
    }
}
# The real PostgreSQL (127.0.0.1:5432, user postgres, trust auth): the outbox's tests run on
# it as well as on SQLite (tests name it: databases=["default", "pg"]). Its test database is
# named per process, so two runs on one machine never share it.
DATABASES["pg"] = {
    "ENGINE": "django.db.backends.postgresql",
    "HOST": os.environ.get("DELAYQ_TEST_PG_HOST", "127.0.0.1"),
    "PORT": int(os.environ.get("DELAYQ_TEST_PG_PORT", "5432")),
    "USER": os.environ.get("DELAYQ_TEST_PG_USER", "postgres"),
    "NAME": "postgres",
    "TEST": {"NAME": os.environ.get("DELAYQ_TEST_PG_NAME", f"test_delayq_{os.getpid()}")},
}
# Read replicas of both, as Django's multi-db docs set them up for tests: the same database
# through another alias (TEST MIRROR). tests/test_multidb.py makes their connections read-only,
# as a hot standby's are, and routes reads to them with the docs' primary/replica router.
DATABASES["replica"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
DATABASES["pg_replica"] = {**DATABASES["pg"], "TEST": {"MIRROR": "pg"}}
DATABASE_ROUTERS = ["tests.routers.OutboxDatabases"]
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
    },
    "builtin": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
    },
    "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
}
# Subprocess workers started by tests get the test's prefix and timings through the env.
DELAYQ = {
    "PREFIX": os.environ.get("DELAYQ_PREFIX", "delayq-tests"),
    "VISIBILITY_TIMEOUT": float(os.environ.get("DELAYQ_VISIBILITY_TIMEOUT", 60)),
    "RETRY_BACKOFF": float(os.environ.get("DELAYQ_RETRY_BACKOFF", 15)),
    "SHUTDOWN_TIMEOUT": float(os.environ.get("DELAYQ_SHUTDOWN_TIMEOUT", 30)),
}
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
