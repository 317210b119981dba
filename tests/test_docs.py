"""The documentation (docs/, Sphinx) builds without a warning, and its code runs.

- the HTML build runs with ``-W`` (warnings are errors), as docs/contributing.rst says;
- every ``.. code-block:: python`` of docs/ and README.rst is executed, one namespace per
  file (later blocks use the names earlier ones define), against a real Redis, with
  stand-ins for the example shop's ``Order`` model and tasks; a ``DELAYQ`` dict a block
  defines may only use settings that exist. Listings of the example shop are
  ``literalinclude`` of its real files: the build fails when one of them is gone, and
  tests/test_example_project.py runs them;
- every system check id the code defines is listed in docs/reference/checks.rst, every
  setting in docs/reference/settings.rst;
- README.rst stays the front door (under 250 lines) and its links into docs/ resolve.
"""

from __future__ import annotations

import itertools
import logging
import re
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import docutils.core
import pytest
from django.apps import apps as django_apps
from django.core.management import get_commands

import django_delayq
from django_delayq import conf, get_job, task
from django_delayq.outbox.checks import sqlite_warning
from django_delayq.scheduling import registry
from django_delayq.worker.dispatch import Worker
from tests.conftest import more_settings
from tests.test_layout import _graph as _layout_graph

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.rst") if "_build" not in p.parts)
README = ROOT / "README.rst"
# The quickstart's blocks are a project's files (hello/tasks.py) and a shell session that
# imports them: test_quickstart_runs runs them so, and a worker runs the job they schedule.
QUICKSTART = DOCS / "quickstart.rst"
SNIPPET_PAGES = [p for p in PAGES if p != QUICKSTART]


