"""The outbox: jobs that wait in the project's database and commit with its transaction.

``rows.py`` is the only module that reads or writes the table (``models.OutboxJob``);
``outbox/placement.py`` is the outbox side of schedule() and cancel(); ``relay.py`` moves due rows
into Redis (right after the commit, and from workers); ``outbox/database_time.py`` computes times on
the database's clock; ``checks.py`` holds its system checks.

Before 0.5 ``django_delayq.outbox`` was the module now at ``outbox/rows.py``: its names
still resolve here, with a DeprecationWarning.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    import importlib
    import warnings

    rows = importlib.import_module("django_delayq.outbox.rows")
    if name.startswith("__") or not hasattr(rows, name):
        raise AttributeError(f"module 'django_delayq.outbox' has no attribute {name!r}")
    warnings.warn(
        f"django_delayq.outbox.{name} moved to django_delayq.outbox.rows.{name} in "
        f"django-delayq 0.5: import it from there (the old path goes in 1.0)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(rows, name)
