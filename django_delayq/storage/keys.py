"""Key names: every Redis key django-delayq uses is named here, and nowhere else.

A queue's keys are ``{prefix}:{<queue>}:<kind>``, one per kind of :data:`KEY_KINDS`: the braces
are a Redis Cluster hash tag, so all keys of a queue share one slot and every script touches
one node (docs/internals.rst has the table; lua/include/base.lua describes the same keys in
this order).
The registry of queues, the django.tasks results and the roster of live workers live outside
every queue's slot.
"""

from __future__ import annotations

from django_delayq.storage.queues import check_queue_name

KEY_KINDS = (
    "pending",
    "running",
    "dead",
    "jobs",
    "state",
    "keys",
    "wake",
    "stats",
    "errors",
    "done",
    "claims",
    "meta",  # layout 1 (0.1) only: upgrade.lua converts and deletes it (see upgrade.py)
    "relayed",  # outbox rows stored by a relay whose DELETE has not committed (outbox/rows.py)
    "ranked",  # pending jobs with a priority other than 0 (storage/control.py)
    "control",  # queue control: paused, rate and concurrency limits (storage/control.py)
    "links",  # job id -> its batch / chain link (batches/links.py), for jobs with flag 'l'
    "forward",  # ended linked jobs whose outcome the worker has not forwarded yet
    "groups",  # job id -> its task and group, for jobs scheduled with group= (lua/claim.lua)
    "parked",  # due jobs of a group at its limit, waiting for a slot (lua/claim.lua)
    "holds",  # per task and group: its lease holders and rate state (lua/claim.lua)
    "trace",  # job id -> the context of the span that scheduled it, for jobs with flag 't'
    "finished",  # jobs that succeeded or were cancelled, kept a while: id -> ended (epoch ms)
    "kept",  # job id -> what is kept of a finished job (jobs/finished.py reads it)
    "throttled",  # unique key -> end of its unique_for= window (ms): lua/include/throttle.lua
)

# A batch's keys are ``{prefix}:{b:<batch id>}:<kind>``: a slot of their own (members may be in
# any queue), touched only by the batch scripts (storage/batches.py).
BATCH_KINDS = (
    "batch",  # hash: callbacks, total once sealed, counts, decisions (lua/batch_ended.lua)
    "ended",  # hash: member id -> 'succeeded' | 'dead' | 'cancelled'
    "members",  # hash: member id -> its queue (written when sealed)
)


class KeyNames:
    """The key names of one prefix (the Store's, through :class:`~.calls.Calls`)."""

    def __init__(self, prefix: str = "delayq") -> None:
        self.prefix = prefix
        self._keys: dict[str, list[str]] = {}

    def keys(self, queue: str) -> list[str]:
        """The queue's keys, in the order of KEY_KINDS."""
        keys = self._keys.get(queue) if type(queue) is str else None
        if keys is None:
            check_queue_name(queue)
            keys = [f"{self.prefix}:{{{queue}}}:{kind}" for kind in KEY_KINDS]
            if len(self._keys) < 1000:
                self._keys[queue] = keys
        return keys

    def key(self, queue: str, kind: str) -> str:
        return self.keys(queue)[KEY_KINDS.index(kind)]

    def history_key(self, queue: str, minute: int) -> str:
        """``{prefix}:{<queue>}:history:<minute>``: the queue's history of the ten minutes
        from epoch minute ``minute``, in the queue's slot (storage/history.py)."""
        return f"{self.key(queue, 'pending')[: -len('pending')]}history:{minute}"

    @property
    def queues_key(self) -> str:
        """``{prefix}:queues``: the set of queues ever scheduled to."""
        return f"{self.prefix}:queues"

    def result_key(self, result_id: str) -> str:
        """``{prefix}:result:<id>``: a django.tasks result, found by id alone."""
        return f"{self.prefix}:result:{result_id}"

    @property
    def workers_key(self) -> str:
        """``{prefix}:workers``: the instances of live workers (roster.py)."""
        return f"{self.prefix}:workers"

    def worker_key(self, instance: str) -> str:
        """``{prefix}:worker:<instance>``: one live worker's description (roster.py)."""
        return f"{self.prefix}:worker:{instance}"

    def batch_keys(self, batch_id: str) -> list[str]:
        """A batch's keys, in the order of BATCH_KINDS (one slot: ``{b:<id>}``)."""
        return [f"{self.prefix}:{{b:{batch_id}}}:{kind}" for kind in BATCH_KINDS]

    @property
    def batches_key(self) -> str:
        """``{prefix}:batches``: batch id -> created (epoch ms), every batch kept (the admin's
        list, newest first)."""
        return f"{self.prefix}:batches"

    @property
    def open_batches_key(self) -> str:
        """``{prefix}:batches:open``: batch id -> when a worker should look at it next (epoch
        ms): batches whose callbacks are not all placed (batches/forwarding.py sweeps it)."""
        return f"{self.prefix}:batches:open"

    def chain_key(self, chain_id: str) -> str:
        """``{prefix}:chain:<id>``: hash step index -> the step's call (JSON), "death" -> the
        on_death call: a chain's steps after the first, until it ends."""
        return f"{self.prefix}:chain:{chain_id}"

    def schedule_sets_key(self, kind: str) -> str:
        """``{prefix}:schedule-sets:first|seen``: when each version of
        ``DELAYQ["SCHEDULES"]`` was first and last run by a worker (recurring/deploys.py);
        ``...:reconciled``: the mark of a full reconcile pass (recurring/passes.py)."""
        return f"{self.prefix}:schedule-sets:{kind}"
