"""The reliability suite (issue 4): real redis-server processes started by the tests on
127.0.0.1 (never 6379), real ``delayq_worker`` processes, crashes, restarts, a Redis
Cluster and a Sentinel. Every scenario writes its figures to a JSON-lines file (see
``conftest.report``); ``benchmarks/reliability_table.py`` runs the suite and prints them."""
