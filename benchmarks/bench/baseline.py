"""Today's transitions run with another git ref's Lua (engine_cost.py ``--baseline <ref>``).

The ref's ``storage/scripts.py`` and ``storage/lua/`` are taken out of git (``git show``,
``git archive``) into a temporary directory and its scripts.py is loaded from there, reading
its own Lua; the Store's calls then send that ref's scripts (``calls.script`` swapped while a
baseline case runs). Only the Lua differs: the Python building each call and parsing its
reply is this checkout's, so the ref's scripts must take the same KEYS, ARGV and reply (a
change of the Lua alone, such as issue 35's include split).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
LUA = "django_delayq/storage/lua"


def scripts_of(ref: str, into: Path) -> Any:
    """The scripts module of git ``ref``, reading that ref's Lua (copied under ``into``)."""
    archive = subprocess.run(
        ["git", "archive", ref, LUA], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    source = subprocess.run(
        ["git", "show", f"{ref}:django_delayq/storage/scripts.py"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    path = into / "baseline_scripts.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("delayq_baseline_scripts", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    module._lua_dir = lambda: into / LUA  # its own Lua, not this checkout's
    return module


@contextmanager
def baseline_cases(ref: str, cases: list[Any]) -> Iterator[list[Any]]:
    """``cases`` again, group ``baseline <ref>``, each running with the ref's scripts."""
    from django_delayq.storage import calls

    with tempfile.TemporaryDirectory(prefix="delayq-baseline-") as tmp:
        old = scripts_of(ref, Path(tmp))
        yield [
            dataclasses.replace(
                case, group=f"baseline {ref}", setup=_swapped(calls, old.script, case.setup)
            )
            for case in cases
            if all(name in old.SCRIPTS for name in case.needs)  # the ref has its scripts
        ]


def _swapped(calls: Any, script: Any, setup: Any) -> Any:
    """A setup that makes the Store send ``script(name)``'s Lua, then runs ``setup``."""

    def run(ctx: dict[str, Any]) -> Any:
        use(calls, ctx["store"], script)
        return setup(ctx)

    return run


def use(calls: Any, store: Any, script: Any) -> None:
    """The Store sends ``script(name)``'s Lua from now on (its packed heads dropped)."""
    calls.script = script
    store._heads.clear()


def now_cases(cases: list[Any], calls: Any, script: Any) -> list[Any]:
    """``cases`` as they are, each first putting this checkout's scripts back."""
    return [dataclasses.replace(case, setup=_swapped(calls, script, case.setup)) for case in cases]
