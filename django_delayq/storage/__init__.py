"""The storage layer: the only code that names a Redis key or runs a script.

- ``store``: the Store, the state transitions of jobs (schedule, claim, ack, fail, cancel...)
  in ids, bytes and scores; ``reads`` its read views (a job, pages, counts) and ``roster``
  the live workers (``store.roster``); ``old_layout`` the 0.1 layout, read by the upgrade
  (``store.old_layout``).
- ``keys``: every key name; ``queues``: what a valid queue name is.
- ``calls``, ``ops``, ``transport``: building ops and the one way to send them (routing,
  pipelining, NOSCRIPT reload); ``async_transport`` the same on ``redis.asyncio``, both
  doing only the I/O of ``round_trip`` (what a round trip writes, what its replies mean);
  ``errors`` reads Redis's errors, ``resends`` says what is sent again after an error or a
  lost reply; ``replies`` parses the scripts' answers; ``milliseconds`` converts seconds to
  the scripts' milliseconds and back; ``marks`` the runners' start marks.
- ``control``: ``store.control``, queue control (pause state, prioritised pending jobs,
  rate and concurrency limits); ``batches``: ``store.batches``, batches, their members'
  forward entries and chains' steps.
- ``scripts``, ``lua/`` and ``lua/include/``: the Lua scripts, one state transition per
  file, and their helpers by concern; ``plain``: the plain path of schedule.
- ``connection``: the Redis client and the Store for the configured alias.

The Store's public surface (``store.Store``), by the module that defines it (its bases);
tests/test_store.py compares this list with the class. A subject store is an attribute
holding one subject's operations (``store.batches.ended_op(...)``), built on first use:
batches.py's BatchStore, control.py's ControlStore, roster.py's Roster, finished.py's
FinishedStore, recurring.py's RecurringStore, traces.py's TraceStore, history.py's
HistoryStore, old_layout.py's OldLayoutStore, followers.py's FollowerStore (``bulk`` builds the
round trip of many schedules from a store):

- subject stores (store.py): batches, control, roster, finished, recurring, traces, history,
  old_layout, followers
- transitions (store.py): schedule, schedule_op, schedule_with_result, schedule_many_op,
  unmark_relayed_op, claim, claim_op, ack, ack_op, fail, fail_op, mark_op, marker, settle,
  extend, recover, release, forget_worker, cancel, cancel_op, wait_for_wake,
  give_back_wake
- the plain path of schedule (plain.py): schedule_plain_op, job_op
- a pending job's due time moved (reschedule.py): reschedule, reschedule_op
- sending (calls.py): call, run, stream, op, command, slot_op, address
- key names (keys.py): key, keys, batch_keys, batches_key, chain_key, history_key,
  open_batches_key, queues_key, result_key, schedule_sets_key, worker_key, workers_key
- reads (reads.py): fetch, fetch_op, fetch_many, find, require, page, page_ids, ranks,
  records, size, counts, throughput, totals, id_for_key, first_due, server_time, queues, queues_op,
  remember_queue_op, relayed, relayed_op, old_relayed, save_result, load_result,
  result_op, read_timeout
- admin actions (manual.py): requeue, run_now, delete_dead, purge_dead
"""
