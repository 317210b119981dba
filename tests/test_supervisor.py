"""The supervisor of ``delayq_worker --processes N`` (worker/supervisor.py) with stand-in
children: a small script started in place of ``python``, that records its argv and its
orders and acts as each test asks (exit at once, recycle, SIGKILL itself, signal the
supervisor). The same supervisor over real workers: tests/reliability/test_processes.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_delayq.management.commands import delayq_worker as command
from django_delayq.storage.roster import decode_description, encode_description
from django_delayq.worker import supervisor as sup
from django_delayq.worker.supervised import RECYCLED, resident_mb
from django_delayq.worker.supervisor import GAVE_UP, Supervisor, cpu_count

CHILD = """\
import json, os, signal, sys, time
from pathlib import Path

args = sys.argv[1:]
slot = args[args.index("--name") + 1].rsplit("/", 1)[1]
boss = int(args[args.index("--supervisor-pid") + 1])
state = Path(os.environ["FAKE_DIR"])
mode = os.environ["FAKE_MODE"]
starts = state / f"starts-{slot}"
n = int(starts.read_text()) + 1 if starts.exists() else 1
starts.write_text(str(n))
(state / f"argv-{slot}").write_text(json.dumps(args))


def orders():
    for line in sys.stdin:
        with open(state / f"orders-{slot}", "a") as out:
            out.write(line)
        yield line.strip()


if mode == "crash":
    sys.exit(1)
if mode == "burst":
    sys.exit(int(os.environ["FAKE_CODE"]) if slot == "1" else 0)
if mode == "recycle" and n == 1:
    sys.exit(75)
if mode == "killed" and slot == "1" and n == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if slot == "1" and mode in ("recycle", "killed", "term", "force"):
    want = "2" if mode == "recycle" else ""  # recycle: until both have been replaced
    while not all(
        (state / f"starts-{s}").exists() and (state / f"starts-{s}").read_text() >= want
        for s in ("1", "2")
    ):
        time.sleep(0.01)
    os.kill(boss, signal.SIGTERM)
for order in orders():
    if order == "stop" and mode == "force" and slot == "1":
        os.kill(boss, signal.SIGINT)
        continue  # wait for "force"
    sys.exit(0 if order == "stop" else 1)
sys.exit(0)  # end of file: the supervisor is gone
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """(run(mode, processes=2, **supervisor options) -> exit code, state directory)."""
    script = tmp_path / "child"
    script.write_text(f"#!{sys.executable}\n" + CHILD)
    script.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr(sup, "BACKOFF_FIRST", 0.01)  # restarts without the wait

    def run(mode: str, processes: int = 2, code: int = 0, **options) -> int:
        env = {"FAKE_DIR": str(state), "FAKE_MODE": mode, "FAKE_CODE": str(code)}
        supervisor = Supervisor(
            processes,
            ["--concurrency", "3"],
            name="box",
            env={**os.environ, **env},
            python=str(script),
            **options,
        )
        run.supervisor = supervisor
        return supervisor.run()

    return run, state


def starts(state: Path, slot: int) -> int:
    path = state / f"starts-{slot}"
    return int(path.read_text()) if path.exists() else 0


def orders(state: Path, slot: int) -> list[str]:
    path = state / f"orders-{slot}"
    return path.read_text().split() if path.exists() else []


def test_children_get_the_options_a_slot_name_and_the_supervisor_pid(fake):
    run, state = fake
    assert run("term") == 0
    for slot in (1, 2):
        argv = json.loads((state / f"argv-{slot}").read_text())
        assert argv == [
            "-m",
            "django",
            "delayq_worker",
            "--concurrency",
            "3",
            "--name",
            f"box/{slot}",
            "--supervisor-pid",
            str(os.getpid()),
            "--skip-checks",
        ]


def test_sigterm_is_relayed_as_stop_and_exits_0(fake):
    run, state = fake
    assert run("term") == 0
    assert orders(state, 1) == ["stop"] and orders(state, 2) == ["stop"]
    assert starts(state, 1) == starts(state, 2) == 1


def test_a_second_signal_forces_and_exits_1(fake):
    run, state = fake
    assert run("force") == 1
    assert orders(state, 1) == ["stop", "force"]
    assert orders(state, 2) == ["stop"]  # it had stopped already


def test_a_killed_child_is_restarted(fake):
    run, state = fake
    assert run("killed") == 0
    assert starts(state, 1) == 2 and starts(state, 2) == 1
    assert run.supervisor.restarts == 1


