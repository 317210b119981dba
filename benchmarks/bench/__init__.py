"""The benchmark workloads; ``benchmarks/run.py`` is the entry point."""
