"""The Lua scripts: one file per state transition in ``lua/``, each sent with only the keys
it declares and only the helpers of the includes (``lua/include/``) it declares.

An entry script (``lua/<name>.lua``, listed in SCRIPTS) starts with its header: the contract,
its ``-- KEYS: pending jobs ...`` line (which of a queue's keys it receives, in that order),
ARGV, reply, errors, what a repeated call answers. Then come its include lines, one per
concern it uses, e.g.::

    --- @include "base"
    --- @include "priority"

and then the transition's story. An include (``lua/include/<name>.lua``) holds ``local
function`` definitions and constants only, and may include others the same way. The text
sent to Redis is: the keys bound to locals named by their kind (``local pending, jobs =
KEYS[1], KEYS[2]``; the kind ``keys`` is ``unique_keys``, Lua's ``KEYS`` being taken), then
each include once, in the order asked (an include's own includes before it), then the entry.

A call costs Redis for every key it is sent (about 1,000 instructions each) and every
``local function`` of its text (about 450: Lua creates them on each call), so of an include
only the functions the script names (itself or through another helper) are sent; an
include's constants and comments always are. scripts.py refuses a script that uses a key its
``-- KEYS:`` line does not declare, calls a helper of an include it does not declare, or
binds a key's name to anything else (tests/test_scripts.py). To add an entry: the file, its
name in SCRIPTS, its header and its include lines (a script written against the old
``_lib.lua``, e.g. with ``P``/``J`` for its keys, takes the kinds' names and the includes of
the helpers it calls: ``base``, then ``wake`` for ``wake_worker`` (once ``wake``), ``leases``
for ``owned``, ``acks`` for ``ack_from``, ``lease_out`` for ``lease_out``...). An include's
leading comment block, up to its first blank line, is its head (sent whole); a general
path's helpers that a fast path must not pay for go in one function returning a table of
closures, made only where that path runs (``group_limits`` in group_limits.lua).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from django_delayq.storage.keys import BATCH_KINDS, KEY_KINDS

SCRIPTS = (
    "schedule",
    "schedule_plain",  # a plain job (storage/plain.py)
    "schedule_many",
    "claim",
    "claim_plain",  # claim.lua's path for a queue without features (worker/claiming.py)
    "ack",
    "fail",
    "expire",  # jobs not started before their expiry (storage/expiry.py)
    "extend",
    "settle",
    "recover",
    "release",
    "cancel",
    "keep",  # jobs cancelled in the outbox, kept as finished (storage/finished.py)
    "requeue",
    "run_now",
    "reschedule",  # a pending job's due time moved (storage/reschedule.py)
    "promote_followers",  # followers an older worker left waiting (storage/followers.py)
    "delete",
    "fetch",
    "upgrade",
    "occur",  # recurring schedules (storage/recurring.py)
    "batch_seal",  # batches (storage/batches.py): keys of one batch, not of a queue
    "batch_ended",
    "batch_cancel",
)

# The keys a script may declare: a queue's and a batch's (for the batch_* scripts).
KINDS = (*KEY_KINDS, *BATCH_KINDS)


def lua_name(kind: str) -> str:
    """The Lua local a key of this kind is bound to: its kind, but ``keys`` is ``unique_keys``."""
    return "unique_keys" if kind == "keys" else kind


KEY_NAMES = {kind: lua_name(kind) for kind in KINDS}
_LUA_FUNCTION = re.compile(r"^local function (\w+)\(")
_KEYS_LINE = re.compile(r"^-- KEYS: ([a-z ]+)$", re.MULTILINE)
_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str  # SHA1 of the source, what EVALSHA sends
    keys: tuple[str, ...]  # the kinds of key it receives, in order

    @property
    def sha_bytes(self) -> bytes:
        return self.sha.encode()


def _include_parts(text: str) -> tuple[str, list[tuple[str, str]]]:
    """An include as (its top-level statements and comments, [(helper name, its text)]).

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
    """Lua text without comments, string literals and fields (to see which names it uses)."""
    text = re.sub(r"--[^\n]*", "", text)
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "''", text)
    return re.sub(r"\.\s*\w+", ".", text)


