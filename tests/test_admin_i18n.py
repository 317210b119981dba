"""The admin is translatable: every text it shows goes through Django's translation
functions, and the shipped catalogue template (django_delayq/locale/django.pot) has them.

The main test renders every admin page, message and confirmation step in a pseudo
language whose catalogue, built here from the shipped .pot, wraps each translation in
⟦ ⟧. Whatever text is left outside the brackets, once the jobs' own data is taken out,
was not translated: a literal in a template or in Python, or a string missing from the
.pot. Regenerate the .pot after changing a text (needs GNU gettext)::

    cd django_delayq && django-admin makemessages -l en --keep-pot --add-location=file \\
        && rm -r locale/en
"""

from __future__ import annotations

import ast
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.test import Client

from django_delayq import schedule
from django_delayq.jobs.record import encode_record
from django_delayq.monitoring.health import named_queues
from tests.test_admin import confirm, make_dead, make_running, schedule_overdue, url
from tests.test_admin_workers import beat
from tests.testapp import tasks as testtasks

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
POT = ROOT / "django_delayq" / "locale" / "django.pot"
Q = "default"
OPEN, CLOSE = "⟦", "⟧"
ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")


# -- the .pot, and a pseudo-translated .mo built from it ------------------------------


def read_po(path: Path) -> list[dict[str, str]]:
    """The entries of a .po/.pot file: msgctxt, msgid, msgid_plural (header excluded)."""
    entries: list[dict[str, str]] = []
    entry: dict[str, str] = {}
    field = None
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        line = line.strip()
        if not line:
            if entry.get("msgid"):
                entries.append(entry)
            entry, field = {}, None
        elif line.startswith("#"):
            continue
        elif line.startswith('"'):
            entry[field] += ast.literal_eval(line)
        else:
            field, _, quoted = line.partition(" ")
            if field.startswith("msgstr"):
                field = "msgstr"
            entry[field] = entry.get(field, "") + ast.literal_eval(quoted)
    return [{k: v for k, v in e.items() if k != "msgstr"} for e in entries]


def write_pseudo_mo(entries: list[dict[str, str]], path: Path) -> None:
    """A GNU .mo catalogue translating each message to ⟦message⟧ (each plural form too)."""
    catalogue = {
        "": "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n"
    }
    for e in entries:
        key = e["msgid"]
        value = OPEN + e["msgid"] + CLOSE
        if "msgid_plural" in e:
            key += "\0" + e["msgid_plural"]
            value += "\0" + OPEN + e["msgid_plural"] + CLOSE
        if "msgctxt" in e:
            key = e["msgctxt"] + "\x04" + key
        catalogue[key] = value
    keys = sorted(catalogue, key=lambda k: k.encode())
    ids = [k.encode() for k in keys]
    strs = [catalogue[k].encode() for k in keys]
    start = 7 * 4 + 16 * len(keys)  # header, then the two tables of (length, offset)
    offsets, data = [], b""
    for blob in ids + strs:
        offsets.append((len(blob), start + len(data)))
        data += blob + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, len(keys), 28, 28 + 8 * len(keys), 0, 0)
    table = b"".join(struct.pack("<2I", *o) for o in offsets)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + table + data)


# Django's own messages that the admin's texts include: timesince's words (Django's
# catalogues translate them; the pseudo language has none, so it brings its own).
DJANGO_MESSAGES = [
    {"msgid": f"%(num)d {unit}", "msgid_plural": f"%(num)d {unit}s"}
    for unit in ("year", "month", "week", "day", "hour", "minute")
] + [{"msgid": ", "}]


@pytest.fixture
def pseudo(settings, tmp_path):
    """The pseudo language, active for every request."""
    entries = read_po(POT) + DJANGO_MESSAGES
    write_pseudo_mo(entries, tmp_path / "xx" / "LC_MESSAGES" / "django.mo")
    settings.LOCALE_PATHS = [str(tmp_path)]
    settings.LANGUAGES = [("en", "English"), ("xx", "Pseudo")]
    settings.LANGUAGE_CODE = "xx"


