"""Django's own ``tests/tasks`` priority tests, run unchanged against DelayQBackend (issue 20).

Django's wheel ships no tests, so the test functions are loaded from the sdist of the
installed Django version at test time, never copied into this project:

1. ``DELAYQ_DJANGO_TESTS``: a directory holding Django's ``tests/tasks/`` (a Django
   checkout's ``tests``), if set;
2. else a cache outside the project, ``$XDG_CACHE_HOME/django-delayq/django-<version>``
   (``~/.cache/...``), filled once with the sdist's ``tests/tasks/`` (nothing else is
   extracted): the sdist is fetched straight from the package index's JSON page (PEP 691:
   ``$PIP_INDEX_URL``, default https://pypi.org/simple/) and checked against the sha256 the
   index gives, about a second; where that fails, ``pip download django==<version>
   --no-binary :all: --no-deps``, which also builds the sdist's metadata (30-40 s).

When neither gives the sources (no registry), the test is skipped, saying so, unless ``CI``
is set (``.ci/run`` sets it): then it fails, as the browser test does without Chromium.
On Django 5.2 (the django-tasks backport: no ``django.tasks``, no ``tests/tasks``) the
module is skipped.

Which tests: every test of ``tests/tasks/`` whose code mentions ``priority`` and that is
about any backend (``UPSTREAM``). ``TaskTestCase`` runs them on Django's DummyBackend; a
subclass points ``TASKS`` at DelayQBackend instead (the same queues) and changes nothing else
but ``setUp``, which empties the dummy backend's results list (ours has none: the priority
tests read no results). Left out, as they test other backends' classes:
``CustomBackendTestCase.test_backend_does_not_support_priority`` (a backend with
``supports_priority = False``; ours is True, which tests/test_backend.py asserts) and
``test_custom_task_with_standard_and_custom_values`` (a custom ``Task`` subclass of a
custom backend).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
import urllib.request
from pathlib import Path

import django
import pytest
from django.test import override_settings

pytest.importorskip("django.tasks", reason="django.tasks is Django 6.0+")

# (module of tests/tasks, class, test method): Django's tests that set or check a priority.
UPSTREAM = [
    ("test_tasks", "TaskTestCase", "test_using_priority"),
    ("test_tasks", "TaskTestCase", "test_chained_using"),
    ("test_tasks", "TaskTestCase", "test_invalid_priority"),
]
PACKAGE = "django_upstream_tasks_tests"  # the name tests/tasks/ is imported under


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "django-delayq" / f"django-{django.__version__}"


def _fetch_from_index(directory: str) -> str | None:
    """Download Django's sdist into ``directory`` from the index's JSON page (PEP 691),
    checked against the index's sha256; None, or why not."""
    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple/"
    name = f"django-{django.__version__}.tar.gz"
    try:
        request = urllib.request.Request(
            index.rstrip("/") + "/django/",
            headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            files = json.load(answer)["files"]
        found = next(f for f in files if f["filename"].lower() == name)
        with urllib.request.urlopen(found["url"], timeout=120) as answer:
            data = answer.read()
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        return f"no {name} from {index}: {exc!r}"
    expected = found.get("hashes", {}).get("sha256")
    if not expected or hashlib.sha256(data).hexdigest() != expected:
        return f"{name} from {index} does not match the index's sha256 {expected}"
    (Path(directory) / name).write_bytes(data)
    return None


def _download(target: Path) -> str | None:
    """Extract tests/tasks/ of Django's sdist into ``target``; None, or why not."""
    with tempfile.TemporaryDirectory() as tmp:
        why = _fetch_from_index(tmp)
        if why is None:
            return _extract(next(Path(tmp).glob("*.tar.gz")), target)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"django=={django.__version__}",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--quiet",
            "-d",
            tmp,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"pip download failed: {exc}"
        archives = list(Path(tmp).glob("*.tar.gz"))
        if done.returncode or not archives:
            return f"{why}; pip download failed: {done.stderr.strip()[-300:]}"
        return _extract(archives[0], target)


def _extract(sdist: Path, target: Path) -> None:
    """tests/tasks/ of ``sdist`` into ``target``, whole or not at all."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and "/tests/tasks/" in m.name]
        staging = target.with_name(target.name + ".partial")
        for member in members:
            member.name = "tasks/" + member.name.split("/tests/tasks/", 1)[1]
            archive.extract(member, staging, filter="data")
    staging.rename(target)


def upstream_tests_dir() -> Path:
    """Django's tests/tasks/ directory for the installed version (see the module's doc)."""
    given = os.environ.get("DELAYQ_DJANGO_TESTS")
    if given:
        found = Path(given) / "tasks"
        assert (found / "test_tasks.py").is_file(), f"no tasks/test_tasks.py in {given}"
        return found
    cache = _cache_dir()
    if not (cache / "tasks" / "test_tasks.py").is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
            why = _download(Path(tmp) / "tree")
            if why is None and not cache.exists():
                with contextlib.suppress(OSError):  # another pytest process was first
                    (Path(tmp) / "tree").rename(cache)
        if not (cache / "tasks" / "test_tasks.py").is_file():
            message = f"Django {django.__version__}'s tests/tasks could not be fetched: {why}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    return cache / "tasks"


def load(directory: Path, module: str):
    """Import ``<directory>/<module>.py`` as a submodule of PACKAGE (its relative imports,
    ``from . import tasks``, resolve inside Django's tests/tasks/)."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, directory / "__init__.py", submodule_search_locations=[str(directory)]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{PACKAGE}.{module}")


def on_delayq(case: type[unittest.TestCase]) -> type[unittest.TestCase]:
    """``case`` with TASKS' default backend DelayQBackend (the queues of Django's test)."""

    @override_settings(
        TASKS={
            "default": {
                "BACKEND": "django_delayq.backends.DelayQBackend",
                "QUEUES": ["default", "queue_1"],
            },
            "immediate": {
                "BACKEND": "django.tasks.backends.immediate.ImmediateBackend",
                "QUEUES": [],
            },
        },
        USE_TZ=True,
    )
    class OnDelayQ(case):  # type: ignore[valid-type,misc]
        def setUp(self) -> None:
            from django.tasks import task_backends

            from django_delayq.backends import DelayQBackend

            backend = task_backends["default"]
            assert isinstance(backend, DelayQBackend), backend

    OnDelayQ.__name__ = OnDelayQ.__qualname__ = f"{case.__name__}OnDelayQ"
    return OnDelayQ


def test_the_upstream_priority_tests_exist():
    """Each listed test is in Django's sources and mentions priority (a renamed or removed
    upstream test fails here rather than silently running nothing)."""
    directory = upstream_tests_dir()
    for module, cls, method in UPSTREAM:
        case = getattr(load(directory, module), cls)
        assert callable(getattr(case, method, None)), (module, cls, method)
        source = (directory / f"{module}.py").read_text()
        start = source.index(f"def {method}(")
        assert "priority" in source[start : source.find("\n    def ", start + 1)]


@pytest.mark.parametrize("module, cls, method", UPSTREAM, ids=[u[2] for u in UPSTREAM])
def test_django_priority_test_on_delayq(module, cls, method, fake_store):
    case = on_delayq(getattr(load(upstream_tests_dir(), module), cls))
    result = unittest.TestResult()
    unittest.TestSuite([case(method)]).run(result)  # a suite: setUpClass applies TASKS
    problems = [text for _, text in result.errors + result.failures]
    assert result.testsRun == 1 and not problems, "\n".join(problems)
    assert not result.skipped, result.skipped
