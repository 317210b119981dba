"""Settings of the worker processes the reliability suite starts (and a Django app, so
workers import ``tests/reliability/tasks.py``).

Everything comes from the environment, on top of ``tests.settings``:
``DELAYQ_REDIS_URL`` (+ ``DELAYQ_CLUSTER=1``), ``DELAYQ_SENTINELS`` ("host:port,...")
with ``DELAYQ_SENTINEL_SERVICE``, ``DELAYQ_MAX_RETRIES``, ``DELAYQ_MAX_SLEEP``.
``DELAYQ_DATABASE`` (a JSON DATABASES entry: the only database, no routers) and
``DELAYQ_HORIZON`` for the outbox scenarios. ``DELAYQ_TASKS_QUEUES`` (a JSON list) makes
DelayQBackend the ``django.tasks`` backend with those QUEUES, and
``DELAYQ_TASKS_MAX_RETRIES`` its OPTIONS["MAX_RETRIES"]. ``DELAYQ_QUEUES`` (JSON) is
``DELAYQ["QUEUES"]``.
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import CACHES, DELAYQ, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.reliability"]
CACHES = dict(CACHES)
DELAYQ = dict(DELAYQ)

if os.environ.get("DELAYQ_REDIS_URL"):
    DELAYQ["REDIS_URL"] = os.environ["DELAYQ_REDIS_URL"]
    DELAYQ["CLUSTER"] = os.environ.get("DELAYQ_CLUSTER") == "1"

if os.environ.get("DELAYQ_SENTINELS"):
    # django-redis's Sentinel client, as docs/howto/cluster.rst documents it.
    CACHES["sentinel"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{os.environ.get('DELAYQ_SENTINEL_SERVICE', 'mymaster')}/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [
                (host, int(port))
                for host, port in (s.split(":") for s in os.environ["DELAYQ_SENTINELS"].split(","))
            ],
        },
    }
    DELAYQ["CACHE"] = "sentinel"

if os.environ.get("DELAYQ_MAX_RETRIES"):
    DELAYQ["MAX_RETRIES"] = int(os.environ["DELAYQ_MAX_RETRIES"])
if os.environ.get("DELAYQ_MAX_SLEEP"):
    DELAYQ["MAX_SLEEP"] = float(os.environ["DELAYQ_MAX_SLEEP"])

if os.environ.get("DELAYQ_TASKS_QUEUES"):
    TASKS = {
        "default": {
            "BACKEND": "django_delayq.backends.DelayQBackend",
            "QUEUES": json.loads(os.environ["DELAYQ_TASKS_QUEUES"]),
            "OPTIONS": {"MAX_RETRIES": int(os.environ.get("DELAYQ_TASKS_MAX_RETRIES", "0"))},
        }
    }

if os.environ.get("DELAYQ_DATABASE"):
    DATABASES = {"default": json.loads(os.environ["DELAYQ_DATABASE"])}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
        # MariaDB through PyMySQL (pure Python, from PyPI), standing in for mysqlclient.
        import pymysql

        pymysql.version_info = (2, 2, 1, "final", 0)  # the mysqlclient Django asks for
        pymysql.install_as_MySQLdb()
    DATABASE_ROUTERS: list = []
if os.environ.get("DELAYQ_HORIZON"):
    DELAYQ["HORIZON"] = float(os.environ["DELAYQ_HORIZON"])
# Recurring schedules (tests/reliability/test_recurring.py): the SCHEDULES setting as JSON,
# and the reconcile pass's interval.
if os.environ.get("DELAYQ_QUEUES"):
    DELAYQ["QUEUES"] = json.loads(os.environ["DELAYQ_QUEUES"])
if os.environ.get("DELAYQ_SCHEDULES"):
    DELAYQ["SCHEDULES"] = json.loads(os.environ["DELAYQ_SCHEDULES"])
if os.environ.get("DELAYQ_RECONCILE_INTERVAL"):
    DELAYQ["RECONCILE_INTERVAL"] = float(os.environ["DELAYQ_RECONCILE_INTERVAL"])
