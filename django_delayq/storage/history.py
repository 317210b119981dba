"""A queue's history: per minute, jobs done, attempts failed, jobs dead and a histogram of
lateness (the start of an attempt minus its due time), kept :data:`KEEP_HOURS` hours.

Workers count in memory (worker/history.py) and flush here every few seconds: HINCRBY on one
hash per queue and :data:`SPAN` minutes, ``{prefix}:{<queue>}:history:<first minute>``
(``<first minute>``: the epoch minute the span starts, a multiple of SPAN), each flush also
setting the key's EXPIREAT to the end of its span plus :data:`KEEP_HOURS` and
:data:`MARGIN_HOURS`, so at most 445 keys exist per queue and the size is bounded without a
trimmer. Fields are ``<minute in the span><kind>``: ``7d`` jobs done in the span's minute 7, ``7f``
attempts failed, ``7x`` jobs dead, ``7e`` jobs expired (not started before their expiry), ``7l<b>``
attempts whose lateness fell in bucket ``b`` (:func:`bucket_of`); only counts above 0 are written.
Ten minutes a key keep even a queue with 40 lateness buckets a minute under Redis's
``hash-max-listpack-entries`` (512 by default): a compact listpack; hour keys of a busy queue (about
640 fields) became hash tables of five times the bytes (benchmarks/history.py).

Lateness buckets are log-scale, :data:`STEPS` per doubling: bucket 0 holds lateness under
1 ms (or negative: started before due), bucket ``b >= 1`` holds [2^((b-1)/4), 2^(b/4)) ms. A
percentile is read as the bucket's geometric middle, so it is within 2^(1/8) - 1 (9.1 %) of
the true value (of the sample at that rank); histograms of several minutes or workers add up
exactly, so a wider point of the chart is as precise as a minute.

The due time of each claimed job comes with the claim's reply (lua/claim.lua), so every
attempt's lateness is counted, at no cost beyond one ``ZMSCORE`` inside the claim.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_delayq.storage.ops import Op, Policy
from django_delayq.storage.replies import pairs
from django_delayq.storage.scripts import lib_constant

KEEP_HOURS = 72  # hours of minutes readable
MARGIN_HOURS = 2  # a key lives to the end of its span + KEEP_HOURS + MARGIN_HOURS
SPAN = 10  # minutes a key
STEPS = 4  # lateness buckets per doubling
MAX_BUCKET = 127  # 2^(126/4) ms: about 34 days; anything later shares it
ERROR_BOUND = 2 ** (1 / (2 * STEPS)) - 1  # a percentile's largest relative error
BAND = int(lib_constant("BAND"))  # a ranked score is (100 - priority) * BAND + due
KINDS = ("d", "f", "x", "e")  # jobs done, attempts failed, jobs dead, jobs expired
ONCE = Policy.ONCE

if TYPE_CHECKING:
    from django_delayq.storage.calls import Calls


def bucket_of(lateness_ms: float) -> int:
    """The lateness bucket of ``lateness_ms`` (see the module docstring)."""
    if lateness_ms < 1:
        return 0
    return min(1 + int(math.log2(lateness_ms) * STEPS), MAX_BUCKET)


def bucket_value(bucket: int) -> float:
    """The milliseconds a bucket stands for: its geometric middle (0 for bucket 0)."""
    if bucket <= 0:
        return 0.0
    return 2 ** ((bucket - 0.5) / STEPS)


def percentile(histogram: Mapping[int, int], fraction: float) -> float | None:
    """The ``fraction`` (0..1) percentile of a histogram (bucket -> count), in ms; None
    when it is empty."""
    total = sum(histogram.values())
    if total <= 0:
        return None
    rank = max(math.ceil(fraction * total), 1)
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return bucket_value(bucket)
    return bucket_value(max(histogram))  # unreachable: seen ends at total


@dataclass
class Point:
    """One point of a queue's history: ``minutes`` minutes from ``start`` (epoch s)."""

    start: float
    minutes: int
    done: int = 0
    failed: int = 0
    dead: int = 0
    lateness: dict[int, int] = field(default_factory=dict)  # bucket -> attempts
    expired: int = 0  # jobs not started before their expiry: never run

    @property
    def p50(self) -> float | None:
        return percentile(self.lateness, 0.5)

    @property
    def p99(self) -> float | None:
        return percentile(self.lateness, 0.99)


def _int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number < 2**53 else None