# -- what a page shows ----------------------------------------------------------------


class _Shown(HTMLParser):
    """The visible texts of the parts of an admin page django-delayq fills: breadcrumbs,
    messages and #content (the title and the page); text nodes and the attributes a user
    sees."""

    ROOT_IDS = {"content"}
    ROOT_CLASSES = {"breadcrumbs", "messagelist"}
    SEEN_ATTRS = ("placeholder", "aria-label", "title", "data-label")
    VOID = {"input", "br", "wbr", "img", "meta", "link", "hr", "line", "rect"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []  # per open element: inside a root?
        self.texts: list[str] = []
        self.attrs: list[str] = []
        self.skip = 0  # inside <script> or <style>
        self.glue = False  # after <wbr>: the next text continues the word

    def _inside(self, tag: str, attrs: dict) -> bool:
        if self.stack and self.stack[-1]:
            return True
        classes = set((attrs.get("class") or "").split())
        return attrs.get("id") in self.ROOT_IDS or bool(classes & self.ROOT_CLASSES)

    def handle_starttag(self, tag: str, attrs_list: list) -> None:
        attrs = dict(attrs_list)
        inside = self._inside(tag, attrs)
        if inside:
            for name in self.SEEN_ATTRS:
                if attrs.get(name):
                    self.attrs.append(attrs[name])
            if tag == "input" and attrs.get("type") == "submit":
                self.attrs.append(attrs.get("value", ""))
        if tag in ("script", "style"):
            self.skip += 1
        self.glue = tag == "wbr"
        if tag not in self.VOID:
            self.stack.append(inside)

    def handle_startendtag(self, tag: str, attrs_list: list) -> None:
        self.handle_starttag(tag, attrs_list)
        if tag not in self.VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self.skip -= 1
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1] and not self.skip:
            if self.glue and self.texts:
                self.texts[-1] += data
            else:
                self.texts.append(data)
        self.glue = False


def untranslated(html: str, data: list[str]) -> list[str]:
    """The texts of a page left with letters once the ⟦translations⟧ and ``data`` are out."""
    parser = _Shown()
    parser.feed(html)
    units = [" ".join(parser.texts), *parser.attrs]
    left = []
    for unit in units:
        previous = None
        while previous != unit:  # innermost first: a translation can hold another
            previous, unit = unit, re.sub(f"{OPEN}[^{OPEN}{CLOSE}]*{CLOSE}", " ", unit)
        for value in sorted(data, key=len, reverse=True):
            unit = unit.replace(value, " ")
        unit = ULID.sub(" ", unit)
        if re.search(r"[^\W\d_]", unit):
            left.append(" ".join(unit.split()))
    return left


# -- the tests --------------------------------------------------------------------------


