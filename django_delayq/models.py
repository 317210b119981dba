"""An unmanaged model with no table: it gives the admin an entry, a content type and
django-delayq's permissions. Jobs themselves live in Redis (see store.py)."""

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
