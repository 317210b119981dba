"""The printed table, the matrix table and the environment line."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from typing import Any


def fmt_value(value: Any, unit: str) -> str:
    if value is None or value != value:
        return "-"
    if unit == "jobs/s":
        return f"{value:,.0f} jobs/s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "us":
        return f"{value:,.0f} us" if value >= 10 else f"{value:.1f} us"
    if unit == "bytes":
        return f"{value:.0f} B"
    if unit == "count":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "cpu_s":
        return f"{value:.3f} s"
    return f"{value:.3g}"


def met_text(met: bool | None) -> str:
    return "-" if met is None else "met" if met else "NOT met"


def render(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    line = "  ".join("=" * w for w in widths)
    out = [line, "  ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows[1:]]
    out.append(line)
    return "\n".join(out)


def table(figures: list[dict]) -> str:
    rows = [("figure", "value", "baseline", "ratio", "target", "met")]
    for f in figures:
        rows.append(
            (
                f["label"],
                fmt_value(f["value"], f["unit"]),
                fmt_value(f["baseline"], f["unit"]),
                "-" if f["ratio"] is None else f"{f['ratio']:.2f}",
                f["target"],
                met_text(f["met"]),
            )
        )
    return render(rows)


def notes(figures: list[dict]) -> str:
    """One line per figure: its name (the JSON key), the runs, and its note."""
    lines = []
    for f in figures:
        runs = ", ".join(fmt_value(v, f["unit"]) for v in f["runs"])
        lines.append(f"- {f['name']}: runs {runs}. {f['note']}".rstrip())
    return "\n".join(lines)


def matrix_table(results: dict[str, dict[str, Any]]) -> str:
    """One row per figure, one column per variant (value, and met/NOT met)."""
    variants = list(results)
    order: list[str] = []
    figures: dict[tuple[str, str], dict] = {}
    for variant, result in results.items():
        for f in result.get("figures", []):
            if f["name"] not in order:
                order.append(f["name"])
            figures[(variant, f["name"])] = f
    rows = [("figure", *variants, "target")]
    for name in order:
        cells, target = [], "-"
        for variant in variants:
            f = figures.get((variant, name))
            if f is None:
                cells.append("not run")
                continue
            target = f["target"]
            mark = "" if f["met"] is None else f" {met_text(f['met'])}"
            ratio = "" if f["ratio"] is None else f" ({f['ratio']:.2f})"
            cells.append(fmt_value(f["value"], f["unit"]) + ratio + mark)
        rows.append((name, *cells, target))
    return render(rows) + "\n(ratio to the baseline in brackets; see each variant's table)"


def parser_name() -> str:
    """The reply parser redis-py uses here: "hiredis", or its own pure-Python one."""
    import redis.utils

    return "hiredis" if getattr(redis.utils, "HIREDIS_AVAILABLE", False) else "Python parser"


def environment(redis_client: Any) -> dict[str, Any]:
    import django
    import redis
    import redis.utils

    info = redis_client.info("server")
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "redis_py": redis.__version__,
        "hiredis": bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False)),
        "redis_server": info.get("redis_version"),
        "platform": platform.platform(),
    }
