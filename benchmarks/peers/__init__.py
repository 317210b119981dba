"""Adapters that run the same delayed-job workloads on django-delayq and its peers.

``benchmarks/compare.py`` runs each adapter in its own virtualenv: ``producer.py`` is the
producer process, ``<system>_adapter.py`` holds that system's app, task and scheduling
calls, and ``recorder.py`` is the task body every system runs. These modules import only
the standard library, redis-py and the system they adapt.
"""
