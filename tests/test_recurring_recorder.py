"""recurring/recorder.py: claims hand their occurrences' durable records to one thread,
which commits them before any of those occurrences runs; records that arrive while a
commit is under way go into the next one; a failed commit still lets the tasks run."""

from __future__ import annotations

import threading

from django_delayq.recurring.recorder import Recorder


def test_records_handed_in_during_a_commit_share_the_next_one():
    entered, release = threading.Event(), threading.Event()
    commits: list[dict] = []

    def write(records):
        commits.append(dict(records))
        if len(commits) == 1:
            entered.set()
            release.wait(10)

    recorder = Recorder(write)
    first = recorder.submit({1: (1000, "A" * 26, "running")})
    assert entered.wait(10)
    second = recorder.submit({2: (2000, "B" * 26, "running")})
    third = recorder.submit({2: (1000, "C" * 26, "running"), 3: (3000, "D" * 26, "skipped")})
    assert not first.is_set() and not second.is_set()  # not before their commit
    release.set()
    assert first.wait(10) and second.wait(10) and third.wait(10)
    assert commits == [
        {1: (1000, "A" * 26, "running")},
        # one commit for both, each schedule's latest fire time
        {2: (2000, "B" * 26, "running"), 3: (3000, "D" * 26, "skipped")},
    ]


def test_a_failed_commit_still_lets_the_occurrences_run():
    def write(records):
        raise RuntimeError("the database went away")

    recorder = Recorder(write)
    assert recorder.submit({1: (1000, "A" * 26, "running")}).wait(10)
    assert recorder.submit({1: (2000, "A" * 26, "running")}).wait(10)  # the thread lives on


def test_no_event_is_lost_when_claims_race():
    """Four claiming threads hand in 2,000 batches each while commits run: every event is
    set, and every schedule's latest fire time was written."""
    written: dict[int, int] = {}

    def write(records):
        for hashed, (fire, _, _) in records.items():
            written[hashed] = max(written.get(hashed, 0), fire)

    recorder = Recorder(write)
    events: list[threading.Event] = []
    lock = threading.Lock()

    def claimer(worker: int) -> None:
        for n in range(2000):
            event = recorder.submit({worker: (n, "A" * 26, "running")})
            with lock:
                events.append(event)

    threads = [threading.Thread(target=claimer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(event.wait(10) for event in events)
    assert written == dict.fromkeys(range(4), 1999)
