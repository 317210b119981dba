"""Recurring jobs: cron and interval schedules whose every occurrence is an ordinary delayed
job with a deterministic id, so any number of workers may create it and one job exists.

- definitions.py  parse and validate schedules (``DELAYQ["SCHEDULES"]`` and the Schedule model)
- times.py        fire times (cron in the schedule's zone with cronsim, intervals since the
                  epoch) and occurrence ids
- reconcile.py    the pass every worker runs: keep the next occurrence of each schedule in
                  Redis, cancel what a change replaced, run missed occurrences by policy
- hooks.py        on an occurrence's start: the durable record, then its successor
- names.py        the schedule an occurrence belongs to (Job.schedule)
- status.py       missing or overdue schedules (delayq_status, /metrics)
- checks.py       system checks delayq.E020-E021

docs/howto/recurring.rst and docs/internals.rst ("Recurring schedules") give the design.
"""
