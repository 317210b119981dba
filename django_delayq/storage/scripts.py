"""The Lua scripts: one file per state transition in ``lua/``, each sent with only the
helpers of ``lua/_lib.lua`` it uses and only the keys it declares.

A script's call costs Redis for every key it is sent (about 1,000 instructions each) and
every ``local function`` of its text (about 450: Lua creates them on each call), so a script
carries only the helpers it names, and its header line ``-- KEYS: pending jobs ...`` says
which of a queue's keys it receives, in that order; the preamble binding them to the names
the helpers use (``P``, ``J``...) is generated here. The header of each file also documents
its ARGV, reply and errors; tests/test_store.py checks every file is listed here and has its
header.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

SCRIPTS = (
    "schedule",
    "schedule_plain",  # a plain job (storage/plain.py)
    "schedule_many",
    "claim",
    "ack",
    "fail",
    "extend",
    "settle",
    "recover",
    "release",
    "cancel",
    "keep",  # jobs cancelled in the outbox, kept as finished (storage/finished.py)
    "requeue",
    "run_now",
    "delete",
    "fetch",
    "upgrade",
    "occur",  # recurring schedules (storage/recurring.py)
    "batch_seal",  # batches (storage/batches.py): keys of one batch, not of a queue
    "batch_ended",
    "batch_cancel",
)

# The keys of a queue (store.KEY_KINDS) and the Lua names scripts know them by.
KEY_NAMES = {
    "pending": "P",
    "running": "R",
    "dead": "D",
    "jobs": "J",
    "state": "S",
    "keys": "U",
    "wake": "W",
    "stats": "T",
    "errors": "E",
    "done": "F",
    "claims": "C",
    "meta": "M",  # layout 1 (0.1) only: upgrade.lua converts and deletes it
    "relayed": "X",
    "ranked": "Q",  # pending jobs with a priority (storage/control.py)
    "control": "K",  # a queue's pause state (storage/control.py)
    "links": "L",  # batches and chains (batches/links.py)
    "forward": "G",
    "groups": "A",  # limits per group (lua/claim.lua)
    "parked": "Y",
    "holds": "Z",
    "trace": "O",  # OpenTelemetry (monitoring/tracing.py, storage/traces.py)
    "finished": "V",  # finished jobs kept (jobs/finished.py)
    "kept": "I",
    # A batch's keys (keys.BATCH_KINDS), for the batch_* scripts.
    "batch": "B",
    "ended": "N",
    "members": "H",
}
_LUA_FUNCTION = re.compile(r"^local function (\w+)\(")
_KEYS_LINE = re.compile(r"^-- KEYS: ([a-z ]+)$", re.MULTILINE)


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str  # SHA1 of the source, what EVALSHA sends
    keys: tuple[str, ...]  # the kinds of key it receives, in order

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
    return resources.files("django_delayq.storage") / "lua"


def script_keys(name: str) -> tuple[str, ...]:
    """The kinds of key a script declares in its header, in the order it receives them."""
    body = (_lua_dir() / f"{name}.lua").read_text()
    match = _KEYS_LINE.search(body)
    if match is None:
        raise LookupError(f"{name}.lua has no '-- KEYS: ...' header line")
    kinds = tuple(match.group(1).split())
    unknown = [k for k in kinds if k not in KEY_NAMES]
    if unknown:
        raise LookupError(f"{name}.lua declares unknown keys {unknown}")
    return kinds


def _code(text: str) -> str:
    """Lua text without comments and string literals (to see which names it uses)."""
    text = re.sub(r"--[^\n]*", "", text)
    return re.sub(r"'(?:[^'\\]|\\.)*'", "''", text)


@cache
def script_source(name: str) -> str:
    """The text sent to Redis: the keys it declares as locals, the helpers of _lib.lua the
    script uses, then the script. Refuses a script whose text uses a key it did not declare."""
    if name not in SCRIPTS:
        raise ValueError(f"no django-delayq script named {name!r}")
    body = (_lua_dir() / f"{name}.lua").read_text()
    kinds = script_keys(name)
    preamble, parts = _lib_parts((_lua_dir() / "_lib.lua").read_text())
    needed: set[str] = set()
    text = body
    while True:
        more = {h for h, _ in parts if h not in needed and re.search(rf"\b{h}\b", text)}
        if not more:
            break
        needed |= more
        text = body + "".join(t for h, t in parts if h in needed)
    names = [KEY_NAMES[k] for k in kinds]
    used = set(re.findall(r"\b([A-Z])\b", _code(text))) & set(KEY_NAMES.values())
    if used - set(names):
        raise LookupError(
            f"{name}.lua (with its helpers) uses keys {sorted(used - set(names))} that its "
            "'-- KEYS:' line does not declare"
        )
    locals_ = ", ".join(names)
    keys = ", ".join(f"KEYS[{i}]" for i in range(1, len(names) + 1))
    declare = f"local {locals_} = {keys}\n"
    return preamble + declare + "".join(t for h, t in parts if h in needed) + "\n" + body


@cache
def script(name: str) -> Script:
    source = script_source(name)
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest(), script_keys(name))


def lib_constant(name: str, file: str = "_lib") -> float:
    """A numeric constant of _lib.lua, or of script ``file`` (``local NAME = 123``), so
    Python and Lua share one."""
    match = re.search(
        rf"^local {name} = ([0-9.]+)$", (_lua_dir() / f"{file}.lua").read_text(), re.MULTILINE
    )
    if match is None:
        raise LookupError(f"{file}.lua defines no constant {name}")
    return float(match.group(1))
