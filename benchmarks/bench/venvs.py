"""Interpreter variants: a venv per Python under ``benchmarks/.venvs/py3.X`` (the project
installed editable, plus psycopg for the ORM workload), with or without hiredis, and the
``--matrix`` mode that runs the real-task workloads in each variant.

Standard library only: run.py uses this before Django or redis-py can be imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
VENVS = ROOT / "benchmarks" / ".venvs"
RUN = ROOT / "benchmarks" / "run.py"
PIP = ("-m", "pip", "install", "-q", "--disable-pip-version-check")


def resolve(python: str) -> tuple[str, str]:
    """(path of the interpreter named ``python``, its "3.X")."""
    try:
        done = subprocess.run(
            [
                python,
                "-c",
                "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])",
            ],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        done = None
    if done is None or done.returncode:
        detail = "" if done is None else done.stderr.strip()[-300:]
        raise SystemExit(
            f"--python {python!r} does not run ({detail or 'not found'}): name an interpreter "
            "on PATH (with pyenv: export PYENV_VERSION=3.13.0:3.12.1:3.11.7)"
        )
    executable, version = done.stdout.split()
    return executable, version


def ensure_venv(python: str) -> tuple[Path, str]:
    """The venv's python for interpreter ``python`` (created and filled if needed)."""
    executable, version = resolve(python)
    venv = VENVS / f"py{version}"
    venv_python = venv / "bin" / "python"
    if not venv_python.exists():
        print(f"creating {venv} with {executable}", file=sys.stderr, flush=True)
        subprocess.run([executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run(
        [
            str(venv_python),
            "-c",
            "import django_delayq, django_redis, psycopg; print(django_delayq.__file__)",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode or not probe.stdout.strip().startswith(str(ROOT)):
        print(f"installing django-delayq (editable) and psycopg into {venv}", file=sys.stderr)
        subprocess.run([str(venv_python), *PIP, "-e", str(ROOT), "psycopg[binary]"], check=True)
    return venv_python, version


def has_hiredis(venv_python: Path) -> bool:
    return (
        subprocess.run([str(venv_python), "-c", "import hiredis"], capture_output=True).returncode
        == 0
    )


def set_hiredis(venv_python: Path, wanted: bool) -> None:
    """Install or uninstall hiredis in the venv (redis-py uses it when importable)."""
    if has_hiredis(venv_python) == wanted:
        return
    if wanted:
        subprocess.run([str(venv_python), *PIP, "hiredis"], check=True)
    else:
        subprocess.run(
            [str(venv_python), "-m", "pip", "uninstall", "-q", "-y", "hiredis"], check=True
        )


def without_variant_options(argv: list[str]) -> list[str]:
    """``argv`` less --python X, --hiredis, --no-hiredis and --matrix (handled here)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--python":
            skip = True
        elif arg.startswith("--python=") or arg in ("--hiredis", "--no-hiredis", "--matrix"):
            continue
        else:
            out.append(arg)
    return out


def reexec(python: str | None, hiredis: bool | None, argv: list[str]) -> None:
    """Run run.py again, in the venv of ``python`` (default: this interpreter's version),
    with hiredis installed or not; never returns."""
    venv_python, _ = ensure_venv(python or sys.executable)
    if hiredis is not None:
        set_hiredis(venv_python, hiredis)
    sys.stdout.flush()
    os.execv(str(venv_python), [str(venv_python), str(RUN), *without_variant_options(argv)])


def run_matrix(pythons: list[str], argv: list[str], results_dir: Path) -> dict[str, Any]:
    """run.py with ``argv`` in each {python} x {hiredis, no hiredis}: their JSON results."""
    results: dict[str, Any] = {}
    for python in pythons:
        venv_python, version = ensure_venv(python)
        for hiredis in (True, False):
            set_hiredis(venv_python, hiredis)
            label = f"py{version} {'hiredis' if hiredis else 'no hiredis'}"
            out = results_dir / f"matrix-py{version}-{'hiredis' if hiredis else 'nohiredis'}.json"
            out.unlink(missing_ok=True)
            print(f"\n### {label}", flush=True)
            command = [str(venv_python), str(RUN), *without_variant_options(argv)]
            done = subprocess.run([*command, "--json", str(out)], cwd=ROOT)
            if done.returncode or not out.exists():
                results[label] = {"figures": [], "error": f"exit code {done.returncode}"}
            else:
                results[label] = json.loads(out.read_text())
    return results
