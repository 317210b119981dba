"""The commands' options as a reader types them (issue 33): a typo of an option gets the
option it meant, as a typo of a queue does; ``--max-memory`` says its unit and takes one
(``10GB``), and refuses a size it cannot read, naming the value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_delayq.management.commands import delayq_worker as command
from django_delayq.management.parsing import SuggestingParser

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("name", "typed", "unknown", "meant"),
    [
        ("delayq_worker", ["--concurency", "4"], "--concurency 4", "--concurrency"),
        ("delayq_worker", ["--concurency=4"], "--concurency=4", "--concurrency"),
        ("delayq_worker", ["--max-memmory", "512"], "--max-memmory 512", "--max-memory"),
        ("delayq_status", ["--max-lagg", "5"], "--max-lagg 5", "--max-lag"),
        ("delayq_queue", ["pause", "default", "--froce"], "--froce", "--force"),
        ("delayq_upgrade", ["--dryrun"], "--dryrun", "--dry-run"),
    ],
)
def test_a_mistyped_option_gets_the_one_it_meant(name, typed, unknown, meant):
    with pytest.raises(CommandError) as raised:
        call_command(name, *typed)
    assert str(raised.value) == f"Error: unrecognized arguments: {unknown}; did you mean {meant}?"


def test_a_prefix_is_still_argparse_s_to_take(monkeypatch):
    """argparse takes an unambiguous prefix (allow_abbrev, on): ``--conc 3``."""
    seen = {}
    monkeypatch.setattr(command, "Supervisor", recorder(seen))
    call_command("delayq_worker", "--conc", "3", "--max-jobs", "5")
    assert seen["options"][:2] == ["--concurrency", "3"]


def recorder(seen: dict):
    """A Supervisor stand-in that keeps the children's options in ``seen``."""

    class Recorder:
        def __init__(self, processes, options, **kwargs):
            seen["options"] = options

        def run(self):
            return 0

    return Recorder


def test_an_option_close_to_none_is_refused_as_argparse_does():
    with pytest.raises(CommandError) as raised:
        call_command("delayq_worker", "--zzz")
    assert str(raised.value) == "Error: unrecognized arguments: --zzz"
    parser = command.Command().create_parser("manage.py", "delayq_worker")
    assert isinstance(parser, SuggestingParser)
    assert parser.meant(["-5"]) is None and parser.meant(["--supervisor-pd"]) is None  # hidden


@pytest.mark.slow  # a Django process: about a second
def test_a_mistyped_option_on_the_command_line():
    """What a terminal shows: the usage, then the line with the suggestion; exit 2."""
    run = subprocess.run(
        [sys.executable, "-m", "django", "delayq_worker", "--concurency", "4"],
        cwd=ROOT,
        env={
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": str(ROOT),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1].endswith(
        "error: unrecognized arguments: --concurency 4; did you mean --concurrency?"
    )


@pytest.mark.parametrize(
    ("typed", "megabytes"),
    [
        ("512", "512.0"),
        ("512MB", "512.0"),
        ("1.5GB", "1536.0"),
        ("2g", "2048.0"),
        ("300 MiB", "300.0"),
    ],
)
def test_max_memory_takes_mb_or_a_unit(monkeypatch, typed, megabytes):
    seen = {}
    monkeypatch.setattr(command, "Supervisor", recorder(seen))
    call_command("delayq_worker", "--max-memory", typed)
    assert seen["options"][-2:] == ["--max-memory", megabytes]  # the children get MB


@pytest.mark.parametrize("typed", ["10TB", "ten", "1.5.2GB", "-512"])
def test_max_memory_refuses_a_size_it_cannot_read_naming_it_and_the_unit(typed):
    with pytest.raises(CommandError) as raised:
        call_command("delayq_worker", "--max-memory", typed)
    assert str(raised.value) == (
        f"Error: argument --max-memory: {typed!r} is not a size: give MB (--max-memory 512) "
        "or a unit (512MB, 1.5GB)"
    )


def test_max_memory_s_help_says_mb():
    parser = command.Command().create_parser("manage.py", "delayq_worker")
    text = " ".join(parser.format_help().split())
    assert "--max-memory MB" in text and "above this many MB (or with a unit: 512MB, 1.5GB" in text
