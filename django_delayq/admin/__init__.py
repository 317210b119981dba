"""The dashboard inside the Django admin (imported by ``admin.autodiscover()``).

- ``dashboard``: the ModelAdmin (registered here): its URL table and read-only pages.
- ``pages``: what every page shares (permissions, URLs, context, rendering).
- ``list_pages``: the pending / running / dead / finished lists; ``sets``: the set a list reads.
- ``action_pages``: the action endpoint, its confirmation page and the purge page.
- ``views``: what the pages read and show.
- ``actions``: what the actions do.
- ``workers``: the Workers tab.
- ``batch_pages``: the Batches pages; ``batch_views``: what they read and show.
- ``texts``: the texts the pages show.
- ``timeline``: a job page's timeline; ``audit``: the admin log entries of the actions.
- ``schedules``: the Recurring schedules page (the Schedule model's admin);
  ``settings_schedules``: its read-only table of ``DELAYQ["SCHEDULES"]``.
"""

from django_delayq.admin.dashboard import JobAdmin
from django_delayq.admin.schedules import ScheduleAdmin  # recurring schedules (issue 19)

__all__ = ["JobAdmin", "ScheduleAdmin"]
