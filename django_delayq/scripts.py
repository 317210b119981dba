"""The Lua scripts: one file per state transition in ``lua/``, each sent with only the
helpers of ``lua/_lib.lua`` it uses.

Lua creates every ``local function`` of a script's text on each call, so a script carries
only the helpers it names (all nineteen cost a schedule() about 6 us of Redis time). The
header of each file documents its KEYS, ARGV, reply and errors; ``tests/test_scripts.py``
checks every file is listed here and has its header.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

SCRIPTS = (
    "schedule",
    "schedule_many",
    "claim",
    "ack",
    "fail",
    "extend",
    "recover",
    "release",
    "cancel",
    "requeue",
    "run_now",
    "delete",
    "fetch",
)

_LUA_FUNCTION = re.compile(r"^local function (\w+)\(")


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str  # SHA1 of the source, what EVALSHA sends

    @property
    def sha_bytes(self) -> bytes:
        return self.sha.encode()


def _lib_parts(text: str) -> tuple[str, list[tuple[str, str]]]:
    """_lib.lua as (its top-level statements and comments, [(helper name, its text)]).

    A helper is a top-level ``local function`` with the comments above it, ending at a line
    ``end`` (or on its own line when that line ends with `` end``)."""
    preamble: list[str] = []
    parts: list[tuple[str, str]] = []
    current: list[str] = []  # comments and blank lines go with the helper below them
    name: str | None = None
    for line in text.splitlines(keepends=True):
        current.append(line)
        if name is None:
            match = _LUA_FUNCTION.match(line)
            if match:
                name = match.group(1)
                ended = line.rstrip().endswith(" end")  # a one-line helper
            elif line.strip() and not line.startswith("--"):  # a top-level statement
                preamble += current
                current = []
                continue
            else:
                continue
        else:
            ended = line.rstrip() == "end"
        if ended:
            parts.append((name, "".join(current)))
            current, name = [], None
    preamble += current
    return "".join(preamble), parts


def _lua_dir() -> resources.abc.Traversable:
    return resources.files("django_delayq") / "lua"


@cache
def script_source(name: str) -> str:
    """The text sent to Redis: the helpers of _lib.lua the script uses, then the script."""
    if name not in SCRIPTS:
        raise ValueError(f"no django-delayq script named {name!r}")
    body = (_lua_dir() / f"{name}.lua").read_text()
    preamble, parts = _lib_parts((_lua_dir() / "_lib.lua").read_text())
    needed: set[str] = set()
    text = body
    while True:
        more = {h for h, _ in parts if h not in needed and re.search(rf"\b{h}\b", text)}
        if not more:
            break
        needed |= more
        text = body + "".join(t for h, t in parts if h in needed)
    return preamble + "".join(t for h, t in parts if h in needed) + "\n" + body


@cache
def script(name: str) -> Script:
    source = script_source(name)
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


def lib_constant(name: str) -> float:
    """A numeric constant of _lib.lua (``local NAME = 123``), so Python and Lua share one."""
    match = re.search(
        rf"^local {name} = ([0-9.]+)$", (_lua_dir() / "_lib.lua").read_text(), re.MULTILINE
    )
    if match is None:
        raise LookupError(f"_lib.lua defines no constant {name}")
    return float(match.group(1))
