"""Multi-step work: batches with callbacks (api.py), chains (chains.py), and the forwarding
of their members' outcomes (forwarding.py; outbox_ends.py for members that wait in the
database). The links stored beside linked jobs are
links.py's; what a callback or a step is, as stored, is steps.py's."""

from django_delayq.batches import api as _api  # noqa: F401  registers the seal task
from django_delayq.batches import chains as _chains  # noqa: F401  Chain.schedule()
from django_delayq.batches import forwarding as _forwarding  # noqa: F401  cancel() forwards
from django_delayq.batches import outbox_ends as _outbox_ends  # noqa: F401  rows' ends
from django_delayq.batches.links import lookup as _lookup
from django_delayq.jobs import job as _job

_job.batch_lookup = _lookup
