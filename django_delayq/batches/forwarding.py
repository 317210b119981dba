"""Forwarding: a linked job's end (the `forward` entry its script wrote, in its own queue)
taken to its chain and its batch, then deleted, in that order, so a crash anywhere between
leaves the entry for the next try and nothing is lost or done twice:

1. its chain: a success stores the next step (under an id derived from the ended job's id:
   a second try finds it, or its tombstone), a death the chain's on_death (once); the
   chain's last end or a cancel deletes the chain's hash, a death before the last step keeps
   it while dead jobs are kept (a requeue of the step continues the chain: _chain_died);
2. its batch (when it is a member, or the last step of a member chain): batch_ended.lua
   records the outcome and decides callbacks once; each decided callback is stored under an
   id derived from the batch id, its kind and the decision's time, then marked placed;
3. the entry is deleted.

The worker forwards what it just acked or dead-lettered at once (:func:`forward_ids`); its
recovery duty sweeps entries older than a few seconds (a crash, an outage) and batches whose
callbacks were decided but not placed (:func:`sweep`). Callers never see an exception: what
could not be forwarded stays for the sweep, and is logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from django_delayq.batches import links
from django_delayq.batches.chains import step_fields
from django_delayq.batches.steps import store_step
from django_delayq.conf import delayq_settings
from django_delayq.scheduling import api
from django_delayq.storage.batches import Decided, Ended
from django_delayq.storage.store import Store

logger = logging.getLogger("django_delayq.batches")

# Seconds after which a forward entry was left by a crash (its worker forwards it within a
# second or so); the recovery duty passes min(this, its lease): a sweep racing a live
# forwarding only repeats it, harmlessly.
LEFTOVER_AFTER = 10.0
SWEEP_ENTRIES = 1000  # forward entries looked at per queue and sweep
SWEEP_BATCHES = 100  # open batches looked at per sweep
LOOK_AGAIN_MS = 60_000  # an open batch is looked at again this much later
KEEP_LISTED_MS = 30 * 86_400_000  # the list of batches forgets batches older than this


def forward_ids(store: Store, ended: Iterable[tuple[str, str]]) -> int:
    """Forward the entries of (queue, job id) pairs: jobs this process just ended. Returns
    how many jobs the forwarding stored (chain steps, callbacks, on_death jobs)."""
    by_queue: dict[str, list[str]] = {}
    for queue, job_id in ended:
        by_queue.setdefault(queue, []).append(job_id)
    entries: list[Ended] = []
    try:
        for queue, ids in by_queue.items():
            entries += store.batches.read_forward(queue, ids)
    except Exception as exc:
        logger.warning("batches and chains: outcomes left for the sweep (%s)", exc)
        return 0
    return forward(store, entries)


def forward(store: Store, entries: Sequence[Ended]) -> int:
    """Take each entry to its chain and batch, then delete it (see the module docstring).
    Returns how many jobs it stored (a chain's next step or on_death, a batch's callbacks),
    sent again or not: the worker wakes its dispatcher only then (worker/forwarder.py)."""
    stored_jobs = 0
    for_batches: dict[str, list[tuple[str, str]]] = {}
    taken: list[tuple[Ended, Any]] = []  # (entry, its batch id) of each entry taken
    for entry in sorted(entries, key=lambda e: e.at_ms):  # a member's ends in their order
        link = links.loads(entry.link)
        try:
            outcome, jobs = _chain_end(store, entry, link)
            stored_jobs += jobs
        except Exception as exc:
            logger.warning("job %s: its chain's next step not stored yet (%s)", entry.id, exc)
            continue
        batch_id = link.get("b")
        if isinstance(batch_id, str) and outcome is not None:
            for_batches.setdefault(batch_id, []).append((link.get("m") or entry.id, outcome))
        taken.append((entry, batch_id))
    refused: set[str] = set()
    for batch_id, outcomes in for_batches.items():
        try:
            decided = store.call(store.batches.ended_op(batch_id, outcomes))
            stored_jobs += place_decided(store, batch_id, decided)
        except Exception as exc:
            logger.warning("batch %s: outcomes not recorded yet (%s)", batch_id, exc)
            refused.add(batch_id)
    _drop(store, [e for e, batch_id in taken if batch_id not in refused])
    return stored_jobs


def _drop(store: Store, entries: Sequence[Ended]) -> None:
    by_queue: dict[str, list[str]] = {}
    for entry in entries:
        by_queue.setdefault(entry.queue, []).append(entry.field)
    ops = [store.batches.drop_forward_op(queue, ids) for queue, ids in by_queue.items()]
    if ops:
        for result in store.run(ops, 1.0):
            if isinstance(result, Exception):  # forwarded again by the sweep: harmless
                logger.info("batches and chains: forward entries left (%s)", result)


def _chain_end(store: Store, entry: Ended, link: dict[str, Any]) -> tuple[str | None, int]:
    """A chain step ended: store what follows. Returns the outcome the job's batch counts
    (the entry's, for a job that is no chain step or whose chain ended with it; 'cancelled'
    for a member chain cut by cancel_batch()), or None while the chain goes on; and how many
    jobs it stored (the next step, the chain's on_death: 0 or 1)."""
    chain_id = link.get("c")
    if not isinstance(chain_id, str):
        return entry.outcome, 0
    index = int(link.get("i") or 0)
    outcome = entry.outcome
    if outcome == "succeeded":
        fields = [str(index + 1), "dead"]
        following, dead = store.call(store.batches.read_chain_op(chain_id, fields))
        if following is None and index + 1 < int(link.get("n") or 0):
            # A step before the last, and its chain is gone: the chain ended since (a later
            # step died, was cancelled) and this is an entry a crash left. Nothing to count.
            return None, 0
        batch_id = link.get("b")
        if (
            following is not None
            and isinstance(batch_id, str)
            and store.batches.cancelled(batch_id)
        ):
            outcome, following = "cancelled", None  # its batch was cancelled: no next step
        if following is not None:
            step_link = links.dumps({**link, "i": index + 1})
            new_id = links.derived_id(entry.id, "next", entry.at_ms)
            store_step(json.loads(following), new_id, step_link, entry.at_ms, store)
            if dead is not None and int(dead) < entry.at_ms:
                # A step that died was requeued and succeeded: the chain goes on from it (an
                # older success, an entry a crash left, finds the death after it: no revival).
                store.batches.run_all(store.batches.revived_chain_ops(chain_id))
            return None, 1
    jobs = 0
    if outcome == "dead":
        jobs = _chain_died(store, entry, link, chain_id, index)
        if index + 1 < int(link.get("n") or 0):
            return outcome, jobs  # its chain waits for a requeue of the step
    store.call(store.batches.drop_chain_op(chain_id))
    return outcome, jobs


def _chain_died(store: Store, entry: Ended, link: dict[str, Any], chain_id: str, index: int) -> int:
    """A step died: the chain's on_death is stored (once: the hash keeps it no longer); a
    step before the last leaves the chain's hash for as long as dead jobs are kept, so the
    step requeued from the admin that then succeeds continues the chain (Sidekiq's and
    BullMQ's flows do the same); the last step's death ends it (the caller drops it)."""
    (death,) = store.call(store.batches.read_chain_op(chain_id, ["death"]))
    if death is not None:
        batch_id = links.batch_of(link)
        death_link = links.dumps({"of": batch_id}) if batch_id else ""
        new_id = links.derived_id(entry.id, "death", entry.at_ms)
        store_step(json.loads(death), new_id, death_link, entry.at_ms, store)
    if index + 1 < int(link.get("n") or 0):
        keep_ms = max(int(float(delayq_settings.DEAD_MAX_AGE) * 1000), 1)
        store.batches.run_all(store.batches.dead_chain_ops(chain_id, entry.at_ms, keep_ms))
    return 0 if death is None else 1  # its on_death stored


def place_decided(store: Store, batch_id: str, decided: Decided) -> int:
    """Store the callbacks a batch script decided, then mark them placed; returns how many
    it stored."""
    now_ms = int(time.time() * 1000)
    for callback in decided.callbacks:
        spec = json.loads(callback.call)
        job_id = links.derived_id(batch_id, callback.kind, callback.decided_ms)
        link: dict[str, Any] = {"of": batch_id}
        fields = step_fields(spec)
        if fields or len(spec["steps"]) > 1:
            store.call(store.batches.write_chain_op(job_id, fields))
            link.update({"c": job_id, "i": 0, "n": len(spec["steps"])})
        store_step(spec["steps"][0], job_id, links.dumps(link), callback.decided_ms, store)
    placed = len(decided.callbacks)
    if placed:
        kinds = [c.kind for c in decided.callbacks]
        store.call(store.batches.placed_op(batch_id, kinds, now_ms))
        # Placed: the batch may have finished with them (it expires, leaves the open ones).
        decided = store.call(store.batches.ended_op(batch_id, []))
    if decided.finished:
        store.call(store.batches.close_op([batch_id]))
    return placed


def sweep(
    store: Store,
    queues: Iterable[str],
    now: float | None = None,
    leftover_after: float = LEFTOVER_AFTER,
) -> int:
    """Forward entries a crash or an outage left (older than ``leftover_after``) in ``queues``,
    and look at open batches due (callbacks decided and not placed: a crash after a seal);
    returns how many entries were forwarded. Raises what Redis raises (a duty's backoff)."""
    now = time.time() if now is None else now
    cutoff = int((now - leftover_after) * 1000)
    forwarded = 0
    for queue in queues:
        cursor, seen = 0, 0
        while True:
            cursor, entries = store.batches.scan_forward(queue, cursor, 200)
            old = [e for e in entries if e.at_ms < cutoff]
            if old:
                forward(store, old)
                forwarded += len(old)
            seen += len(entries)
            if cursor == 0 or seen >= SWEEP_ENTRIES:
                break
    now_ms = int(now * 1000)
    for batch_id in store.batches.due_open(now_ms, SWEEP_BATCHES, LOOK_AGAIN_MS):
        place_decided(store, batch_id, store.call(store.batches.ended_op(batch_id, [])))
    store.call(store.batches.trim_op(now_ms - KEEP_LISTED_MS))
    return forwarded


api.use_forwarding(forward_ids)  # cancel() forwards a cancelled member's end at once
