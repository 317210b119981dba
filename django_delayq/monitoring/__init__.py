"""What the queues look like from outside: health (``delayq_status``, the dashboard) and the
Prometheus metrics endpoint."""
