"""What the scripts keep beside a job's record and change as it runs, read in Python.

- ``state``: ``"<attempts>|<lease token>"`` (``|~<token>`` once the attempt is settled);
  a lease token is ``<instance>#<counter>``, the instance being the worker's name with its
  reserved characters encoded (:func:`encode_instance_name`) and a random suffix.
- ``errors``: each error of the job framed as ``"<length>\\n<JSON>"`` (``fail.lua`` appends
  them; :func:`frame_error` writes one the same way).

The record itself (what the producer decided) is :mod:`django_delayq.jobs.record`.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

# What a worker name may not hold as is in its instance name, which starts every lease token
# (``<instance>#<counter>``, kept in the state hash as ``<n>|<token>`` or ``<n>|~<token>``)
# and names its fields of the claims hash (``<instance>`` and ``<instance>/r``, whose values
# are ``<token>\n<ids>``): '%' (the escape), '~' (a settled attempt; also the separator of
# the name and the instance's random suffix), '|', '#', '/', braces (a cluster hash tag in a
# roster key), whitespace and every other character that is not printable.
_NAME_RESERVED = frozenset("%~|#/{}")


def parse_state(raw: bytes | str | None) -> tuple[int, str | None]:
    """``"<attempts>|<token>"`` (or ``|~<token>`` once the attempt is settled) ->
    (attempts, token or None); garbage reads as (0, None)."""
    if not raw:
        return 0, None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    count, bar, token = raw.partition("|")
    if not bar or not count.isdigit() or len(count) > 9:
        return 0, None
    return int(count), token.removeprefix("~") or None


def worker_of(token: str | None) -> str | None:
    """The worker instance named in a lease token (``<instance>#<counter>``)."""
    if not token:
        return None
    return token.rpartition("#")[0] or token


def encode_instance_name(name: str) -> str:
    """``name`` with its reserved characters percent-encoded (their UTF-8 bytes, as in URLs),
    so that any name a worker is given ("~x", "a|b", "w/r") starts an instance name and lease
    tokens the scripts read back unchanged; distinct names stay distinct. Plain names
    ("web-1:4242", "café") are left as they are. ValueError when UTF-8 cannot carry the name
    (a lone surrogate)."""
    if type(name) is not str or not name:
        raise ValueError(f"worker name {name!r} is not a name: pass a non-empty str")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise ValueError(
            f"worker name {name!r} holds characters UTF-8 cannot carry (a lone surrogate, "
            "from bytes the terminal could not decode): pass a name of printable text"
        ) from None
    return "".join(
        "".join(f"%{b:02X}" for b in c.encode())
        if c in _NAME_RESERVED or c.isspace() or not c.isprintable()
        else c
        for c in name
    )


def shown_instance(instance: str | None) -> str:
    """A worker instance id (``<encoded name>~<suffix>``, in lease tokens and the roster) as
    people read it: its name decoded, ``host:42%2F1~1a2b3c4d`` -> ``host:42/1~1a2b3c4d`` (a
    supervisor's children are named ``<name>/<slot>``). For display only: the encoded id
    stays the key."""
    if not instance:
        return ""
    name, tilde, suffix = instance.rpartition("~")
    return f"{unquote(name)}~{suffix}" if tilde else unquote(instance)


def parse_errors(raw: bytes | str | None) -> list[dict]:
    """The framed error list (``"<length>\\n<JSON>"`` each) as dicts; damage is skipped."""
    if not raw:
        return []
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    errors, pos = [], 0
    while pos < len(raw):
        newline = raw.find(b"\n", pos)
        try:
            length = int(raw[pos:newline]) if newline > pos else -1
        except ValueError:
            break
        if length < 0:
            break
        chunk = raw[newline + 1 : newline + 1 + length]
        pos = newline + 1 + length
        try:
            error = json.loads(chunk)
        except ValueError:
            error = {"type": "unknown", "message": chunk.decode("utf-8", "replace")}
        errors.append(error if isinstance(error, dict) else {"message": str(error)})
    return errors


def frame_error(error: dict) -> bytes:
    """One error as fail.lua appends it (what parse_errors reads)."""
    data = json.dumps(error, ensure_ascii=False, default=str).encode()
    return b"%d\n%s" % (len(data), data)


def last_error_of(errors: list[dict]) -> str | None:
    """The last error as one line, ``"<type>: <message>"`` (Job.last_error)."""
    if not errors:
        return None
    last = errors[-1]
    kind, message = str(last.get("type") or ""), str(last.get("message") or "")
    return f"{kind}: {message}" if kind else message