def _includes(text: str, seen: list[str]) -> list[str]:
    """The includes ``text`` asks for, with theirs before them, each once (``seen`` first)."""
    for name in _INCLUDE.findall(text):
        if name not in seen:
            path = _lua_dir() / "include" / f"{name}.lua"
            if not path.is_file():
                raise LookupError(f"no Lua include named {name!r} (lua/include/{name}.lua)")
            _includes(path.read_text(), seen)
            seen.append(name)
    return seen


def _helpers(body: str, includes: list[str]) -> str:
    """The text of the includes: their constants and comments, and the functions the entry
    names, itself or through the functions it takes."""
    split = []
    for include in includes:
        head, _, rest = (_lua_dir() / "include" / f"{include}.lua").read_text().partition("\n\n")
        preamble, parts = _include_parts(rest)
        split.append((head + "\n\n" + preamble, parts))
    parts = [part for _, ps in split for part in ps]
    needed: set[str] = set()
    code = _code(body)
    while more := {h for h, _ in parts if h not in needed and re.search(rf"\b{h}\b", code)}:
        needed |= more
        code = _code(body + "".join(t for h, t in parts if h in needed))
    return "".join(pre + "".join(t for h, t in ps if h in needed) for pre, ps in split)


def _check_names(name: str, kinds: tuple[str, ...], text: str) -> None:
    """Refuse a script whose text (with its helpers) uses a key it does not declare, calls a
    helper of an include it did not ask for, or binds a key's name to anything else."""
    code = _code(text.split("\n", 1)[1])  # after the line binding the keys
    declared = {lua_name(k) for k in kinds}
    bound = re.findall(r"\blocal[ \t]+(?:function[ \t]+)?([\w \t,]+)", code)
    bound += re.findall(r"\bfunction\s*[\w.:]*\s*\(([\w\s,.]*)\)", code)
    bound += re.findall(r"\bfor[ \t]+([\w \t,]+?)[ \t]*(?:\bin\b|=)", code)
    names = {n for group in bound for n in re.findall(r"\w+", group)}
    if names & set(KEY_NAMES.values()):
        raise LookupError(
            f"{name}.lua binds {sorted(names & set(KEY_NAMES.values()))}: a key's name is its key"
        )
    used = set(re.findall(r"\b(\w+)\b(?!\s*=[^=])", code)) & set(KEY_NAMES.values())
    if used - declared:
        raise LookupError(
            f"{name}.lua (with its helpers) uses keys {sorted(used - declared)} that its "
            "'-- KEYS:' line does not declare"
        )
    defined = set(re.findall(r"^local function (\w+)\(", text, re.MULTILINE))
    everywhere = {
        h
        for path in (_lua_dir() / "include").iterdir()
        if path.name.endswith(".lua")
        for h in re.findall(r"^local function (\w+)\(", path.read_text(), re.MULTILINE)
    }
    missing = {h for h in everywhere - defined if re.search(rf"\b{h}\s*\(", code)}
    if missing:
        raise LookupError(f"{name}.lua calls {sorted(missing)} of an include it does not declare")


@cache
def script_source(name: str) -> str:
    """The text sent to Redis: the keys it declares as locals, the helpers of its includes it
    uses, then the script."""
    if name not in SCRIPTS:
        raise ValueError(f"no django-delayq script named {name!r}")
    body = (_lua_dir() / f"{name}.lua").read_text()
    kinds = script_keys(name)
    names = ", ".join(lua_name(k) for k in kinds)
    keys = ", ".join(f"KEYS[{i}]" for i in range(1, len(kinds) + 1))
    text = f"local {names} = {keys}\n" + _helpers(body, _includes(body, [])) + "\n" + body
    _check_names(name, kinds, text)
    return text


@cache
def script(name: str) -> Script:
    source = script_source(name)
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest(), script_keys(name))


def lib_constant(name: str, file: str | None = None) -> float:
    """A numeric constant (``local NAME = 123``) of the includes, or of script ``file``, so
    Python and Lua share one."""
    if file is None:
        paths = sorted((_lua_dir() / "include").iterdir(), key=lambda p: p.name)
    else:
        paths = [_lua_dir() / f"{file}.lua"]
    for path in paths:
        match = re.search(rf"^local {name} = ([0-9.]+)$", path.read_text(), re.MULTILINE)
        if match is not None:
            return float(match.group(1))
    raise LookupError(f"{file or 'no include'}.lua defines no constant {name}")
