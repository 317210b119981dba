"""Job arguments as JSON: the compact encoder django-delayq writes JSON with (``dumps``),
the check that a job's arguments come back from JSON equal, and the error that names the
first argument that would not (``refusal``).

A job's arguments are stored as JSON (:mod:`django_delayq.jobs.record`), so a value that JSON
would return changed (a tuple, a datetime, a dict with int keys, NaN) is refused when the job
is scheduled rather than reaching the task different from what the caller passed.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from json import encoder as _json_encoder
from typing import Any

from django_delayq.exceptions import SerializationError

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# Scalars of these exact types come back from JSON equal (floats only when finite).
_SCALARS = frozenset({str, int, bool, type(None)})
_HINT_TEXT = "decode bytes with errors='replace', or pass the data base64-encoded"


# _ENCODER's C encoder made once (JSONEncoder.encode makes it again on every call, a third
# of the time of a small job's arguments), without the circular-reference markers (a dict
# it would share between threads): a circular structure recurses until RecursionError,
# and _ENCODER.encode then raises what it raises (ValueError: Circular reference detected).
_C_ENCODE = (
    None
    if _json_encoder.c_make_encoder is None
    else _json_encoder.c_make_encoder(
        None,
        _ENCODER.default,
        _json_encoder.encode_basestring,
        None,
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
)


def dumps(value: Any) -> str:
    """``value`` as compact JSON (``_ENCODER``'s text: UTF-8 as is, NaN refused)."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODE(value, 0))
    except RecursionError:  # nested too deeply, or circular: _ENCODER's own error
        return _ENCODER.encode(value)


def comes_back_equal(args: list, args_text: str, kwargs: dict, kwargs_text: str) -> bool:
    """Whether ``args`` and ``kwargs``, encoded as ``args_text`` and ``kwargs_text``, come
    back from JSON equal. The ``loads`` (in C) runs only when an argument is not a plain
    str/int/bool/None/finite float. Raises what ``json.loads`` raises (RecursionError)."""
    if _scalars(args) and (
        not kwargs or (_scalars(kwargs.values()) and all(type(k) is str for k in kwargs))
    ):
        return True  # nothing that could come back changed: skip the loads() check
    return json.loads(args_text) == args and (not kwargs or json.loads(kwargs_text) == kwargs)


def refusal(task: str, args: list, kwargs: dict) -> SerializationError:
    """The error for arguments of ``task`` that would not come back equal from JSON: the
    structure is walked to name the first offending argument."""
    try:
        problems = (
            *(_find_unserializable(v, f"argument {i}") for i, v in enumerate(args)),
            *(_find_unserializable(v, f"argument {n!r}") for n, v in kwargs.items()),
        )
    except RecursionError:
        problems = (f"the arguments of {task} are nested too deeply for JSON",)
    for problem in problems:
        if problem:
            return SerializationError(f"{problem} (task {task})")
    return SerializationError(f"the arguments of {task} do not round-trip through JSON")


def _scalars(values: Any) -> bool:
    for value in values:
        kind = type(value)
        if kind not in _SCALARS and not (kind is float and math.isfinite(value)):
            return False
    return True


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _find_unserializable(value: Any, path: str) -> str | None:
    """Describe the first value under ``path`` that JSON would not return as is."""
    kind = type(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path} is {value!r}, which JSON cannot carry: pass a finite number or a string"
    if isinstance(value, str) and not _utf8(value):
        return f"{path} is a string with a lone surrogate, which UTF-8 cannot carry: {_HINT_TEXT}"
    if value is None or isinstance(value, (str, int, float)):
        return None  # subclasses (IntEnum, TextChoices) come back as their equal base value
    if kind is list:
        for index, item in enumerate(value):
            problem = _find_unserializable(item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if kind is dict:
        for key, item in value.items():
            if type(key) is str and not _utf8(key):
                return f"{path} has a key with a lone surrogate, which UTF-8 cannot carry"
            if type(key) is not str:
                return (
                    f"{path} has the key {key!r} ({type(key).__name__}); JSON object keys are "
                    "strings, so it would come back changed: use string keys"
                )
            problem = _find_unserializable(item, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    if kind is tuple:
        return f"{path} is a tuple, which JSON would return as a list: pass a list"
    hint = "pass a JSON type (str, int, float, bool, None, list, dict)"
    if isinstance(value, datetime):
        hint = "pass an ISO string (value.isoformat())"
    elif hasattr(value, "_meta") and hasattr(value, "pk"):
        hint = "pass its primary key and load it in the task"
    return f"{path} is a {kind.__module__}.{kind.__qualname__}, which JSON cannot carry: {hint}"
