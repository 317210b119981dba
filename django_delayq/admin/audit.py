"""Who did what to a job in the admin: Django's admin log (``LogEntry``, the table behind the
admin index's "Recent actions"), written for every action that changes jobs and read back by
a job page's timeline (:mod:`django_delayq.admin.timeline`).

One entry per job an action changed (cancel, run now, requeue, delete: a job's own button,
ticked jobs, "all matching"), with the content type of :class:`django_delayq.models.Job`,
``object_id`` the job id, ``object_repr`` its task and ``change_message`` the action
("Cancelled", "Ran now", "Requeued", "Deleted"); one entry for a batch cancelled (its id) and
for a purge or a pause (the queue's name). They are built here and saved with
``bulk_create``, :data:`LOG_CHUNK` a query, rather than through ``LogEntry.objects.log_actions``
(Django 5.1+; ``log_action`` is gone in 6.0): that one takes model instances and writes
``str(obj)`` as the repr, and a job is no row. The same code runs on Django 5.2 to 6.1.

The action already happened in Redis when its entries are written, so a database that refuses
them (a lock, a full disk) is logged (``django_delayq.admin.audit``) and never undoes or hides
the action: the write runs in a savepoint of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, transaction
from django.utils.translation import gettext_lazy as _

from django_delayq.exceptions import CorruptJob
from django_delayq.jobs.record import decode_record, split_record
from django_delayq.models import Job
from django_delayq.storage.store import Store

logger = logging.getLogger(__name__)

LOG_CHUNK = 1_000  # entries per INSERT
READ_CHUNK = 1_000  # records per HMGET when the tasks of an action's jobs are read
SHOWN_ENTRIES = 100  # entries a job page shows at most (the newest)

# What an action writes as the change message (stable, in English: the page translates it).
MESSAGES = {
    "cancel": "Cancelled",
    "run_now": "Ran now",
    "postpone": "Postponed",
    "requeue": "Requeued",
    "delete": "Deleted",
    "cancel_batch": "Cancelled the batch",
    "purge": "Purged the dead jobs",
    "pause": "Paused the queue",
    "resume": "Resumed the queue",
}
SHOWN = {
    "Cancelled": _("Cancelled"),
    "Ran now": _("Ran now"),
    "Postponed": _("Postponed"),
    "Requeued": _("Requeued"),
    "Deleted": _("Deleted"),
    "Cancelled the batch": _("Cancelled the batch"),
    "Purged the dead jobs": _("Purged the dead jobs"),
    "Paused the queue": _("Paused the queue"),
    "Resumed the queue": _("Resumed the queue"),
}


def _content_type_id() -> int:
    return ContentType.objects.get_for_model(Job, for_concrete_model=False).pk


def task_of(record: bytes | None) -> str:
    """A record's task name, split rather than decoded (an action reads thousands); '' for
    a missing or damaged one."""
    if record is None:
        return ""
    parts = split_record(record) if record[:1] not in (b"[", b"{") else None
    if parts is not None:
        return parts[1].split(b"\n", 1)[0].decode("utf-8", "replace")
    try:
        return decode_record(record).task
    except CorruptJob:
        return ""


def task_names(store: Store, queue: str, ids: Sequence[str]) -> dict[str, str]:
    """The tasks of ``ids`` read from their records before an action (a cancel or delete
    removes them), READ_CHUNK per round trip; a job not in Redis is left out."""
    names = {}
    for first in range(0, len(ids), READ_CHUNK):
        chunk = ids[first : first + READ_CHUNK]
        for job_id, record in zip(chunk, store.records(queue, chunk), strict=True):
            if record is not None:
                names[job_id] = task_of(record)
    return names


def log(user: Any, action: str, objects: Iterable[tuple[str, str]]) -> int:
    """Write one entry per (object id, repr) for ``action`` (a key of MESSAGES) by ``user``;
    how many were written (0 when the database refused them: logged, never raised)."""
    flag = DELETION if action in ("delete", "purge") else CHANGE
    written, batch = 0, []
    try:
        with transaction.atomic():
            content_type = _content_type_id()
            for object_id, shown in objects:
                batch.append(
                    LogEntry(
                        user_id=user.pk,
                        content_type_id=content_type,
                        object_id=object_id,
                        object_repr=(shown or object_id)[:200],
                        action_flag=flag,
                        change_message=MESSAGES[action],
                    )
                )
                if len(batch) == LOG_CHUNK:
                    written += len(LogEntry.objects.bulk_create(batch))
                    batch = []
            written += len(LogEntry.objects.bulk_create(batch)) if batch else 0
    except DatabaseError:
        logger.exception("django-delayq: the admin log refused the entries of %s", action)
        return 0
    return written


def entries_for(job_id: str) -> list[LogEntry]:
    """The entries of one job, oldest first (the newest SHOWN_ENTRIES); [] when the
    database cannot be read (logged)."""
    try:
        newest = (
            LogEntry.objects.filter(content_type_id=_content_type_id(), object_id=job_id)
            .select_related("user")
            .order_by("-action_time", "-pk")[:SHOWN_ENTRIES]
        )
        return list(reversed(list(newest)))
    except DatabaseError:
        logger.exception("django-delayq: the admin log of job %s could not be read", job_id)
        return []


def shown_message(entry: LogEntry) -> str:
    """An entry's action as the page shows it (translated when it is one of MESSAGES)."""
    message = entry.change_message
    return str(SHOWN[message]) if message in SHOWN else entry.get_change_message()
