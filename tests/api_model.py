"""A plain in-memory model of the public API's promises (issue 17; the outbox's promises
I1-I9 in docs/internals.rst), for the state machine of tests/test_api_model.py.

What it knows: which job ids are pending and visible to the test's connection, under which
unique key, with which arguments and due time, and where each waits ("row": an outbox row,
transactional; "redis": in Redis, not transactional, I5). Where the spec lets a job wait in
either place (a fast path that failed or was paused, a relay that did or did not run yet), the
machine tells the model what it found (:meth:`Model.sync`): placement is observed, never what
exists or what runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

NEW = "new"  # an expected id meaning "a fresh id, not one the model knows"


class Mismatch(AssertionError):
    pass


@dataclass
class MJob:
    id: str
    key: str | None
    args: int
    due: float  # epoch seconds
    far: bool  # waits beyond the horizon: a commit hook does not relay it (I2)
    place: str  # "row" | "redis"
    stale: bool = False  # in Redis while its relayed row stays (a refused DELETE)
    expires: float | None = None  # epoch seconds: not started by then (a claim's clock), never


@dataclass
class Model:
    horizon: float | None = None
    redis: dict[str, MJob] = field(default_factory=dict)
    rows: dict[str, MJob] = field(default_factory=dict)  # visible to the test's connection
    savepoints: list[dict[str, MJob]] = field(default_factory=list)
    issued: set[str] = field(default_factory=set)
    ran: dict[str, int] = field(default_factory=dict)
    expired: set[str] = field(default_factory=set)  # ended "expired" by a worker, never run

    # -- reading --------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return len(self.savepoints)

    def pending(self) -> dict[str, MJob]:
        return {**self.redis, **self.rows}

    def holders(self, key: str) -> list[MJob]:
        return [j for j in self.pending().values() if j.key == key]

    def stale_key(self, key: str | None) -> bool:
        return key is not None and any(j.stale for j in self.holders(key))

    # -- transactions ---------------------------------------------------------------------

    def begin(self) -> None:
        self.savepoints.append(copy.deepcopy(self.rows))

    def release(self) -> None:
        """A savepoint (or the outermost block) commits: its rows stay. Relays after the
        outermost commit are observed by :meth:`sync`."""
        self.savepoints.pop()

    def rollback(self) -> None:
        """Rows go back to what they were at the savepoint; Redis keeps what was done (I5)."""
        self.rows = self.savepoints.pop()

    # -- the API --------------------------------------------------------------------------

    def schedule(
        self,
        key: str | None,
        args: int,
        due: float,
        far: bool,
        on_commit: bool,
        keep: bool,
    ) -> tuple[set[str], MJob | None, str]:
        """What schedule() must do: (ids it may return (NEW: a fresh one), the job it
        updates, how: "create-row" | "create-redis" | "update" | "keep")."""
        in_tx = on_commit and self.depth > 0
        holders = self.holders(key) if key is not None else []
        rows = [j for j in holders if j.place == "row"]
        redis = [j for j in holders if j.place == "redis"]
        if holders and keep:
            return {j.id for j in holders}, None, "keep"
        if key is None or not holders:
            return {NEW}, None, "create-row" if in_tx or far else "create-redis"
        if rows:  # a row holds the key: it is updated, keeps its id (I3)
            return {rows[0].id}, rows[0], "update"
        # Only Redis holds the key.
        if in_tx:
            return {NEW}, redis[0], "create-row"  # a new row adopts the key at its relay
        return {redis[0].id}, redis[0], "update"  # the Redis job keeps its id

    def apply_schedule(
        self, how: str, job_id: str, target: MJob | None, key, args, due, far, in_tx, expires=None
    ) -> None:
        if how == "keep":
            return
        if how == "update":
            assert target is not None
            target.args, target.due, target.far, target.expires = args, due, far, expires
            if target.place == "row" and in_tx:
                self.rows[target.id] = target  # the update is in the transaction
            return
        self.issued.add(job_id)
        place = "row" if how == "create-row" else "redis"
        job = MJob(job_id, key, args, due, far, place, expires=expires)
        (self.rows if place == "row" else self.redis)[job_id] = job

    def cancel(self, job_id: str | None, key: str | None) -> bool:
        """cancel(id) / cancel(key=K): a row in the caller's transaction, Redis at once (I4, I5)."""
        gone = [j for j in self.pending().values() if (j.id == job_id if job_id else j.key == key)]
        for j in gone:
            self.rows.pop(j.id, None)
            self.redis.pop(j.id, None)
        return bool(gone)

    def to_reschedule(self, job_id: str | None, key: str | None) -> MJob | None:
        """The job reschedule(id) / reschedule(key=K) moves: by key a row holding it first
        (the key's job), then Redis; None when no pending job answers (nothing moves)."""
        if job_id is not None:
            return self.pending().get(job_id)
        holders = sorted(self.holders(key), key=lambda j: j.place != "row")
        return holders[0] if holders else None

    def reschedule(self, job: MJob, due: float, far: bool) -> None:
        """Its due time moved where it waits: a row in the caller's transaction (a rollback
        puts the old one back: the savepoints hold copies), Redis at once (I5). A Redis job
        moved beyond the horizon stays in Redis; a row brought within it is relayed when the
        transaction commits (observed by :meth:`sync`)."""
        job.due, job.far = due, far and job.place == "row"

    def expire(self, job_id: str) -> None:
        self.rows.pop(job_id, None)
        self.redis.pop(job_id, None)
        self.expired.add(job_id)

    def finished(self, job_id: str) -> None:
        self.rows.pop(job_id, None)
        self.redis.pop(job_id, None)
        self.ran[job_id] = self.ran.get(job_id, 0) + 1

    def sync(self, in_redis: set[str], in_table: set[str]) -> None:
        """Outside transactions: where each pending job waits now, as observed (a commit's
        fast path and a relay move rows into Redis). A row that reached Redis adopts its key:
        any other Redis job under that key is gone (I3)."""
        assert self.depth == 0
        jobs = sorted(self.pending().values(), key=lambda j: j.place != "row")  # rows first
        for job in jobs:
            if job.id not in self.pending():
                continue  # its key was adopted by a row relayed just now
            if job.id in in_redis:
                moved = job.place == "row"
                job.place, job.stale = "redis", job.id in in_table
                self.rows.pop(job.id, None)
                self.redis[job.id] = job
                if moved and job.key is not None:
                    for other in self.holders(job.key):
                        if other.id != job.id and other.place == "redis":
                            del self.redis[other.id]
            elif job.id in in_table:
                if job.place == "redis":
                    raise Mismatch(f"job {job.id} left Redis for the outbox")
            else:
                raise Mismatch(
                    f"job {job.id} (args {job.args}) is pending in the model but is neither "
                    "pending in Redis nor a row"
                )
