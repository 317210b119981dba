"""Occurrence ids (a leaf module: ``django_delayq.jobs.job`` reads a fire time from an id).

An occurrence's id has a ULID's shape (26 Crockford base-32 digits), so the admin and
``id_timestamp()`` read its fire time like a job's creation time: 48 bits of fire time,
16 bits of TAG (an occurrence is known by its id alone, without a database query), 40 bits
of a hash of the schedule's name (found again when it is claimed) and 24 bits of its
version (a hash of the definition's digest and generation), so a changed schedule's
occurrences never share an id, or a tombstone, with the old one's.
"""

from __future__ import annotations

import functools
import hashlib

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
TAG = 0xD7C3  # 16 bits that mark an occurrence's id (an ordinary ULID has them by chance
# once in 65,536: its start then costs one look at the known name hashes)
TAG_BITS = 16
NAME_BITS = 40
VERSION_BITS = 24


@functools.lru_cache(maxsize=200_000)
def name_hash(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=5).digest(), "big")


@functools.lru_cache(maxsize=200_000)
def version_hash(digest: str, generation: int) -> int:
    raw = hashlib.blake2b(f"{digest}/{generation}".encode(), digest_size=3).digest()
    return int.from_bytes(raw, "big")


def _digits(value: int, count: int) -> str:
    """``value`` as ``count`` Crockford base-32 digits."""
    digits = []
    for _ in range(count):
        digits.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(digits))


@functools.lru_cache(maxsize=200_000)
def _tail(name: str, version: int) -> str:
    """The id's last 16 digits (its low 80 bits: tag, name hash, version)."""
    return _digits((TAG << 64) | (name_hash(name) << VERSION_BITS) | version, 16)


@functools.lru_cache(maxsize=4096)
def _head(fire_ms: int) -> str:
    """The id's first 10 digits (the fire time, above bit 80): every schedule firing at
    that time shares them."""
    return _digits(fire_ms, 10)


def occurrence_id(name: str, version: int, fire_ms: int) -> str:
    return _head(fire_ms) + _tail(name, version)


# Characters 10 to 12 of a 26-character id hold bits 65 to 79: the tag's top 15 bits.
_TAG_HEAD = "".join(_CROCKFORD[(TAG >> shift) & 31] for shift in (11, 6, 1))


def may_be_occurrence(job_id: str) -> bool:
    """Whether ``job_id`` may be an occurrence's: its tag's first characters are there. An
    ordinary job id (every job a worker runs asks) is turned away by one comparison of
    three characters, not 26 lookups; 1 in 32,768 passes and is parsed in full."""
    return len(job_id) == 26 and job_id[10:13] == _TAG_HEAD


_AS_INT = str.maketrans(_CROCKFORD, "0123456789abcdefghijklmnopqrstuv")
_DIGITS = frozenset(_CROCKFORD)


def parse_occurrence_id(job_id: str) -> tuple[int, int, int] | None:
    """(fire_ms, name hash, version) of an occurrence's id; None for any other id."""
    if not may_be_occurrence(job_id) or not _DIGITS.issuperset(job_id):
        return None
    value = int(job_id.translate(_AS_INT), 32)
    if (value >> 64) & 0xFFFF != TAG:
        return None
    return value >> 80, (value >> VERSION_BITS) & ((1 << NAME_BITS) - 1), value & 0xFFFFFF
