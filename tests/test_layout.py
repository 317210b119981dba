"""The package's shape, checked from its source (docs/contributing.rst, "Package layout").

- No import circle between django_delayq's modules. Every import counts, also one made inside
  a function or under ``if TYPE_CHECKING:``: a loop hidden at function level is still a loop
  a reader has to hold in mind (and an import that works only by running late).
- No module over 400 lines and no function over 60 (migrations aside): the sizes a newcomer
  can read in one go.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_delayq"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package but the migrations."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports, at any depth of its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # "from pkg import mod" imports the module pkg.mod, "from pkg import name" pkg
                submodule = f"{base}.{alias.name}"
                names.add(submodule if submodule in known else base)
    edges = set()
    for name in names:
        # "import a.b.c" runs a, a.b and a.b.c: the deepest known one is the target
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            edges.add(name)
    return edges


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: _imported(name, path, known) for name, path in modules.items()}
    # A package imports nothing by being the parent of a module (Python runs the parent's
    # __init__ first, but that is an edge only if the __init__ itself imports something).
    return graph


def test_the_checker_finds_a_circle():
    """The check can fail: a loop of three and a self-contained pair are both found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert _circles(graph) == [["a", "b", "c"], ["d", "e"]]


def test_the_import_reader_sees_function_level_and_type_checking_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.a import A\n"
        "def f():\n    from pkg import b\n    from . import c\n"
    )
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.m"}
    assert _imported("pkg.m", source, known) == {"pkg.a", "pkg.b", "pkg.c"}
    source.write_text("from pkg import helper\nimport pkg.a.sub\n")
    assert _imported("pkg.m", source, known) == {"pkg", "pkg.a"}


def test_no_import_circle():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} "
        f"({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_and_function_sizes(name):
    path = _modules()[name]
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines (at most {MAX_MODULE_LINES})"
    assert not _long_functions(path), _long_functions(path)


def test_at_most_twelve_modules_at_the_top():
    """The top of the package holds the Django app's own files and the public names; the
    rest lives in folders that name their part of the architecture."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


@pytest.mark.parametrize("old", sorted(__import__("django_delayq").MOVED))
def test_a_moved_module_still_imports_from_its_old_path_with_a_warning(old):
    import importlib
    import sys

    import django_delayq

    new = importlib.import_module(django_delayq.MOVED[old])
    sys.modules.pop(old, None)
    try:
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new.__name__}"):
            module = importlib.import_module(old)
        assert module is new  # one module object: a patch through either path is seen by both
        assert module.__spec__.name == new.__name__
        assert module.__name__ == new.__name__
    finally:
        sys.modules.pop(old, None)


@pytest.mark.parametrize(
    ("package", "name", "home"),
    [
        ("django_delayq.outbox", "find_key", "django_delayq.outbox.rows"),
        ("django_delayq.django_tasks", "task_result", "django_delayq.django_tasks.compat"),
    ],
)
def test_a_package_that_took_a_module_s_name_still_gives_its_names(package, name, home):
    import importlib

    with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved to {home}.{name}"):
        found = getattr(importlib.import_module(package), name)
    assert found is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError):
        importlib.import_module(package).no_such_name  # noqa: B018


def test_0_4_s_occurrence_id_names_still_import_from_recurring_times():
    import importlib
    import sys

    sys.modules.pop("django_delayq.recurring.times", None)
    try:
        with pytest.warns(DeprecationWarning, match="recurring.fire_times"):
            times = importlib.import_module("django_delayq.recurring.times")
        from django_delayq.recurring import ids

        assert times.parse_occurrence_id is ids.parse_occurrence_id
        assert (
            times.fire_after
            is importlib.import_module("django_delayq.recurring.fire_times").fire_after
        )
    finally:
        sys.modules.pop("django_delayq.recurring.times", None)


def test_the_documented_paths_import_without_a_warning():
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module("django_delayq.backends").DelayQBackend
        for path in ("models", "signals", "urls", "conf", "exceptions", "checks", "tasks"):
            importlib.import_module(f"django_delayq.{path}")


@pytest.mark.parametrize(
    ("module", "subject", "cls"),
    [
        ("django_delayq.storage.batches", "batches", "BatchStore"),
        ("django_delayq.storage.control", "control", "ControlStore"),
        ("django_delayq.storage.recurring", "recurring", "RecurringStore"),
        ("django_delayq.storage.traces", "traces", "TraceStore"),
    ],
)
def test_a_0_7_free_function_of_storage_still_imports_and_calls_its_subject_store(
    module, subject, cls
):
    """Each old name (batches.read_batch(store, id)) warns, names the method, and calls it on
    the store it is given; every method it names exists."""
    import importlib
    from types import SimpleNamespace

    found = importlib.import_module(module)
    assert found._MOVED
    for old, method in found._MOVED.items():
        assert callable(getattr(getattr(found, cls), method)), (old, method)
        with pytest.warns(DeprecationWarning, match=rf"store\.{subject}\.{method}\(\.\.\.\)"):
            moved = getattr(found, old)
        calls = SimpleNamespace(**{method: lambda *a, **kw: (a, kw)})
        assert moved(SimpleNamespace(**{subject: calls}), "x", n=1) == (("x",), {"n": 1})
    with pytest.raises(AttributeError):
        found.no_such_name  # noqa: B018
