"""The table ``compare.py`` prints: figures down, systems across, footnotes below."""

from __future__ import annotations

from typing import Any

# (key in a system's figures, label with {size} fields, format, workload)
FIGURES: list[tuple[str, str, str, str]] = [
    ("rate", "schedule, jobs/s ({rate:,} due in 1 h, 1 call each)", "{:,.0f}", "rate"),
    ("late_p50", "lateness p50, ms ({late} due over {late_seconds:g} s)", "{:,.1f}", "lateness"),
    ("late_p99", "lateness p99, ms", "{:,.1f}", "lateness"),
    ("late_min", "earliest start vs due, ms (< 0: early)", "{:,.1f}", "lateness"),
    ("drain", "drain, jobs/s ({drain:,} due at once, task 1)", "{:,.0f}", "drain"),
    ("drain_cpu", "worker CPU s per 1,000 jobs (drain)", "{:.2f}", "drain"),
    ("memory", "Redis bytes per pending job ({memory:,}, worker up)", "{:,.0f}", "memory"),
    ("rss", "worker RSS bytes per pending job (same)", "{:,.0f}", "memory"),
]

ARQ_ONE_PER_POLL = (
    "arq's worker polls its sorted set every poll_delay (0.5 s by default) and at max_jobs 1 "
    "starts one job per poll: 2 jobs a second, under the 20 a second due in the lateness "
    "workload, so jobs fall further behind through the run (arq's default is max_jobs 10: "
    "its own column)."
)

# What a reader needs to know to read a system's cell; (system, figure key) -> note.
NOTES: dict[tuple[str, str], str] = {
    ("huey", "late_p50"): "huey's consumer moves due tasks to the queue once per second "
    "(--scheduler-interval, default and minimum 1 s), so a task starts 0-1 s after it is due.",
    ("rq", "late_p50"): "RQ's scheduler moves due jobs to the queue once per second, and the "
    "default Worker forks a work horse per job.",
    ("rq", "late_min"): "RQ stores a scheduled job's time in whole seconds (the sorted-set "
    "score is an integer timestamp), so a job can start up to 1 s before it is due.",
    ("rq", "drain"): "RQ's default Worker forks a work horse per job (its documented "
    "production choice), so the task's client is also created once per job.",
    ("dramatiq", "late_p50"): "dramatiq's Redis consumers poll an idle queue with a backoff "
    "of up to the worker timeout (1 s by default), for the delay queue and again for the "
    "queue a due message is moved to.",
    ("celery", "memory"): "Celery's worker takes every ETA task from the broker at once and "
    "holds it in memory until due (next row); the Redis transport keeps a copy of each in "
    "its 'unacked' hash until the task is acknowledged (this row), and redelivers it if the "
    "visibility timeout (1 h by default) passes first.",
    ("arq", "rate"): "arq's enqueue_job is three round trips (WATCH, EXISTS, then MULTI, "
    "PSETEX, ZADD, EXEC); arq and saq calls are awaited through loop.run_until_complete from "
    "synchronous code, about 10 us of each call here.",
    ("arq", "late_p50"): ARQ_ONE_PER_POLL,
    ("arq", "drain"): ARQ_ONE_PER_POLL,
    ("arq-10", "late_p50"): "arq's worker polls its sorted set every poll_delay (0.5 s by "
    "default), so a job starts 0-0.5 s after it is due.",
    ("arq-10", "drain"): "arq's worker reads at most queue_read_limit due ids per poll (by "
    "default the larger of 5 x max_jobs and 100) every poll_delay (0.5 s), so by default it "
    "drains at most 200 jobs a second however short they are; at max_jobs 10 it runs up to 10 "
    "at once on its event loop (each awaiting its RPUSH), where every other column runs one "
    "job at a time.",
    ("saq", "late_p50"): "saq's worker moves due jobs to its queue once per second (its "
    "'schedule' timer, 1 s by default), so a job starts up to a second after it is due, "
    "sometimes more.",
    ("dramatiq", "memory"): "dramatiq's worker holds up to 1,000 delayed messages per worker "
    "thread in memory (next row, averaged over all jobs); every message also stays in Redis "
    "(this row) until it is acknowledged.",
}


def cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def title(entry: dict[str, Any], version: bool = True) -> str:
    """A column's heading: the label, the version, and the variant's setting if any."""
    text = entry["label"]
    if version:
        text += f" {entry['versions'].get('system', '?')}"
    return f"{text} ({entry['variant']})" if entry.get("variant") else text


def render(results: dict[str, Any], env: dict[str, Any], size: dict, quick: bool) -> str:
    names = list(results)
    header = ["figure"] + [title(results[n]) for n in names]
    rows, notes = [header], []

    def mark(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    for key, label, fmt, workload in FIGURES:
        row = [label.format(**size)]
        for name in names:
            figures, errors = results[name]["figures"], results[name]["errors"]
            if workload in errors:
                error = f"{title(results[name], version=False)}, {workload}: {errors[workload]}"
                text = "failed " + mark(error)
            else:
                text = cell(figures.get(key), fmt)
                note = NOTES.get((name, key))
                if note and key in figures:
                    text += " " + mark(note)
            row.append(text)
        rows.append(row)

    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    line = "  ".join("=" * w for w in widths)
    out = [line, "  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    out.append(line)
    out += [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows[1:]
    ]
    out.append(line)
    out.append("")
    out.append(
        f"{env['date']}, {env['cpus']} cores, Python {env['python']}, Redis "
        f"{env['redis_server']}, django-delayq at {env['commit'] or '?'}; "
        f"{env['seconds']:g} s ({env['setup_seconds']:g} s of it installing)"
        + (f"; medians of {env['rounds']} rounds" if env["rounds"] > 1 else "")
        + (" --quick" if quick else "")
    )
    out.append("")
    out.append("Setups (each in its own virtualenv, one at a time on one redis-server):")
    for name in names:
        versions = ", ".join(
            f"{k.replace('system', results[name]['label'])} {v}"
            for k, v in results[name]["versions"].items()
        )
        out.append(f"- {title(results[name])}: {results[name]['setup']}; {versions}")
    for name in names:
        figures = results[name]["figures"]
        label = title(results[name], version=False)
        for flag, what in (("late_overlap", "lateness"), ("drain_overlap", "drain")):
            if figures.get(flag):
                mark(
                    f"{label}, {what}: storing the batch took longer than planned, so the "
                    "first jobs were due before the last was stored."
                )
        if figures.get("drain_done", size["drain"]) < size["drain"]:
            mark(
                f"{label}, drain: measured over the first {size['drain_cap']:g} s, "
                f"{int(figures['drain_done']):,} of {size['drain']:,} jobs."
            )
    if notes:
        out.append("")
        out += [f"[{i}] {text}" for i, text in enumerate(notes, 1)]
    return "\n".join(out)