def test_every_text_of_the_admin_is_translated(real_store, admin_client, pseudo, monkeypatch):
    from django_delayq.admin import actions as admin_actions

    store = real_store
    # Something on every page: throughput, a running job, overdue and later jobs with a
    # unique key, dead jobs with errors, a second queue with nothing dead.
    make_dead(store, message="boom")
    dead = make_dead(store, message="boom")
    done = schedule(testtasks.add, 5, 6)
    claim = store.claim(Q, 1, lease=60, token="w#done", instance="w")
    store.ack(Q, [(c.id, "w#done", "") for c in claim.jobs])
    assert [c.id for c in claim.jobs] == [done.id]
    running = make_running(store, worker="w-1")
    overdue = schedule_overdue(store, 3600 * 3 + 60, 1, 2)
    later = schedule(testtasks.add, 3, 4, delay=600, key="7:8")
    schedule(testtasks.add, 5, 6, delay=30)
    schedule(testtasks.send_mail, "1@2", delay=60)
    data = [
        Q,
        "emails",
        # The queues of tasks other test modules register (the dashboard lists them too).
        *named_queues(set()),
        "tests.testapp.tasks.add",
        "tests.testapp.tasks.always_fails",
        "tests.testapp.tasks.send_mail",
        "tests.testapp.tasks.remember",
        "tests.testapp.tasks.record",
        "tests.testapp.tasks.sleepy",
        "builtins.ValueError",
        "ValueError",
        "boom",
        "Traceback (most recent call last)",
        'File "tasks.py"',
        "w-dead",
        "w-1",
        "w-2",
        "~1",
        "~2",
        "web-1.internal",
        "UTC",
        "null",
        "---------",
        "no-such-id",
    ]
    pages: dict[str, str] = {}

    def seen(name: str, response) -> None:
        assert response.status_code in (200, 404), (name, response.status_code)
        pages[name] = response.content.decode()

    client: Client = admin_client
    seen("dashboard", client.get(url("changelist")))  # default: due jobs, no worker
    seen("no workers", client.get(url("workers")))
    beat(store, "w-1~1", running=[[Q, running, "tests.testapp.tasks.add", 75.0]], stopping=True)
    beat(store, "w-2~2", queues=[Q, "emails"], burst=True)
    seen("workers", client.get(url("workers")))
    store.client.hset(store.worker_key("bad~9"), "x", "1")  # a roster entry of another type
    store.client.zadd(store.workers_key, {"bad~9": int(time.time() * 1000)})
    data.append(store.worker_key("bad~9"))
    seen("workers, an unreadable entry", client.get(url("workers")))
    assert 'id="dq-unreadable"' in pages["workers, an unreadable entry"]
    seen("dashboard with workers", client.get(url("changelist")))
    seen("pending", client.get(url("pending")))
    seen("pending page 2", client.get(url("pending", per_page="1", p="2")))
    seen("task filter", client.get(url("pending", task="tests.testapp.tasks.add", per_page="1")))
    seen("task filter, none", client.get(url("pending", task="no.such")))
    seen("running", client.get(url("running")))
    seen("dead", client.get(url("dead")))
    seen("empty dead", client.get(url("dead", queue="emails")))
    seen("finished", client.get(url("finished")))
    seen("empty finished", client.get(url("finished", queue="emails")))
    seen("job: succeeded", client.get(url("detail", Q, done.id)))
    seen("job: pending", client.get(url("detail", Q, later.id)))
    seen("job: overdue", client.get(url("detail", Q, overdue)))
    seen("job: running", client.get(url("detail", Q, running)))
    seen("job: dead", client.get(url("detail", Q, dead)))
    seen("job: missing", client.get(url("detail", Q, "01J0000000000000000000000Z")))
    seen("find: nothing", client.get(url("find", q="no-such-id"), follow=True))
    seen("purge", client.get(url("purge", queue=Q)))
    seen("purge: nothing", client.get(url("purge", queue="emails")))
    post = {"queue": Q}
    seen("no action", client.post(url("action"), {**post, "action": "x"}, follow=True))
    seen("no ids", client.post(url("action"), {**post, "action": "run_now"}, follow=True))
    page = client.post(url("action"), {**post, "one": f"postpone:{later.id}", "from_detail": "1"})
    seen("confirm postpone", page)
    bad = {**post, "action": "postpone", "job_ids": later.id, "confirmed": "yes"}
    seen("postpone: bad delay", client.post(url("action"), {**bad, "delay_amount": "0"}))
    delay = {"delay_amount": "2", "delay_unit": "hours"}
    seen("postponed", client.post(url("action"), {**bad, **delay}, follow=True))
    seen("job: postponed, its admin log", client.get(url("detail", Q, later.id)))
    monkeypatch.setattr(admin_actions, "CONFIRM_SHOWN", 3)  # a job gone, one running, ...
    ids = ["no-such-id", running, later.id, overdue]
    page = client.post(url("action"), {**post, "action": "cancel", "ids": ids})
    seen("confirm cancel", page)
    seen("cancelled", confirm(client, page))
    seen("job: cancelled, its admin log", client.get(url("detail", Q, later.id)))
    seen("finished: searched", client.get(url("finished", q=later.id)))
    page = client.post(url("action"), {**post, "action": "delete", "ids": [dead]})
    seen("confirm delete", page)
    monkeypatch.setattr(admin_actions, "ALL_MATCHING_LIMIT", 1)
    monkeypatch.setattr(admin_actions, "ALL_SCAN", 1)
    across = {**post, "action": "delete", "select_across": "1"}
    seen("confirm all", client.post(url("action"), across))
    task = {**across, "task": "tests.testapp.tasks.add"}
    seen("searched", client.post(url("action"), task, follow=True))
    seen("none matched", client.post(url("action"), {**across, "queue": "emails"}, follow=True))
    page = client.post(url("action"), {**post, "action": "run_now", "select_across": "1"})
    seen("confirm run now", page)
    seen("run now: capped", confirm(client, page))
    # The search (?q=): its summary, where it stopped, a job in another list, bulk actions.
    monkeypatch.setattr(admin_actions.search, "SEARCH_LIMIT", 1)
    add = "tests.testapp.tasks.add"
    for i in range(3):  # jobs of the task to search for, whatever was cancelled above
        schedule(testtasks.add, 7, i, delay=900 + i)
    seen("search", client.get(url("pending", q=add, per_page="1")))
    seen("search: a window", client.get(url("pending", q=add, **{"from": "1"})))
    seen("search: all read", client.get(url("dead", q="boom", queue="emails")))
    seen("search: elsewhere", client.get(url("pending", q=dead)))
    monkeypatch.setattr(admin_actions.search, "SEARCH_LIMIT", 2)
    monkeypatch.setattr(admin_actions, "ALL_MATCHING_LIMIT", 10)
    across = {**post, "action": "cancel", "select_across": "1", "q": add}
    page = client.post(url("action"), across)
    seen("confirm search", page)
    first = page.context["chosen"].ids[0]  # its arguments change: no longer matching
    store.client.hset(store.key(Q, "jobs"), first, encode_record("x.y", [], {}))
    data.append("x.y")
    seen("cancelled, no longer matching", confirm(client, page))
    assert 'id="dq-search-next"' in pages["search"]
    assert "dq-elsewhere" in pages["search: elsewhere"]
    assert pages["cancelled, no longer matching"].count('class="success"') == 1
    assert pages["cancelled, no longer matching"].count('class="warning"') == 2
    seen("purged", confirm(client, client.get(url("purge", queue=Q)), "dq-purge"))

    problems = {name: left for name, html in pages.items() if (left := untranslated(html, data))}
    assert problems == {}
    assert all(OPEN in html for html in pages.values())  # the pseudo language was active


