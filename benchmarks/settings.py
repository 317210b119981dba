"""Minimal Django settings for the benchmarks and the worker processes they start.

Everything a user gets by default stays on: the django-redis cache connection, the
task registry, signals, and the worker's INFO logging (one line per job start and
finish). ``REDIS_URL`` and ``DELAYQ_BENCH_PREFIX`` come from the environment, so
``run.py`` and its ``delayq_worker`` subprocesses agree.

``DELAYQ_BENCH_PG_DB`` (set by run.py's ORM workload) switches the database to that
PostgreSQL database on 127.0.0.1:5432 (user postgres) with persistent connections, as a
production worker would run: ``CONN_MAX_AGE`` from ``DELAYQ_BENCH_CONN_MAX_AGE``
(default 600 s), Django's default ``CONN_HEALTH_CHECKS`` (off).

``DELAYQ_BENCH_SQLITE`` (bench/recurring_scale.py with ``DELAYQ_BENCH_RECURRING_DB=sqlite``)
makes the database that SQLite file, Django's defaults otherwise, so the driver and its
worker processes share it.

``DELAYQ_BENCH_SETTINGS_SCHEDULES=N`` (bench/recurring_scale.py) defines N schedules in
``DELAYQ["SCHEDULES"]``, ``cfg0`` ... each ``* * * * *`` running ``occurrence_probe``.

``DELAYQ_BENCH_KEEP_FINISHED=0`` (issue 28) keeps no finished job (``FINISHED_MAX_COUNT``
0; by default they are kept, as a user's are): ``run.py --only push`` with and without it
gives keeping's cost with worker processes.

``DELAYQ_BENCH_HISTORY=0`` (issue 28) keeps no history (``DELAYQ["HISTORY"]`` False; on by
default, as a user's): ``run.py --only push`` with and without it gives its cost with
worker processes.

``DELAYQ_BENCH_PARSER=python`` or ``hiredis`` (benchmarks/engine_cost.py) makes every redis-py
client of this process (the store's, through the cache, and ``redis_push``'s) read replies
with that parser whatever is installed (redis-py picks hiredis when it can import it), so
one run measures both with hiredis installed.

``DELAYQ_BENCH_OTEL=1`` (issue 28) configures an OpenTelemetry SDK tracer provider in this
process and its workers, its spans batched (``BatchSpanProcessor``, as in production) to an
exporter that drops them: the cost of tracing on (every span made, linked, ended and
handed to the exporter), without a collector's network. Needs ``opentelemetry-sdk``::

    DELAYQ_BENCH_OTEL=1 python benchmarks/run.py --only push --runs 3
"""

import os

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")

SECRET_KEY = "django-delayq-benchmarks"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_delayq", "benchmarks"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
if os.environ.get("DELAYQ_BENCH_PG_DB"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["DELAYQ_BENCH_PG_DB"],
            "HOST": os.environ.get("DELAYQ_BENCH_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("DELAYQ_BENCH_PG_PORT", "5432"),
            "USER": os.environ.get("DELAYQ_BENCH_PG_USER", "postgres"),
            "CONN_MAX_AGE": int(os.environ.get("DELAYQ_BENCH_CONN_MAX_AGE", "600")),
            "CONN_HEALTH_CHECKS": False,
        }
    }
elif os.environ.get("DELAYQ_BENCH_SQLITE"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["DELAYQ_BENCH_SQLITE"],
        }
    }
PARSERS = {
    "python": "redis._parsers.resp2._RESP2Parser",
    "hiredis": "redis._parsers.hiredis._HiredisParser",
}
BENCH_PARSER_CLASS = PARSERS.get(os.environ.get("DELAYQ_BENCH_PARSER", ""))
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL}}
if BENCH_PARSER_CLASS:
    CACHES["default"]["OPTIONS"] = {"PARSER_CLASS": BENCH_PARSER_CLASS}
DELAYQ = {"CACHE": "default", "PREFIX": os.environ.get("DELAYQ_BENCH_PREFIX", "delayq-bench")}
if os.environ.get("DELAYQ_BENCH_QUEUE_LIMIT"):  # issue 20: the queue-limited drain
    DELAYQ["QUEUES"] = {"default": {"concurrency": int(os.environ["DELAYQ_BENCH_QUEUE_LIMIT"])}}
if os.environ.get("DELAYQ_BENCH_SETTINGS_SCHEDULES"):  # issue 25: N settings schedules
    DELAYQ["SCHEDULES"] = {
        f"cfg{i}": {"task": "benchmarks.tasks.occurrence_probe", "cron": "* * * * *"}
        for i in range(int(os.environ["DELAYQ_BENCH_SETTINGS_SCHEDULES"]))
    }
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

if os.environ.get("DELAYQ_BENCH_KEEP_FINISHED") == "0":  # issue 28: finished jobs not kept
    DELAYQ["FINISHED_MAX_COUNT"] = 0
if os.environ.get("DELAYQ_BENCH_HISTORY") == "0":  # issue 28: no history kept
    DELAYQ["HISTORY"] = False
if os.environ.get("DELAYQ_BENCH_OTEL") == "1":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class _Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    _provider = TracerProvider()
    _provider.add_span_processor(BatchSpanProcessor(_Dropped()))
    trace.set_tracer_provider(_provider)
