"""Settings: one ``DELAYQ`` dict, read on every access so ``override_settings`` works.

Every default lives in :data:`DEFAULTS`; docs/reference/settings.rst documents each one and
``checks.py`` validates them (``delayq.E0xx``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DAY = 24 * 60 * 60

DEFAULTS: dict[str, Any] = {
    # Where the Redis client comes from: a cache alias, unless REDIS_URL is set.
    "CACHE": "default",
    "REDIS_URL": None,
    # With REDIS_URL: connect with redis-py's RedisCluster instead of Redis.
    "CLUSTER": False,
    # First part of every key; keeps several projects apart in one Redis.
    "PREFIX": "delayq",
    # Queue used by tasks that name none, and the queues a worker runs by default.
    "DEFAULT_QUEUE": "default",
    "QUEUES": ["default"],
    # Seconds a claimed job may go without a heartbeat before it is recovered.
    "VISIBILITY_TIMEOUT": 60,
    # Retries after the first attempt; a task's own max_retries wins.
    "MAX_RETRIES": 5,
    # Base delay of the exponential backoff in seconds (0: retry at once, no jitter)
    # and its ceiling.
    "RETRY_BACKOFF": 15,
    "RETRY_BACKOFF_MAX": 6 * 60 * 60,
    # Dead-letter retention.
    "DEAD_MAX_AGE": 30 * DAY,
    "DEAD_MAX_COUNT": 10_000,
    # Jobs that succeeded or were cancelled stay visible (with their attempts) this many
    # seconds, at most this many per queue; 0 for either keeps none.
    "FINISHED_MAX_AGE": 60 * 60,
    "FINISHED_MAX_COUNT": 10_000,
    # Workers keep each queue's history (jobs done, failed, dead and lateness per minute,
    # 72 hours) for the dashboard; False: none is counted or written.
    "HISTORY": True,
    # Errors (with tracebacks) kept per job.
    "MAX_ERRORS_KEPT": 10,
    # Longest a worker sleeps without looking at Redis (seconds).
    "MAX_SLEEP": 5.0,
    # Seconds running jobs get to finish after SIGTERM/SIGINT.
    "SHUTDOWN_TIMEOUT": 30,
    # schedule() refuses task names no @task registered in this process, and queues outside
    # QUEUES when QUEUES is set; False for producers of tasks another code base defines.
    "CHECK_NAMES": True,
    # A bearer token that may read the metrics endpoint (django_delayq.urls) besides users
    # with the view_job permission; None: users only.
    "METRICS_TOKEN": None,
    # Seconds: a job due later than now + HORIZON waits as a row in the database (the outbox
    # table) instead of in Redis; workers move it into Redis when it comes within HORIZON.
    # None: every job goes to Redis (on_commit=True jobs still pass through the outbox).
    "HORIZON": None,
    # The database aliases that hold outbox rows (read, locked and relayed there, nowhere
    # else). None: the alias your routers' db_for_write() gives django_delayq.OutboxJob, or
    # without DATABASE_ROUTERS every database except TEST MIRROR ones. List every alias you
    # pass as schedule(..., on_commit="alias"); never a read replica.
    "OUTBOX_DATABASES": None,
    # Recurring schedules: name -> {"task": ..., "cron": "0 3 * * *" | "every": seconds, ...}
    # (docs/howto/recurring.rst), and seconds between two reconcile passes of a worker.
    "SCHEDULES": {},
    "RECONCILE_INTERVAL": 2.0,
    # Sentry, when sentry_sdk is initialised (monitoring/sentry.py, docs/howto/monitoring.rst):
    # which failures become events ("dead": a job's death only; "all": every failed attempt;
    # None: none), and the schedules whose occurrences check in to Sentry's cron monitors
    # (False; True: all; a list of names; a dict name -> monitor options).
    "SENTRY_FAILURES": "dead",
    "SENTRY_CRONS": False,
}


class DelayQSettings:
    """Attribute access to ``settings.DELAYQ`` merged over :data:`DEFAULTS`.

    Read on first use, never at import, and read again after Django's ``setting_changed``
    (``override_settings`` sends it): schedule() reads several settings a call, and Django's
    lazy settings object costs a few microseconds an attribute. The merged values become this
    object's attributes (its ``__dict__``, replaced whole), so a read after the first is a
    plain attribute lookup; :meth:`reload` empties it."""

    def user_settings(self) -> dict[str, Any]:
        value = getattr(django_settings, "DELAYQ", None)
        return value if isinstance(value, dict) else {}

    def is_set(self, name: str) -> bool:
        """Whether ``settings.DELAYQ`` gives ``name`` (rather than the default)."""
        return name in self.user_settings()

    def __getattr__(self, name: str) -> Any:
        """Only called for a name not read since the last reload (or not a setting)."""
        if name not in DEFAULTS:
            raise AttributeError(f"django-delayq has no setting named {name!r}")
        seen = self.__dict__
        user = self.user_settings()  # names outside DEFAULTS are not settings (W001)
        merged = {**DEFAULTS, **{k: v for k, v in user.items() if k in DEFAULTS}}
        if self.__dict__ is seen:  # no reload meanwhile: keep what was just read
            self.__dict__ = merged
        return merged[name]

    def reload(self) -> None:
        """Read ``settings.DELAYQ`` again on the next access."""
        self.__dict__ = {}


delayq_settings = DelayQSettings()


@receiver(setting_changed)
def _on_setting_changed(setting: str, **kwargs: Any) -> None:
    if setting == "DELAYQ":
        delayq_settings.reload()