def test_a_child_that_recycles_itself_is_replaced(fake):
    run, state = fake
    assert run("recycle") == 0
    assert starts(state, 1) == 2 and starts(state, 2) == 2
    assert run.supervisor.recycles == 2 and run.supervisor.restarts == 2


def test_a_child_that_keeps_dying_at_start_makes_it_give_up(fake, caplog):
    run, state = fake
    assert run("crash", processes=1) == GAVE_UP
    assert starts(state, 1) == sup.GIVE_UP
    assert "died 5 times in a row" in caplog.text and "exit code 1" in caplog.text


@pytest.mark.parametrize(("code", "expected"), [(0, 0), (2, 2), (1, 1)])
def test_burst_children_that_finish_are_not_restarted(fake, code, expected):
    run, state = fake
    assert run("burst", code=code, burst=True) == expected
    assert starts(state, 1) == starts(state, 2) == 1


def test_processes_option(monkeypatch):
    seen = {}

    class Recorder:
        def __init__(self, processes, options, **kwargs):
            seen.update(processes=processes, options=options, **kwargs)

        def run(self):
            return 0

    monkeypatch.setattr(command, "Supervisor", Recorder)
    call_command(
        "delayq_worker",
        processes="2",
        concurrency=3,
        queues="default,emails",
        max_jobs=100,
        max_memory=512.0,
        no_relay=True,
        name="web",
    )
    assert seen["processes"] == 2 and seen["name"] == "web" and not seen["burst"]
    assert seen["options"] == [
        "--concurrency",
        "3",
        "-v",
        "1",
        "--queues",
        "default,emails",
        "--no-relay",
        "--max-jobs",
        "100",
        "--max-memory",
        "512.0",
    ]
    assert seen["env"]["DJANGO_SETTINGS_MODULE"] == "tests.settings"
    call_command("delayq_worker", processes="auto", burst=True)
    assert seen["processes"] == cpu_count() and seen["burst"]
    call_command("delayq_worker", max_jobs=5)  # a limit alone: one supervised process
    assert seen["processes"] == 1
    for bad in ("0", "-1", "two"):
        with pytest.raises(CommandError, match="--processes must be"):
            call_command("delayq_worker", processes=bad)
    with pytest.raises(CommandError, match="invalid queue name 'bad queue'"):
        call_command("delayq_worker", processes="2", queues="default,bad queue")
    with pytest.raises(CommandError, match="--max-jobs must be"):
        call_command("delayq_worker", max_jobs=0)
    with pytest.raises(CommandError, match="--max-memory must be"):
        call_command("delayq_worker", max_memory=-5.0)


def test_roster_carries_the_supervisor_pid():
    fields = dict(
        name="box/1",
        host="h",
        pid=11,
        queues=["default"],
        concurrency=1,
        version="0",
        uptime=1.0,
        every=1.0,
        ttl=3.0,
        running=[],
        done=0,
        failed=0,
        stopping=False,
        burst=False,
    )
    plain = decode_description("i~1", encode_description(**fields), 3000, time.time())
    assert plain.supervisor is None
    child = decode_description(
        "i~1", encode_description(**fields, supervisor=10), 3000, time.time()
    )
    assert child.supervisor == 10


@pytest.mark.django_db
def test_workers_tab_shows_the_supervisor(store, admin_client):
    from tests.test_admin import text, url
    from tests.test_admin_workers import beat

    beat(store, "box%2F1~1", name="box/1", supervisor=4200)
    beat(store, "solo~2", name="solo")
    body = text(admin_client.get(url("workers")))
    assert body.count("under supervisor pid 4200") == 1


def test_resident_memory_is_read():
    before = resident_mb()
    assert before is not None and before > 1
    block = b"x" * (64 * 2**20)
    assert resident_mb() >= before + 60
    del block


def test_describe_exit():
    assert sup.describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert sup.describe_exit(RECYCLED) == "exit code 75"


def test_the_supervisor_passes_async_concurrency_to_its_children(monkeypatch):
    seen = {}

    class Recorder:
        def __init__(self, processes, options, **kwargs):
            seen.update(options=options)

        def run(self):
            return 0

    monkeypatch.setattr(command, "Supervisor", Recorder)
    call_command("delayq_worker", processes="2", async_concurrency=100)
    options = seen["options"]
    assert options[options.index("--async-concurrency") + 1] == "100"
