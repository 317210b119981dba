"""Redis's own CPU per command and per script, on a dedicated redis-server.

``INFO commandstats`` (reset with ``CONFIG RESETSTAT`` before each phase) gives calls and
microseconds per command, but aggregates every script under EVALSHA, and counts the
commands a script runs both inside EVALSHA's time and again under their own names.
So, during a measured phase, the slow log records every command (threshold 0): each
entry has its duration, its arguments (for EVALSHA the script's SHA, which names the
script) and its client (the Lua client ``?:0`` for commands run inside a script; client
names tell the task's own RPUSH and the benchmark's own commands apart). The slow log's
durations are measured like commandstats' (command execution only; reading the request
and writing the reply are not counted); the redis-server process CPU (``INFO cpu``) is
reported beside it and includes everything.

Logging costs Redis time, and a script's inner commands are logged while its EVALSHA is
timed, so the per-job figures come from runs with the slow log off; one extra run with
it on gives the attribution (per script, per inner command).
"""

from __future__ import annotations

from typing import Any

from .report import render

SLOWLOG_MAX = 2_000_000
# Connection set-up and introspection: not per-job work, reported but left out of totals.
SETUP = ("script", "client", "hello", "ping", "select", "info", "config", "slowlog", "command")
SUBCOMMANDS = ("script", "client", "config", "slowlog", "command", "object", "memory")
SCRIPT_CALLS = ("evalsha", "evalsha_ro", "eval", "eval_ro", "fcall", "fcall_ro")
TASK_CLIENT = "delayq-bench-task"
ADMIN_CLIENT = "delayq-bench-admin"


def script_names(store: Any) -> dict[str, str]:
    """{SHA: script name} of the Store's Lua scripts.

    The one place the Redis-CPU breakdown touches django_delayq internals: it reads
    ``django_delayq.storage.scripts`` (the script names and the SHA each is sent as). If that
    changes, scripts are labelled by their SHA (and Redis Functions by their name, which
    FCALL sends anyway); every total stays right."""
    try:
        from django_delayq.storage.scripts import SCRIPTS, script
    except ImportError:
        return {}
    return {script(name).sha: name for name in SCRIPTS}


def start_logging(client: Any) -> None:
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", SLOWLOG_MAX)


def stop_logging(client: Any) -> None:
    client.config_set("slowlog-log-slower-than", 10_000)
    client.config_set("slowlog-max-len", 128)
    client.slowlog_reset()


def process_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def reset(client: Any) -> float:
    """Zero commandstats and the slow log; the server's CPU seconds so far."""
    client.config_resetstat()
    client.slowlog_reset()
    return process_cpu(client)


def commandstats(client: Any) -> dict[str, dict[str, float]]:
    stats = client.info("commandstats")
    return {
        key.removeprefix("cmdstat_"): {
            "calls": int(value["calls"]),
            "usec": int(value["usec"]),
            "usec_per_call": float(value["usec_per_call"]),
        }
        for key, value in stats.items()
    }


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _add(table: dict[str, dict[str, float]], name: str, usec: float) -> None:
    row = table.setdefault(name, {"calls": 0, "usec": 0})
    row["calls"] += 1
    row["usec"] += usec


def read_phase(
    client: Any, cpu_before: float, names: dict[str, str], logged: bool = True
) -> dict[str, Any]:
    """What Redis did since :func:`reset`: commandstats, and (``logged``: the slow log
    recorded the phase) the top-level commands per client group (delayq, task, bench),
    per script, and the commands each script ran inside."""
    cpu = process_cpu(client) - cpu_before
    stats = commandstats(client)
    entries = sorted(client.slowlog_get(-1), key=lambda e: e["id"]) if logged else []
    groups: dict[str, dict[str, dict[str, float]]] = {"delayq": {}, "task": {}, "bench": {}}
    scripts: dict[str, dict[str, float]] = {}
    inside: dict[str, dict[str, dict[str, float]]] = {}
    pending: list[tuple[str, float]] = []  # Lua-client entries, before their script's entry
    for entry in entries:
        args = _text(entry["command"]).split(" ")
        command = args[0].lower()
        usec = float(entry["duration"])
        if command in SUBCOMMANDS and len(args) > 1:
            command = f"{command}|{args[1].lower()}"
        address = _text(entry.get("client_address", ""))
        if address.startswith("?"):  # run by a script
            pending.append((command, usec))
            continue
        client_name = _text(entry.get("client_name", ""))
        group = {TASK_CLIENT: "task", ADMIN_CLIENT: "bench"}.get(client_name, "delayq")
        _add(groups[group], command, usec)
        if command in SCRIPT_CALLS:
            key = args[1] if len(args) > 1 else "?"
            script = names.get(key, key if command.startswith("fcall") else f"sha {key[:8]}")
            _add(scripts, script, usec)
            for inner, inner_usec in pending:
                _add(inside.setdefault(script, {}), inner, inner_usec)
        pending = []
    return {
        "commandstats": stats,
        "slowlog": groups,
        "scripts": scripts,
        "inside_scripts": inside,
        "logged": logged,
        "slowlog_entries": len(entries),
        "slowlog_full": len(entries) >= SLOWLOG_MAX,
        "process_cpu_s": cpu,
    }


