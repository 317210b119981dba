"""django-delayq's benchmarks: ``python benchmarks/run.py`` (see run.py)."""