class HistoryStore:
    """A Store's history (``store.history``): the per-minute counts workers flush, and the
    points the dashboard reads."""

    def __init__(self, store: Calls) -> None:
        self._store = store

    def __call__(self, queue: str, now: float, minutes: int = 60, step: int = 1) -> list[Point]:
        """0.7's ``store.history(queue, now, ...)``: :meth:`points`, with a warning."""
        warnings.warn(
            "store.history(queue, now, ...) is store.history.points(queue, now, ...) since 0.8",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.points(queue, now, minutes, step)

    def ops(
        self, counts: Mapping[tuple[str, int], Mapping[str, int]]
    ) -> tuple[list[Op], list[tuple[str, int, str, int]]]:
        """HINCRBY of ``counts`` ((queue, epoch minute) -> field -> count, field one of
        KINDS or ``l<bucket>``), then the EXPIREAT of each key touched; and what each
        HINCRBY adds (queue, minute, field, count). Sent once only (Policy.ONCE)."""
        ops: list[Op] = []
        adds: list[tuple[str, int, str, int]] = []
        spans: dict[str, int] = {}
        for (queue, minute), fields in counts.items():
            span = minute - minute % SPAN
            key = self._store.history_key(queue, span)
            for name, count in fields.items():
                if count > 0:
                    field_name = f"{minute - span}{name}"
                    ops.append(
                        self._store.command(
                            b"HINCRBY", key, field_name, count, route=key, policy=ONCE
                        )
                    )
                    adds.append((queue, minute, name, count))
            spans[key] = span
        for key, span in spans.items():
            until = (span + SPAN) * 60 + (KEEP_HOURS + MARGIN_HOURS) * 3600
            ops.append(self._store.command(b"EXPIREAT", key, until, route=key))
        return ops, adds

    def flush(
        self, counts: Mapping[tuple[str, int], Mapping[str, int]]
    ) -> tuple[dict[tuple[str, int], dict[str, int]], Exception | None]:
        """Write ``counts`` (see :meth:`ops`) in one round trip per node: the
        counts Redis did not take (a reply lost after Redis ran one: counted again by
        the next flush, the rare double count a metric may have) and the first error."""
        ops, adds = self.ops(counts)
        left: dict[tuple[str, int], dict[str, int]] = {}
        error: Exception | None = None
        results = self._store.run(ops) if ops else []
        for (queue, minute, name, count), result in zip(adds, results, strict=False):
            if isinstance(result, Exception):
                error = error or result
                left.setdefault((queue, minute), {})[name] = count
        for result in results[len(adds) :]:
            if isinstance(result, Exception):
                error = error or result
        return left, error

    def points(self, queue: str, now: float, minutes: int = 60, step: int = 1) -> list[Point]:
        """The last ``minutes`` minutes of ``queue`` up to ``now`` (epoch s, its minute
        included), oldest first, ``step`` minutes a point. Garbage fields are skipped."""
        minutes = max(1, min(minutes, KEEP_HOURS * 60))
        step = max(1, step)
        last = int(now // 60)
        first = last - -(-minutes // step) * step + 1  # whole points, the last one ends now
        points = [Point(m * 60.0, step) for m in range(first, last + 1, step)]
        spans = list(range(first - first % SPAN, last + 1, SPAN))
        keys = [self._store.history_key(queue, span) for span in spans]
        replies = self._store.run([self._store.command(b"HGETALL", key, route=key) for key in keys])
        for span, reply in zip(spans, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            for raw_field, raw_value in pairs(reply):
                self._add(points, first, step, span, raw_field, raw_value)
        return points

    @staticmethod
    def _add(points: list[Point], first: int, step: int, span: int, raw: Any, value: Any) -> None:
        name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        digits = len(name) - len(name.lstrip("0123456789"))
        count = _int(value)
        if not 0 < digits <= 2 or count is None or not 0 <= int(name[:digits]) < SPAN:
            return
        minute = span + int(name[:digits])
        index = (minute - first) // step
        if minute < first or index >= len(points):
            return
        point, kind = points[index], name[digits:]
        if kind == "d":
            point.done += count
        elif kind == "f":
            point.failed += count
        elif kind == "x":
            point.dead += count
        elif kind == "e":
            point.expired += count
        elif kind[:1] == "l" and (bucket := _int(kind[1:])) is not None:
            point.lateness[bucket] = point.lateness.get(bucket, 0) + count
