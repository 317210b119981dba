"""The ends of linked jobs (batch members, chain steps) this worker acknowledged or
dead-lettered, forwarded to their batches and chains (batches/forwarding.py) by a thread of
their own, so the dispatcher's round trips never wait for the forwarding's three (read the
entries, batch_ended.lua, delete them). Ends that come in while one forwarding runs go in
the next, together: one batch_ended.lua call for all the ends of a batch.

The forwarder wakes the dispatcher only after a forwarding that stored a job (a chain's next
step, a batch's callback, an on_death: due now, perhaps, in a queue this worker claims), and,
in --burst, after any forwarding once the dispatcher waits for nothing else
(``wake_when_idle``). Waking it after every forwarding made it claim at once, with its
prefetch barely used: claims of 2 jobs instead of 20 for a batch's members.

Nothing is lost if the process dies with ends not forwarded: their entries stay in Redis
for the recovery duty's sweep (any worker's). A worker that stops forwards what is left
before it exits (:meth:`Forwarder.close`)."""

from __future__ import annotations

import threading

from django_delayq.batches.forwarding import forward_ids
from django_delayq.storage.store import Store


class Forwarder:
    def __init__(self, store: Store, stopped: threading.Event, wake: threading.Event) -> None:
        self.store = store
        self.stopped = stopped
        self.wake = wake  # the dispatcher's: set when a forwarding stored a job
        # --burst, nothing held: the dispatcher waits for the forwarding to end (dispatch.py)
        self.wake_when_idle = False
        self._ended: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._more = threading.Event()
        self.forwarded = 0  # ends forwarded (or left for the sweep after an error)
        self.busy = False  # a forwarding is under way
        self.generation = 0  # forwardings that stored a job (due now, perhaps)
        self.stored = 0  # jobs the forwardings stored
        self._thread: threading.Thread | None = None

    def notify(self, ended: list[tuple[str, str]]) -> None:
        """(queue, job id) of linked jobs that ended: forward them soon."""
        with self._lock:
            self._ended.extend(ended)
        self._more.set()

    def thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="delayq-forwarder", daemon=True)
        return self._thread

    def close(self, timeout: float = 5.0) -> None:
        """The worker stops (``stopped`` is set): let a forwarding under way end, then
        forward what is left here."""
        if self._thread is not None and self._thread.is_alive():
            self._more.set()  # wakes the thread at once: it sees ``stopped`` and ends
            self._thread.join(timeout)
        self.flush()

    def run(self) -> None:
        while not self.stopped.is_set():
            if self._more.wait(0.5):
                self.flush()

    def flush(self) -> None:
        """Forward every end notified so far (forward_ids never raises: what it could not
        forward stays for the sweep)."""
        with self._lock:
            self._more.clear()
            ended, self._ended = self._ended, []
            self.busy = bool(ended)
        if ended:
            stored = 1  # until forward_ids says: an exception may follow a stored job
            try:
                stored = forward_ids(self.store, ended)
            finally:
                self.forwarded += len(ended)
                self.stored += stored
                with self._lock:
                    self.busy = False
                    if stored:
                        self.generation += 1
                if stored or self.wake_when_idle:
                    self.wake.set()

    def idle(self) -> bool:
        """Nothing to forward and no forwarding under way (--burst waits for it: a
        forwarding may store a chain's next step or a callback, due now)."""
        with self._lock:
            return not self._ended and not self.busy
