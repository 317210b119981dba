"""Recurring jobs: cron and interval schedules whose every occurrence is an ordinary delayed
job with a deterministic id, so any number of workers may create it and one job exists.

- definitions.py  parse and validate schedules (``DELAYQ["SCHEDULES"]`` and the Schedule model)
- fire_times.py   fire times (cron in the schedule's zone with cronsim, intervals since the
                  epoch); ids.py: occurrence ids; names.py: the schedule of an id
- reconcile.py    the full pass: keep the next occurrence of each schedule in Redis, record
                  new and changed definitions, create missed occurrences by policy
- passes.py       when a worker runs the full pass (a cheap look every RECONCILE_INTERVAL)
- deploys.py      which version of the settings' schedules is current (rolling deploys)
- claims.py       what a claim does with its occurrences: the missed policy (policy.py),
                  the durable record (committed by recorder.py), the successors
- occurrences.py  definition -> record -> stored (occur.lua), the one step the pass and a
                  claim's successors share; known.py: what the last pass saw
- hooks.py        the outcomes of occurrences (signals)
- status.py       missing, overdue or invalid schedules (delayq_status, /metrics)
- checks.py       system checks delayq.E020-E022

docs/howto/recurring.rst and docs/internals.rst ("Recurring schedules") give the design.
"""
