"""The storage layer: the only code that names a Redis key or runs a script.

- ``store``: the Store, the state transitions of jobs (schedule, claim, ack, fail, cancel...)
  in ids, bytes and scores; ``reads`` its read views (a job, pages, counts) and ``roster``
  the live workers; ``old_layout`` the 0.1 layout, read by the upgrade.
- ``keys``: every key name; ``queues``: what a valid queue name is.
- ``calls``, ``ops``, ``transport``: building ops and the one way to send them (routing,
  pipelining, NOSCRIPT reload); ``async_transport`` the same on ``redis.asyncio``, both
  doing only the I/O of ``round_trip`` (what a round trip writes, what its replies mean);
  ``errors`` reads Redis's errors, ``resends`` says what is sent again after an error or a
  lost reply; ``replies`` parses the scripts' answers; ``milliseconds`` converts seconds to
  the scripts' milliseconds and back; ``marks`` the runners' start marks.
- ``control``: queue control (pause state, prioritised pending jobs, rate and concurrency
  limits).
- ``scripts`` and ``lua/``: the Lua scripts, one state transition per file.
- ``connection``: the Redis client and the Store for the configured alias.
"""
