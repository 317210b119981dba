"""Check that a built wheel carries all of django_delayq, not only its Python modules:

    python .ci/check_wheel.py dist/django_delayq-0.7.0-py3-none-any.whl

Every file git tracks under django_delayq/ (every file there, without git) must be in
the wheel, and so must at least one file of each kind the app cannot run without: Lua
scripts, admin templates, static files, migrations, the worker command, and for each
translation a compiled django.mo. Exits 1 naming what is missing.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_delayq"
KINDS = {
    "Lua scripts": f"{PACKAGE}/storage/lua/*.lua",
    "admin templates": f"{PACKAGE}/templates/django_delayq/admin/*.html",
    "static files": f"{PACKAGE}/static/django_delayq/*",
    "migrations": f"{PACKAGE}/migrations/0001_*.py",
    "the worker command": f"{PACKAGE}/management/commands/delayq_worker.py",
    "the typing marker": f"{PACKAGE}/py.typed",
}


def source_files() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", PACKAGE],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        files = [name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a git checkout
        files = [
            path.relative_to(ROOT).as_posix()
            for path in (ROOT / PACKAGE).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        ]
    return sorted(files)


def main(wheel: str) -> int:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    kinds = dict(KINDS)
    for po in (ROOT / PACKAGE / "locale").glob("*/LC_MESSAGES/django.po"):
        language = po.parent.parent.name
        kinds[f"the compiled {language} translation"] = (
            f"{PACKAGE}/locale/{language}/LC_MESSAGES/django.mo"
        )
    problems = [
        f"missing {kind}: nothing matches {pattern}"
        for kind, pattern in kinds.items()
        if not fnmatch.filter(names, pattern)
    ]
    sources = source_files()
    problems += [f"{name} is not in the wheel" for name in sources if name not in names]
    if problems:
        print(f"check_wheel: {wheel} lacks files of the package:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print(
            "List them in [tool.setuptools.package-data] (pyproject.toml); compile a "
            "translation with `django-admin compilemessages` and commit its .mo.",
            file=sys.stderr,
        )
        return 1
    data = [name for name in sources if not name.endswith(".py")]
    print(
        f"check_wheel: {Path(wheel).name} has all {len(sources)} files of {PACKAGE}/ "
        f"({len(data)} of them not Python), including {', '.join(sorted(kinds))}"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} path/to/django_delayq-*.whl")
    sys.exit(main(sys.argv[1]))