def per_job_usec(phase: dict[str, Any], n: int) -> float:
    """Redis time per job of delayq's state changes in a phase: commandstats' script
    calls (EVALSHA..., the scripts' inner commands included). What else the worker sends
    (BLPOP on the wake list, handing a wake back) is in :func:`other_usec_per_job`, from
    the slow log: commandstats cannot tell it from the task's commands of the same name."""
    stats = phase["commandstats"]
    return sum(stats.get(name, {}).get("usec", 0) for name in SCRIPT_CALLS) / n


def other_usec_per_job(phase: dict[str, Any], n: int) -> float:
    """delayq's top-level commands other than scripts, per job (a logged phase only;
    connection set-up and introspection left out)."""
    return (
        sum(
            row["usec"]
            for command, row in phase["slowlog"]["delayq"].items()
            if command not in SCRIPT_CALLS and command.split("|")[0] not in SETUP
        )
        / n
    )


def breakdown_table(phases: dict[str, dict[str, Any]], n: int) -> str:
    """Per phase: delayq's top-level commands and scripts (calls, usec, usec/call,
    usec/job), what ran inside each script, the task's own commands, and the process."""
    rows = [("phase", "what", "calls", "usec", "usec/call", "usec/job")]
    for phase_name, phase in phases.items():
        sections = [
            ("", phase["scripts"]),
            ("cmd ", _without(phase["slowlog"]["delayq"], SCRIPT_CALLS)),
            ("task ", phase["slowlog"]["task"]),
        ]
        for prefix, table in sections:
            for name, row in sorted(table.items(), key=lambda kv: -kv[1]["usec"]):
                label = f"script {name}" if prefix == "" else f"{prefix}{name}"
                rows.append(_row(phase_name, label, row, n))
                if prefix == "":
                    inner = phase["inside_scripts"].get(name, {})
                    for cmd, irow in sorted(inner.items(), key=lambda kv: -kv[1]["usec"]):
                        rows.append(_row(phase_name, f"  in {name}: {cmd}", irow, n))
        rows.append(
            (
                phase_name,
                "redis-server process CPU (INFO cpu)",
                "-",
                f"{phase['process_cpu_s'] * 1e6:,.0f}",
                "-",
                f"{phase['process_cpu_s'] * 1e6 / n:.1f}",
            )
        )
    return render(rows)


def _without(table: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: row for name, row in table.items() if name not in names}


def _row(phase: str, label: str, row: dict[str, float], n: int) -> tuple[str, ...]:
    calls, usec = int(row["calls"]), float(row["usec"])
    return (
        phase,
        label,
        f"{calls:,}",
        f"{usec:,.0f}",
        f"{usec / calls:.1f}" if calls else "-",
        f"{usec / n:.2f}",
    )


def commandstats_table(phases: dict[str, dict[str, Any]], n: int) -> str:
    """INFO commandstats of each phase, as Redis reports it (inner commands of scripts
    included under their own names as well as inside EVALSHA's time)."""
    rows = [("phase", "command", "calls", "usec", "usec/call", "usec/job")]
    for phase_name, phase in phases.items():
        stats = phase["commandstats"]
        for name, row in sorted(stats.items(), key=lambda kv: -kv[1]["usec"]):
            rows.append(_row(phase_name, name, row, n))
    return render(rows)


def zadd_usec_per_call(client: Any, key: str, calls: int) -> float:
    """commandstats' usec per call of plain ZADD round trips (one member each)."""
    reset(client)
    for i in range(calls):
        client.zadd(key, {f"m{i}": i})
    client.delete(key)
    return commandstats(client)["zadd"]["usec_per_call"]