def test_untranslated_text_is_caught(real_store, admin_client, pseudo):
    """The check above can fail: a page with an untranslated literal does."""
    html = admin_client.get(url("changelist")).content.decode()
    # queues of registered tasks ("emails"...) are listed; the History's time axis ends
    # with the time zone's abbreviation
    queues = [Q, *named_queues(set()), "UTC"]
    assert untranslated(html, queues) == []
    broken = html.replace('<div id="content-main">', '<div id="content-main"><p>Oops</p>', 1)
    (left,) = untranslated(broken, queues)
    assert re.sub(r"[^\w]|\d", "", left) == "Oops"
    attr = html.replace('placeholder="⟦', 'placeholder="Find ⟦', 1)
    assert untranslated(attr, queues) == ["Find"]


def test_plurals_follow_the_language(real_store, admin_client, pseudo):
    """One of each: the catalogue's plural forms are used, not string replacement."""
    make_dead(real_store)
    body = admin_client.get(url("purge", queue=Q)).content.decode()
    assert "⟦Delete <strong>%(shown)s dead job</strong>" not in body  # formatted
    assert "⟦Delete <strong>1 dead job</strong>" in body
    assert 'value="⟦Yes, purge it⟧"' in body


def test_catalogue_template_is_up_to_date(tmp_path):
    """makemessages over the package finds exactly the messages of the shipped .pot."""
    if shutil.which("xgettext") is None:
        message = "GNU gettext (xgettext) is missing: apt-get install -y gettext"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    package = tmp_path / "django_delayq"
    shutil.copytree(
        ROOT / "django_delayq", package, ignore=shutil.ignore_patterns("__pycache__", "locale")
    )
    (package / "locale").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    subprocess.run(
        [sys.executable, "-m", "django", "makemessages", "-l", "en", "--keep-pot"],
        cwd=package,
        env=env,
        check=True,
        capture_output=True,
    )

    def messages(path: Path) -> set[tuple]:
        return {tuple(sorted(e.items())) for e in read_po(path)}

    fresh, shipped = messages(package / "locale" / "django.pot"), messages(POT)
    assert fresh - shipped == set(), "new messages: regenerate django.pot (see this module)"
    assert shipped - fresh == set(), "stale messages: regenerate django.pot (see this module)"
    assert len(shipped) > 100


