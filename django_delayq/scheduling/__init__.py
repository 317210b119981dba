"""Scheduling: schedule / cancel / get_job (sync and async), the @task registry, the explicit
call form, pausing queues. ``plan.py`` decides where a job goes (Redis now, Redis later, or
the outbox); ``api.py`` and ``async_api.py`` send it there."""
