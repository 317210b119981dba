"""Two models. ``Job`` is unmanaged and has no table: it gives the admin an entry, a
content type and django-delayq's permissions (jobs in Redis are read through store.py).
``OutboxJob`` is a real table, the outbox: jobs scheduled with ``on_commit`` inside a
transaction, and jobs due beyond ``DELAYQ["HORIZON"]``, wait there until they are relayed to
Redis. Only ``outbox.py`` reads or writes it."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Job(models.Model):
    """Stands for the jobs in Redis in the admin and in ``user.has_perm()``.

    Permissions (``django_delayq.<codename>``): ``view_job`` (dashboard, lists,
    detail), ``cancel_job`` (cancel pending), ``run_job`` (run pending now),
    ``requeue_job`` (dead -> pending), ``delete_job`` (delete dead, purge a queue).
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
        ]

    def __str__(self) -> str:
        return self.id


class OutboxJob(models.Model):
    """A pending job that waits in the database (see outbox.py).

    ``record`` holds the job record exactly as Redis will hold it (job.py's format, with
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
