"""The Lua's shape (storage/scripts.py): keys bound to the names of their kinds, never to one
letter; includes and entries short enough to read."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from django_delayq.storage.scripts import KEY_NAMES, SCRIPTS, lua_name, script_keys, script_source

LUA = resources.files("django_delayq.storage") / "lua"
INCLUDE_MAX, ENTRY_MAX = 250, 200


def _key_line(source: str) -> tuple[list[str], list[str]]:
    """The first line of a script's source, ``local <names> = KEYS[1], ...``: names, values."""
    match = re.match(r"local ([\w, ]+) = ([\w\[\], ]+)\n", source)
    assert match, source[:200]
    return match.group(1).split(", "), match.group(2).split(", ")


def _one_letter_keys(code: str) -> list[str]:
    """The one-letter locals of Lua text bound to a key: ``local P = KEYS[1]``, ``local R =
    running`` (a list of names = a list of values, paired in order)."""
    keyish = re.compile(r"KEYS\[\d+\]|" + "|".join(KEY_NAMES.values()))
    bad = []
    for lhs, rhs in re.findall(r"^\s*local\s+([\w ,]+?)\s*=\s*([^\n]+)", code, re.M):
        for name, value in zip(lhs.split(","), rhs.split(","), strict=False):
            if len(name.strip()) == 1 and keyish.fullmatch(value.strip()):
                bad.append(name.strip())
    return bad


@pytest.mark.parametrize("name", SCRIPTS)
def test_keys_are_bound_to_the_names_of_their_kinds(name):
    source = script_source(name)
    names, values = _key_line(source)
    kinds = script_keys(name)
    assert names == [lua_name(k) for k in kinds]
    assert values == [f"KEYS[{i}]" for i in range(1, len(kinds) + 1)]
    assert _one_letter_keys(re.sub(r"--[^\n]*", "", source)) == [], name


def test_the_one_letter_check_fails_on_one():
    code = "local P, jobs = KEYS[1], KEYS[2]\nlocal R = running\n"
    code += "local s = redis.call('GET', jobs)\n"  # a value read from a key: not a key
    assert _one_letter_keys(code) == ["P", "R"]


def test_includes_and_entries_are_short():
    for path in (LUA / "include").iterdir():
        assert len(path.read_text().splitlines()) <= INCLUDE_MAX, path.name
    for name in SCRIPTS:
        assert len((LUA / f"{name}.lua").read_text().splitlines()) <= ENTRY_MAX, name
