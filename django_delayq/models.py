"""Two models. ``Job`` is unmanaged and has no table: it gives the admin an entry, a
content type and django-delayq's permissions (jobs in Redis are read through store.py).
``OutboxJob`` is a real table, the outbox: jobs scheduled with ``on_commit`` inside a
transaction, and jobs due beyond ``DELAYQ["HORIZON"]``, wait there until they are relayed to
Redis. Only ``outbox/rows.py`` reads or writes it."""

from __future__ import annotations

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from django_delayq.recurring import definitions


class Job(models.Model):
    """Stands for the jobs in Redis in the admin and in ``user.has_perm()``.

    Permissions (``django_delayq.<codename>``): ``view_job`` (dashboard, lists,
    detail), ``cancel_job`` (cancel pending), ``run_job`` (run pending now),
    ``requeue_job`` (dead -> pending), ``delete_job`` (delete dead, purge a queue),
    ``pause_queue`` (pause and resume a queue).
    """

    id = models.CharField(primary_key=True, max_length=26)

    class Meta:
        managed = False
        verbose_name = _("delayed job")
        verbose_name_plural = _("delayed jobs")
        default_permissions = ("view", "delete")
        permissions = [
            ("cancel_job", "Can cancel pending delayed jobs"),
            ("run_job", "Can run pending delayed jobs now"),
            ("requeue_job", "Can requeue dead delayed jobs"),
            ("pause_queue", "Can pause and resume delayed-job queues"),
        ]

    def __str__(self) -> str:
        return self.id


class OutboxJob(models.Model):
    """A pending job that waits in the database (see outbox/rows.py).

    ``record`` holds the job record exactly as Redis will hold it (jobs/record.py's format, with
    the tombstone flag 'i', so a relay sent twice never runs the job twice). ``relay_at``
    is when a worker moves the row into Redis: shortly after it was written for an
    on_commit job (the committing process normally relays it at once), ``due_at - HORIZON``
    for a job beyond the horizon. ``key_hash`` (sha256 of the unique key) makes a unique
    key name at most one row per queue on every database, whatever its index length limits.
    """

    id = models.CharField(primary_key=True, max_length=26)
    queue = models.CharField(max_length=64)
    due_at = models.DateTimeField()
    relay_at = models.DateTimeField(db_index=True)
    key = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no key, never unique
    key_hash = models.CharField(max_length=64, null=True, blank=True, db_index=True)  # noqa: DJ001
    on_conflict = models.CharField(max_length=8, default="replace")
    # True: due_at is the database's now() + a delay= when written; a relay sends Redis the
    # remaining delay on the database's clock. False: an absolute at= time (migration 0003).
    relative = models.BooleanField(default=False)
    record = models.BinaryField()
    created_at = models.DateTimeField()
    # The job's link (its batch, its place in a chain: batches/links.py), relayed beside the
    # record; "" for none (migration 0006).
    link = models.TextField(default="", db_default="", blank=True)
    # A debounce (schedule(..., max_wait=...), migration 0007): the cap of the call that wrote
    # the row (seconds; a relay over a Redis holder of the key applies it) and the first due
    # time of the key's job, which a replace never pushes the row past plus max_wait. NULL
    # for every other row, and for a row a 0.7.0 process writes during a rolling deploy.
    max_wait = models.FloatField(null=True, blank=True)
    first_due_at = models.DateTimeField(null=True, blank=True)
    # schedule(..., group=...): the job's group, relayed beside the record (its flag 'g');
    # NULL for none (migration 0007).
    group = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: no group

    class Meta:
        db_table = "django_delayq_outbox"
        default_permissions = ()
        verbose_name = "job waiting in the database"
        verbose_name_plural = "jobs waiting in the database"
        indexes = [models.Index(fields=["queue", "due_at"], name="delayq_outbox_queue_due")]
        constraints = [
            models.UniqueConstraint(fields=["queue", "key_hash"], name="delayq_outbox_one_key")
        ]

    def __str__(self) -> str:
        return self.id


class Schedule(models.Model):
    """A recurring schedule edited at run time (the admin's Schedules page); the same fields
    as a ``DELAYQ["SCHEDULES"]`` entry (docs/howto/recurring.rst). Workers pick up a new,
    changed, disabled or deleted row within RECONCILE_INTERVAL (django_delayq.recurring)."""

    MISSED_CHOICES = [
        ("skip", _("skip: run none of the missed occurrences")),
        ("once", _("once: run the latest missed occurrence once")),
        ("all", _("all: run every missed occurrence (at most 100)")),
    ]

    name = models.CharField(max_length=100, unique=True)
    task = models.CharField(max_length=200, help_text=_("dotted name, such as shop.tasks.sweep"))
    cron = models.CharField(
        max_length=120, blank=True, help_text=_("five fields, such as 0 3 * * *; or use every")
    )
    every = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("seconds between occurrences; or use cron")
    )
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=64, blank=True)
    tz = models.CharField(
        max_length=64, blank=True, help_text=_("IANA zone of the cron; blank: TIME_ZONE")
    )
    missed = models.CharField(max_length=8, choices=MISSED_CHOICES, default="once")
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "django_delayq_schedule"
        verbose_name = _("recurring schedule")
        verbose_name_plural = _("recurring schedules")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse what workers cannot run (definitions.check_row, the admin form's check):
        a bad cron, zone, interval or arguments, a task this process does not register, a
        name DELAYQ["SCHEDULES"] uses. save() does not call it (Django's convention, and
        objects.create(), bulk_create() and SQL bypass save() anyway): workers report a
        bad row (log, delayq_status, /metrics, the admin's list) and leave it out."""
        try:
            definition = definitions.check_row(self)
        except definitions.ScheduleError as exc:
            field = exc.field if exc.field in {f.name for f in self._meta.fields} else None
            message = str(exc)
            if field and field != "name":  # beside the field, the schedule's name is known
                message = message.split(": ", 1)[-1]
            if field == "cron" and "exactly one of" in message:
                field = None
            raise ValidationError({field or NON_FIELD_ERRORS: [message]}) from None
        if definition.cron:
            self.cron = definition.cron  # "0  3 * * *" is stored as "0 3 * * *"


class ScheduleState(models.Model):
    """What workers record about each schedule (of the settings or the database), written
    by django_delayq.recurring only: the durable half of its exactly-once rule.

    ``last_fire_ms`` is the latest fire time whose occurrence started (written before the
    task runs): no occurrence at or before it is ever created again, whatever Redis lost.
    ``since_ms`` is when the current definition (``digest``, ``generation``) took effect:
    no occurrence at or before it is created. Times are epoch milliseconds (Redis's clock).
    """

    name = models.CharField(primary_key=True, max_length=100)
    name_hash = models.BigIntegerField(db_index=True)
    digest = models.CharField(max_length=32)
    generation = models.PositiveIntegerField(default=1)
    definition = models.JSONField(default=dict)
    since_ms = models.BigIntegerField()
    last_fire_ms = models.BigIntegerField(null=True, blank=True)
    last_job_id = models.CharField(max_length=26, blank=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_outcome = models.CharField(max_length=16, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "django_delayq_schedule_state"
        default_permissions = ()
        verbose_name = "schedule state"

    def __str__(self) -> str:
        return self.name