def test_the_catalogues_are_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["django_delayq"]
    shipped = {
        Path(p).relative_to(ROOT / "django_delayq")
        for pattern in patterns
        for p in glob.glob(str(ROOT / "django_delayq" / pattern), recursive=True)
    }
    assert Path("locale/django.pot") in shipped


def test_pseudo_catalogue_round_trips(tmp_path):
    import gettext

    entries = [
        {"msgid": "Hello"},
        {"msgid": "%(n)s job", "msgid_plural": "%(n)s jobs"},
        {"msgctxt": "c", "msgid": "none"},
    ]
    write_pseudo_mo(entries, tmp_path / "t.mo")
    with open(tmp_path / "t.mo", "rb") as f:
        catalogue = gettext.GNUTranslations(f)
    assert catalogue.gettext("Hello") == "⟦Hello⟧"
    assert catalogue.ngettext("%(n)s job", "%(n)s jobs", 2) == "⟦%(n)s jobs⟧"
    assert catalogue.pgettext("c", "none") == "⟦none⟧"


def test_the_settings_schedules_are_translated(store, admin_client, pseudo):
    """The Recurring schedules page's own table (Django's list above it is Django's):
    headings, notes, labels and the interval's words."""
    from django.urls import reverse

    from django_delayq.models import ScheduleState
    from django_delayq.recurring import definitions, deploys
    from tests.conftest import more_settings
    from tests.reliability import tasks as rtasks

    schedules = {
        "nightly": {"task": rtasks.occurrence.name, "cron": "0 3 * * *", "tz": "Europe/Berlin"},
        "paused": {"task": rtasks.occurrence.name, "every": 90, "enabled": False},
        "broken": {"task": rtasks.occurrence.name, "cron": "0 25 * * *"},
    }
    ScheduleState.objects.create(
        name="nightly", name_hash=1, digest="x", since_ms=0, last_fire_ms=1_700_000_000_000,
        last_outcome="succeeded",
    )  # fmt: skip
    with more_settings(store, SCHEDULES=schedules):
        deploys.is_current(store, "another-deploy", int(time.time() * 1000))
        html = admin_client.get(reverse("admin:django_delayq_schedule_changelist")).content
        errors = [str(e) for e in definitions.from_settings()[1]]
    html = html.decode()
    start = html.index('<section id="dq-settings-schedules"')
    section = html[start : html.index("</section>", start) + len("</section>")]
    assert 'id="dq-settings-version"' in section and "data-label" in section
    zones = ["Europe/Berlin", "UTC", "CET", "CEST"]  # a time's zone and its abbreviation
    data = [*schedules, rtasks.occurrence.name, *zones, "default", "skip", "once",
            "succeeded", *errors]  # fmt: skip
    wrapped = f'<div id="content">{section}</div>'
    assert untranslated(wrapped, data) == []
    assert OPEN in section
