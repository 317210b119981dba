"""The dashboard's History section: per queue, jobs done, attempts failed and jobs dead, and
the lateness p50 / p99 (storage/history.py), over a window the ``?history=`` parameter picks
(1 h, 24 h, 72 h), drawn as inline SVG made of numbers computed here; every text (queue
names, the values in titles) goes through the template's escaping. Nothing is loaded from
outside the page.

A chart is as wide as its table (a row of its own under the queue's numbers: it was a
300 x 48 px sparkline, a sliver at 420 px): its SVG stretches its viewBox's x (the
lines keep their width, ``vector-effect``), and under it a time axis of five labels at
their bars, in the admin's time zone, the last with the zone's abbreviation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.dateformat import format as format_date
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_delayq.conf import delayq_settings
from django_delayq.jobs.times import to_datetime
from django_delayq.storage.history import Point
from django_delayq.storage.store import Store


@dataclass(frozen=True)
class Window:
    key: str  # the ?history= value
    label: Any  # shown on its link
    minutes: int
    step: int  # minutes per point


WINDOWS = (
    Window("1h", _("Last hour"), 60, 1),
    Window("24h", _("Last 24 hours"), 24 * 60, 10),
    Window("72h", _("Last 72 hours"), 72 * 60, 30),
)
DEFAULT_WINDOW = WINDOWS[0]
BAR = 5  # viewBox units per point (the SVG stretches them to the chart's width)
HEIGHT = 80  # viewBox units and px of each panel
TICKS = 5  # labels of the time axis, the first and last bars' included


def window_of(value: str | None) -> Window:
    """The window ``?history=`` names (the first when missing or unknown)."""
    return next((w for w in WINDOWS if w.key == value), DEFAULT_WINDOW)


def _ms_text(value: float | None) -> str:
    """Lateness as a short text: "-" when no attempt started, else ms / s / min / h."""
    if value is None:
        return "-"
    if value < 1000:
        return gettext("%(value)s ms") % {"value": f"{value:.0f}"}
    if value < 60_000:
        return gettext("%(value)s s") % {"value": f"{value / 1000:.1f}"}
    if value < 3_600_000:
        return gettext("%(value)s min") % {"value": f"{value / 60_000:.1f}"}
    return gettext("%(value)s h") % {"value": f"{value / 3_600_000:.1f}"}


def _late_y(value: float | None, top: float) -> float | None:
    """The y of a lateness on the log scale from 1 ms (the bottom) to ``top`` ms."""
    if value is None:
        return None
    span = math.log10(max(top, 10.0))
    return round(HEIGHT - min(math.log10(max(value, 1.0)) / span, 1.0) * HEIGHT, 1)


def time_axis(points: list[Point]) -> list[dict[str, Any]]:
    """The labels under a chart: TICKS bars' start times, each at its bar's middle (in
    percent of the width), the last with the zone's abbreviation; the date too when the
    window spans days."""
    if not points:
        return []
    days = points[-1].start - points[0].start >= 86_400
    shape = "M j, H:i" if days else "H:i"
    count = len(points)
    ticks = []
    for index in sorted({min(i * count // (TICKS - 1), count - 1) for i in range(TICKS)}):
        moment = timezone.localtime(to_datetime(points[index].start))
        last = index == count - 1
        ticks.append(
            {
                "left": round((index + 0.5) / count * 100, 2),
                "label": format_date(moment, shape + (" T" if last else "")),
                "edge": "first" if index == 0 else "last" if last else "",
            }
        )
    return ticks


def history_chart(points: list[Point]) -> dict[str, Any]:
    """The numbers of one queue's chart: stacked bars (done, failed; dead marked) and the
    p50 / p99 lines (log scale), with a title per point."""
    peak = max((p.done + p.failed for p in points), default=0) or 1
    p50s = [p.p50 for p in points]
    p99s = [p.p99 for p in points]
    top = max((v for v in p99s if v is not None), default=1000.0)
    bars = []
    for i, p in enumerate(points):
        done_h = round(p.done / peak * HEIGHT, 1)
        failed_h = round(p.failed / peak * HEIGHT, 1)
        bars.append(
            {
                "x": i * BAR,
                "done_y": round(HEIGHT - done_h, 1),
                "done_h": done_h,
                "failed_y": round(HEIGHT - done_h - failed_h, 1),
                "failed_h": failed_h,
                "point": p,
                "at": to_datetime(p.start),
                "p50": _ms_text(p.p50),
                "p99": _ms_text(p.p99),
            }
        )
    lines = {}
    for name, values in (("p50", p50s), ("p99", p99s)):
        ys = [(i * BAR + BAR / 2, _late_y(v, top)) for i, v in enumerate(values)]
        lines[name] = " ".join(f"{x:g},{y:g}" for x, y in ys if y is not None)
    worst = [v for v in p99s if v is not None]
    return {
        "bars": bars,
        "width": len(points) * BAR,
        "height": HEIGHT,
        "peak": peak,
        "lines": lines,
        "top": _ms_text(top),
        "done": sum(p.done for p in points),
        "failed": sum(p.failed for p in points),
        "dead": sum(p.dead for p in points),
        "worst_p99": _ms_text(max(worst)) if worst else "-",
        "axis": time_axis(points),
    }


def history_context(store: Store, queues: list[str], now: float, chosen: str | None) -> dict:
    """The dashboard's History section: the windows (links), the one shown, a chart per
    queue (one round trip per queue: HGETALL of the window's hour keys)."""
    window = window_of(chosen)
    charts = []
    for queue in queues:
        points = store.history.points(queue, now, minutes=window.minutes, step=window.step)
        charts.append({"name": queue, "chart": history_chart(points)})
    return {
        "history_off": delayq_settings.HISTORY is not True,
        "history_windows": WINDOWS,
        "history_window": window,
        "history": charts,
    }
