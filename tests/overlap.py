"""How many attempts of one task run at once across in-process workers, recorded by the task
itself in the runs Redis (the limits' tests: @task(concurrency=) and a queue's limit)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.testapp import tasks as t


class Overlap:
    def __init__(self, what: str) -> None:
        self.tag = f"{what}-{uuid.uuid4().hex[:8]}"
        self.running, self.peak, self.done = (
            f"runs:{self.tag}:now",
            f"runs:{self.tag}:peak",
            f"runs:{self.tag}",
        )
        self.client = t.runs_client()

    def body(self, seconds: float) -> Callable[[int], None]:
        """A task function: counts itself running, pushes the count, runs ``seconds``."""

        def run(i: int) -> None:
            now = self.client.incr(self.running)
            self.client.rpush(self.peak, now)
            time.sleep(seconds)
            self.client.decr(self.running)
            self.client.rpush(self.done, i)

        return run

    def run(self, workers: list[Any], schedule: Callable[[int], Any], jobs: int) -> list[int]:
        """Run ``workers`` on threads, schedule ``jobs`` jobs, wait until each ran; the counts
        seen as each started (one per attempt)."""
        threads = [threading.Thread(target=w.run) for w in workers]
        for thread in threads:
            thread.start()
        try:
            for i in range(jobs):
                schedule(i)
            deadline = time.monotonic() + 60
            while self.client.llen(self.done) < jobs and time.monotonic() < deadline:
                time.sleep(0.05)
            ran = sorted(int(v) for v in self.client.lrange(self.done, 0, -1))
            assert ran == list(range(jobs)), ran
            return [int(v) for v in self.client.lrange(self.peak, 0, -1)]
        finally:
            self.client.delete(self.running, self.peak, self.done)
            for worker in workers:
                worker.request_stop()
            for thread in threads:
                thread.join(15)