def test_docs_build_with_warnings_as_errors(tmp_path):
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    result = subprocess.run(
        [*command, str(DOCS), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, f"sphinx failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "html" / "reference" / "api.html").exists()
    # autodoc found the docstrings (an import failure is a warning, so -W catches it too).
    assert "Store a job that runs" in (tmp_path / "html" / "reference" / "api.html").read_text()
    # The theme ships its files: no page loads a script, a style sheet, a font or an image
    # from another site (a CDN), so the site works offline as it was built.
    pages = list((tmp_path / "html").rglob("*.html"))
    assert len(pages) > 20, pages
    assert "furo" in (tmp_path / "html" / "index.html").read_text()
    remote = [
        f"{page.relative_to(tmp_path)}: {found}"
        for page in pages
        for found in REMOTE_FILE.findall(page.read_text())
    ]
    remote += [
        f"{sheet.relative_to(tmp_path)}: {found}"
        for sheet in (tmp_path / "html" / "_static").rglob("*.css")
        for found in REMOTE_URL_IN_CSS.findall(sheet.read_text())
    ]
    assert not remote, remote


# <script src=...>, <img src=...>, <link rel="stylesheet" href=...> naming another site.
REMOTE_FILE = re.compile(
    r"""<(?:script|img|link)\b[^>]*\b(?:src|href)=["'](?:https?:)?//[^"']*["'][^>]*>"""
)
REMOTE_URL_IN_CSS = re.compile(r"""url\(["']?(?:https?:)?//[^)]*\)""")


DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. code-block:: python\s*$")


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ``.. code-block:: python`` in an reST file."""
    lines = path.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        i += 1
        if not match:
            continue
        outer = len(match["indent"])
        # options (":name: x"), then a blank line, then the indented body
        while i < len(lines) and lines[i].strip().startswith(":"):
            i += 1
        start = i
        body = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > outer):
            body.append(lines[i])
            i += 1
        code = "\n".join(body).strip("\n")
        width = min(_indent(line) for line in code.splitlines() if line.strip())
        blocks.append((start + 1, "\n".join(line[width:] for line in code.splitlines())))
    return blocks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def test_python_blocks_are_found():
    """The extractor sees the blocks (a test that executes nothing proves nothing)."""
    found = {path.name: len(python_blocks(path)) for path in [*PAGES, README]}
    assert found["api.rst"] >= 1
    assert found["README.rst"] >= 2
    assert found["quickstart.rst"] >= 4
    assert sum(found.values()) >= 10, found


# -- stand-ins for the example shop (example_project/shop) --------------------------------

_ids = itertools.count(1)


class _Orders:
    def create(self, **fields):
        return types.SimpleNamespace(pk=next(_ids), **fields)


class Order:
    """Stand-in for shop.models.Order: enough for the snippets' ``Order.objects.create``."""

    objects = _Orders()


def _shop_task(name, **options):
    def run(*args, **kwargs):
        raise AssertionError("the docs' snippets schedule shop tasks, they never run them")

    run.__module__ = "shop.tasks"
    run.__name__ = run.__qualname__ = name
    return task(**options)(run)


@pytest.fixture
def shop(monkeypatch):
    """The names the snippets take from the tutorial: ``Order``, ``cancel_unpaid_order``,
    ``send_reminder``, a customer and a total; ``shop.models`` importable."""
    before = set(registry.registered())
    package = types.ModuleType("shop")
    package.__path__ = []
    models = types.ModuleType("shop.models")
    models.Order = Order
    package.models = models
    monkeypatch.setitem(sys.modules, "shop", package)
    monkeypatch.setitem(sys.modules, "shop.models", models)
    names = {
        "Order": Order,
        "customer": "ada@example.com",
        "total": 42,
        "cancel_unpaid_order": _shop_task("cancel_unpaid_order", max_retries=5),
        "send_reminder": _shop_task("send_reminder"),
    }
    yield names
    for name in set(registry.registered()) - before:
        registry.unregister(name)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", [*SNIPPET_PAGES, README], ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, real_store, shop):
    namespace = {"__name__": "docs_snippets", **shop}
    for line, code in python_blocks(path):
        where = f"{path.relative_to(ROOT)}:{line}"
        # Blank lines first, so a traceback gives the line number in the page.
        padded = "\n" * (line - 1) + code
        exec(compile(padded, str(path.relative_to(ROOT)), "exec"), namespace)
        _check_delayq(namespace, where)


def _check_delayq(namespace: dict, where: str) -> None:
    delayq = namespace.pop("DELAYQ", None)
    if delayq is not None:
        unknown = set(delayq) - set(conf.DEFAULTS)
        assert not unknown, f"{where}: DELAYQ has settings that do not exist: {unknown}"


@pytest.mark.django_db(transaction=True)
def test_quickstart_runs(real_store, admin_client, monkeypatch, capsys, caplog, tmp_path):
    """The quickstart as a reader follows it: its ``# hello/tasks.py`` block is the module
    ``hello.tasks``, its other blocks run in one namespace (the shell session); the job they
    schedule is listed in the admin while it waits, a worker runs it once its delay has
    passed (a burst worker whose clock is 61 s ahead), and the dashboard counts it done."""
    before = set(registry.registered())
    hello = types.ModuleType("hello")
    hello.__path__ = []
    monkeypatch.setitem(sys.modules, "hello", hello)
    # The settings blocks run where startproject's settings.py defines BASE_DIR.
    shell = {"__name__": "quickstart_shell", "BASE_DIR": tmp_path}
    try:
        for line, code in python_blocks(QUICKSTART):
            compiled = compile("\n" * (line - 1) + code, "docs/quickstart.rst", "exec")
            if code.splitlines()[0] == "# hello/tasks.py":
                tasks_block = (line, code)
                hello.tasks = _module("hello.tasks", compiled, monkeypatch)
            else:
                exec(compiled, shell)
                _check_delayq(shell, f"docs/quickstart.rst:{line}")
        # Its SQLite settings are the file startproject names, without delayq.W005.
        database = shell["DATABASES"]["default"]
        assert database["NAME"] == tmp_path / "db.sqlite3"
        assert sqlite_warning("default", database) is None
        job = shell["job"]
        assert job.task == "hello.tasks.say_hello" and job.args == ["Ada"]
        assert capsys.readouterr().out.split() == [job.id, "pending"]  # the shell's print
        assert len(job.id) == 26

        dashboard = admin_client.get("/admin/django_delayq/job/")
        assert dashboard.status_code == 200
        waiting = admin_client.get("/admin/django_delayq/job/pending/?queue=default")
        body = waiting.content.decode()
        assert "say_hello" in body and "&quot;Ada&quot;" in body and job.id in body
        assert re.search(r"in \d+\s+seconds", body), "due time of a job due in under a minute"

        def a_minute_later() -> float:
            return time.time() + 61

        worker = Worker(["default"], burst=True, clock=a_minute_later)
        with caplog.at_level(logging.INFO, logger="django_delayq.worker"):
            assert worker.run() == 0
        assert "Hello, Ada!" in capsys.readouterr().out.splitlines()
        # The log line the page quotes: "job <the job's id> hello.tasks.say_hello succeeded
        # in 0.1 ms (attempt 1)".
        logged = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        succeeded = rf"job {job.id} hello\.tasks\.say_hello succeeded in [\d.]+ ms \(attempt 1\)"
        assert any(re.fullmatch(succeeded, message) for message in logged), logged
        assert get_job(job.id) is None  # done: acknowledged and gone from Redis
        # The dashboard as it reads a minute later, when the worker counted the job done.
        monkeypatch.setattr(real_store, "server_time", a_minute_later)
        dashboard = admin_client.get("/admin/django_delayq/job/").content.decode()
        assert 'data-label="Done / failed, 5 min">1 / <span>0</span>' in dashboard, dashboard
        with more_settings(real_store, RETRY_BACKOFF=15):  # the default (runtests: 0)
            _try_raise(tasks_block, monkeypatch, caplog, a_minute_later)
    finally:
        for name in set(registry.registered()) - before:
            registry.unregister(name)


def _module(name: str, compiled: types.CodeType, monkeypatch: Any) -> types.ModuleType:
    """A module ``name`` made of ``compiled``, importable (as a worker imports it)."""
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    exec(compiled, module.__dict__)
    return module


def _try_raise(block: tuple[int, str], monkeypatch: Any, caplog: Any, clock: Any) -> None:
    """The page's "Try it": ``raise ValueError(name)`` in say_hello, a worker started
    again (a new process imports the changed module), the job scheduled again: the worker
    logs its failed attempt and its retry, and the job waits for it."""
    line, code = block
    edited = code.replace('    print(f"Hello, {name}!")', "    raise ValueError(name)")
    assert edited != code, "the quickstart's say_hello changed: update this test"
    registry.unregister("hello.tasks.say_hello")  # a new worker process: a fresh registry
    compiled = compile("\n" * (line - 1) + edited, "docs/quickstart.rst", "exec")
    tasks = _module("hello.tasks", compiled, monkeypatch)
    sys.modules["hello"].tasks = tasks
    job = tasks.say_hello.schedule("Ada", delay=60)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="django_delayq.worker"):
        assert Worker(["default"], burst=True, clock=clock).run() == 0
    failed = (
        rf"job {job.id} hello\.tasks\.say_hello failed in [\d.]+ ms \(attempt 1 of 6\): "
        r"ValueError: Ada; retrying in [\d.]+ s"
    )
    logged = [r.getMessage() for r in caplog.records]
    assert any(re.fullmatch(failed, message) for message in logged), logged
    waiting = get_job(job.id)
    assert waiting.status == "pending" and waiting.attempts == 1


def test_the_quickstart_s_steps_come_in_the_order_a_reader_needs():
    """A virtualenv before pip; the SQLite settings before the migrate they change; the
    worker restarted before the changed task is tried; why REDIS_URL and not CACHES."""
    page = " ".join(QUICKSTART.read_text().split())
    assert page.index("python -m venv .venv") < page.index("pip install /path/to/django-delayq")
    assert page.index('"transaction_mode": "IMMEDIATE"') < page.index("python manage.py migrate")
    assert '"NAME": BASE_DIR / "db.sqlite3"' in page
    raise_step = page[page.index("raise ValueError(name)") :]
    assert raise_step.index("start it again") < raise_step.index("Schedule the job again")
    assert 'DELAYQ = {"CACHE": "default"}' in page and "evicts keys" in page


COMMAND = re.compile(r"(?:manage\.py|django-admin) ([a-z_]+)")


def test_documented_commands_exist():
    """Every ``manage.py <command>`` and ``django-admin <command>`` the pages and the README
    name is a command of Django or django-delayq (the quickstart's and tutorial's steps)."""
    named = {
        (path.relative_to(ROOT), found)
        for path in [*PAGES, README]
        for found in COMMAND.findall(path.read_text())
    }
    assert ("docs/quickstart.rst", "delayq_worker") in {(str(p), c) for p, c in named}
    known = set(get_commands())
    unknown = sorted(f"{path}: {command}" for path, command in named if command not in known)
    assert not unknown, f"commands the docs name that do not exist: {unknown}"


# -- system checks ----------------------------------------------------------------------

CHECK_ID = re.compile(r"""id=["'](delayq\.[EW]\d{3})["']""")


def test_every_check_id_is_documented():
    defined = {
        found
        for source in (ROOT / "django_delayq").rglob("*.py")
        for found in CHECK_ID.findall(source.read_text())
    }
    assert {"delayq.E001", "delayq.W101", "delayq.E101", "delayq.E102"} <= defined
    page = (DOCS / "reference" / "checks.rst").read_text()
    missing = sorted(i for i in defined if f"``{i}``" not in page)
    assert not missing, f"check ids defined in the code, missing from the docs: {missing}"


def test_every_public_name_is_autodocumented():
    page = (DOCS / "reference" / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto\w+:: django_delayq\.(\w+)$", page, re.MULTILINE))
    missing = sorted(set(django_delayq.__all__) - documented)
    assert not missing, f"public names without an autodoc entry in reference/api.rst: {missing}"


def test_every_setting_is_documented():
    page = (DOCS / "reference" / "settings.rst").read_text()
    missing = sorted(name for name in conf.DEFAULTS if f"``{name}``" not in page)
    assert not missing, f"settings missing from docs/reference/settings.rst: {missing}"


# -- README.rst, the front door ---------------------------------------------------------


def test_readme_is_the_front_door():
    text = README.read_text()
    assert len(text.splitlines()) < 250
    links = set(re.findall(r"<(docs/[\w/.-]+\.rst)>", text))
    assert len(links) >= 5, links
    missing = sorted(link for link in links if not (ROOT / link).is_file())
    assert not missing, f"README.rst links to docs pages that do not exist: {missing}"
    assert "./runtests" in text
    # It is the package's long description too: valid reST, no warning.
    docutils.core.publish_doctree(text, settings_overrides={"halt_level": 2})


# -- docs/architecture.rst: what each folder may import ----------------------------------

ARCHITECTURE = DOCS / "architecture.rst"
FOLDER_HEADING = re.compile(r"^``(?P<folder>\w+)/[\w/]*``\n-+\n", re.MULTILINE)
MAY_IMPORT = re.compile(r"^May import: (?P<names>.*?)\.(?:\s|$)", re.MULTILINE | re.DOTALL)


def _may_import() -> dict[str, set[str]]:
    """Folder -> the names its "May import:" line lists (folders, modules, dotted paths)."""
    text = ARCHITECTURE.read_text()
    headings = list(FOLDER_HEADING.finditer(text))
    rules = {}
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        section = text[heading.end() : following.start() if following else len(text)]
        found = MAY_IMPORT.search(section)
        assert found, f"architecture.rst: ``{heading['folder']}/`` has no 'May import:' line"
        rules[heading["folder"]] = set(re.findall(r"``([\w.]+)``", found["names"]))
    return rules


def test_architecture_import_rules_hold():
    """Every folder of the package has its paragraph in docs/architecture.rst, and no module
    imports anything of the package outside its own folder that the paragraph does not
    allow (``jobs`` allows jobs/ and what is in it; ``recurring.ids`` that one module)."""
    rules = _may_import()
    package = ROOT / "django_delayq"
    folders = {
        p.name for p in package.iterdir() if (p / "__init__.py").exists() and p.name != "migrations"
    }
    assert set(rules) == folders, "folders without a paragraph, or paragraphs without a folder"
    assert rules["storage"] <= {"conf", "exceptions", "jobs"}, rules["storage"]
    broken = []
    for module, targets in _layout_graph().items():
        folder = module.split(".")[1] if "." in module else None
        if folder not in rules:
            continue  # a module at the top
        for target in targets:
            name = target.removeprefix("django_delayq.")
            if name.split(".")[0] == folder:
                continue
            if not any(
                name == allowed or name.startswith(f"{allowed}.") for allowed in rules[folder]
            ):
                broken.append(f"{module} imports {target}")
    assert not broken, f"imports docs/architecture.rst does not allow: {broken}"


def test_architecture_rules_are_read():
    """The rule reader sees the lines (a check that reads nothing allows everything)."""
    rules = _may_import()
    assert rules["conf"] == {"exceptions"}
    assert "scheduling" not in rules["storage"] and "worker" not in rules["storage"]
    assert {"storage", "jobs"} <= rules["scheduling"] and "storage" in rules["admin"]


# -- first-hour facts the pages state ------------------------------------------------------


def test_the_tables_migrate_creates_are_the_ones_the_docs_count():
    """The tutorial and the quickstart say how many tables ``migrate`` creates; the
    tutorial names them."""
    models = django_apps.get_app_config("django_delayq").get_models()
    tables = sorted(m._meta.db_table for m in models if m._meta.managed)
    assert len(tables) == 3, tables
    tutorial = (DOCS / "tutorial.rst").read_text()
    assert "migrations create three tables" in tutorial
    assert all(f"``{table}``" in tutorial for table in tables), tables
    assert "migrations make three tables" in " ".join(QUICKSTART.read_text().split())


def test_the_admin_how_to_lists_every_permission():
    """docs/howto/admin.rst's table names every permission the admin checks (``view_job``,
    ``pause_queue``...), and the Recurring schedules page's model permissions."""
    job = django_apps.get_model("django_delayq", "Job")._meta
    codenames = [f"{action}_job" for action in job.default_permissions]
    codenames += [codename for codename, _ in job.permissions]
    assert "pause_queue" in codenames
    page = (DOCS / "howto" / "admin.rst").read_text()
    missing = [c for c in codenames if f"``django_delayq.{c}``" not in page]
    assert not missing, f"permissions missing from docs/howto/admin.rst: {missing}"
    assert "Recurring schedules" in page and "``view_schedule``" in page


def test_the_module_maps_name_modules_that_exist():
    """The files docs/architecture.rst names in each folder's paragraph are in that folder,
    and every file of contributing.rst's package map is in the package: a module renamed
    or moved fails here until the maps follow."""
    package = ROOT / "django_delayq"
    text = ARCHITECTURE.read_text()
    headings = list(FOLDER_HEADING.finditer(text))
    missing = []
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        section = text[heading.end() : following.start() if following else len(text)]
        folder = package / heading.group(0).split("``")[1]
        for name in re.findall(r"``([\w/]+\.py)``", section):
            if not name.startswith("tests/") and not (
                (folder / name).is_file() or (package / name).is_file()
            ):
                missing.append(f"architecture.rst, {folder.name}/: {name}")
    flow = text[: headings[0].start()]
    for name in re.findall(r"\b([a-z_]+/[\w/]*\w\.py)\b", flow):
        if not name.startswith("tests/") and not (package / name).is_file():
            missing.append(f"architecture.rst, the flow: {name}")
    contributing = (DOCS / "contributing.rst").read_text()
    layout = contributing[contributing.index("    django_delayq/\n") :]
    layout = layout[: layout.index("\n\n")]
    files = {path.name for path in package.rglob("*.py")}
    assert len(re.findall(r"\b\w+\.py\b", layout)) > 60
    missing += [
        f"contributing.rst: {name}"
        for name in re.findall(r"\b(\w+\.py)\b", layout)
        if name not in files
    ]
    assert not missing, f"the maps name files that do not exist: {missing}"


def test_the_transitions_table_names_each_script_s_keys():
    """architecture.rst's table of transitions: each row naming a script lists the keys of
    its ``-- KEYS:`` line, in order, and every script of SCRIPTS has a row."""
    from django_delayq.storage.scripts import SCRIPTS, script_keys

    text = (DOCS / "architecture.rst").read_text()
    section = text.split("The transitions\n===============\n", 1)[1].split("\nThe folders\n", 1)[0]
    rows = re.findall(r"   \* - (.+)\n     - ((?:.+\n)(?:       .+\n)*)", section)
    named = set()
    for names, keys in rows:
        scripts = re.findall(r"``(\w+)``", names)
        named.update(scripts)
        listed = " ".join(keys.split())
        if len(scripts) == 1 and scripts[0] in SCRIPTS:
            assert listed == " ".join(script_keys(scripts[0])), scripts[0]
    assert set(SCRIPTS) <= named, sorted(set(SCRIPTS) - named)
