"""The limits of registered tasks (``@task(rate=, concurrency=)``, issue 20; per group:
``group_concurrency=, group_rate=``) and of queues
(``DELAYQ['QUEUES']`` options), written to Redis by a worker before its first claim
(claiming.py): claim.lua reads them from each queue's control hash."""

from __future__ import annotations

import logging

from django_delayq.conf.queues import fair_queues
from django_delayq.exceptions import DelayQError
from django_delayq.scheduling.registry import registered
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.worker")


def publish_limits(store: Store, queues: list[str], queue_limits: dict[str, int | None]) -> bool:
    """Write the rate and concurrency limits of every registered task into each queue's
    control hash, where claim.lua reads them (and drop the limits registered tasks no
    longer have), and each queue's own concurrency limit (``queue_limits``, from
    DELAYQ['QUEUES'], read when the worker was made) and whether it is fair. True once
    written; a failure is logged, not raised (the limits a previous worker wrote stay in
    force, and the caller tries again)."""
    tasks = registered().values()
    try:
        store.control.publish_rates(queues, {t.name: t.rate for t in tasks})
        store.control.publish_concurrency(queues, {t.name: t.concurrency for t in tasks})
        store.control.publish_group_limits(
            queues, {t.name: (t.group_concurrency, t.group_rate) for t in tasks}
        )
        store.control.publish_queue_limits(queue_limits)
        store.control.publish_fair(fair_queues(queues))
    except DelayQError as exc:
        logger.error("the tasks' limits could not be written to Redis (tried again): %s", exc)
        return False
    return True
