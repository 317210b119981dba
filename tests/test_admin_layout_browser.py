"""The admin's layout at 1280 px (the sidebar open: the narrowest desktop case) and 420 px
(a phone), checked in Debian's Chromium by structure, not pixels: nothing scrolls
sideways that should not, no element past the window, no word broken across lines (a
word: a run of letters, digits and underscores; dotted names may wrap after a dot, zones
after their slash, names at their hyphens), a cell or button on as many lines as it
should be. Screenshots go to each test's tmp dir, for a look.

What it covers (issue 33): the dashboard's pending cell and "Purge dead…" wrapped on four
lines; the History chart was a 300 x 48 px sparkline with no time axis, a sliver at 420 px
with its legend wrapping word by word; the Recurring schedules list broke its task names
inside words at 1280 px and put one letter per line at 420 px; a batch's Callbacks and the
Batches list were cut off at 420 px, and its members' ids were not links.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import pytest

import django_delayq
from django_delayq import schedule, task
from django_delayq.scheduling.registry import unregister
from django_delayq.worker.dispatch import Worker
from tests.test_admin_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    _browser_or_skip,
    _dead,
    _history,
    _login,
    _operator,
    _throughput,
)
from tests.testapp import tasks as testtasks

Q = "default"
WIDTHS = (1280, 420)

# Words (runs of letters, digits, _) of the elements ``selector`` matches whose text is laid
# out on more than one line: a word broken inside ("shop.task s.sync_to_ warehous e").
BROKEN_WORDS = """(selector) => {
    const broken = [];
    for (const element of document.querySelectorAll(selector)) {
        const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const match of node.data.matchAll(/[\\p{L}\\p{N}_]+/gu)) {
                const range = document.createRange();
                range.setStart(node, match.index);
                range.setEnd(node, match.index + match[0].length);
                const tops = new Set([...range.getClientRects()]
                    .filter(r => r.width > 0).map(r => Math.round(r.top)));
                if (tops.size > 1) broken.push(match[0]);
            }
        }
    }
    return broken;
}"""
# How many lines the text of each element ``selector`` matches takes.
LINES = """(selector) => [...document.querySelectorAll(selector)].map(element => {
    const range = document.createRange();
    range.selectNodeContents(element);
    const rects = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0);
    const lines = [];
    for (const r of rects.sort((a, b) => a.top - b.top)) {
        const last = lines[lines.length - 1];
        if (last === undefined || r.top >= last.bottom - 2) lines.push({bottom: r.bottom});
        else last.bottom = Math.max(last.bottom, r.bottom);
    }
    return lines.length;
})"""
# The boxes of ``selector``'s elements that reach past the window's left or right edge.
OUTSIDE = """(selector) => [...document.querySelectorAll(selector)]
    .map(e => e.getBoundingClientRect())
    .filter(r => r.width > 0 && (r.left < -0.5 || r.right > window.innerWidth + 0.5))
    .map(r => [r.left, r.right])"""
# Boxes whose content is wider than the box: a table that scrolls, a cell that overflows.
OVERFLOWING = """(selector) => [...document.querySelectorAll(selector)]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.className)"""
PAGE_WIDTH = "() => document.documentElement.scrollWidth"


@contextmanager
def _chromium():
    """Debian's Chromium, headless (the test skips, or fails in CI, without it)."""
    sync_playwright = _browser_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def _at_each_width(browser, live_server, path: str, ready: str, shots, name: str):
    """(width, page) at 1280 and at 420 px, logged in, on ``path`` once ``ready`` shows,
    its screenshot taken, the page checked not to scroll sideways."""
    for width in WIDTHS:
        page = _page(browser, live_server, width, path)
        page.wait_for_selector(ready)
        page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
        _no_sideways_scroll(page, width)
        yield width, page
        page.close()


def _page(browser, live_server, width: int, then: str, username: str = "operator"):
    page = browser.new_page(viewport={"width": width, "height": 800})
    page.set_default_timeout(10_000)
    _login(page, live_server.url, username, "s3cret-pass", then)
    page.wait_for_load_state()
    if width >= 1024:  # the narrowest desktop case: the admin's sidebar open
        page.locator("#nav-sidebar").wait_for(state="visible")
    return page


def _no_sideways_scroll(page, width: int) -> None:
    assert page.evaluate(PAGE_WIDTH) <= width, page.evaluate(PAGE_WIDTH)


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_and_its_history_fit_without_breaking_a_word(
    real_store, live_server, settings, tmp_path
):
    _operator(settings, "view_job", "delete_job", "pause_queue")
    _throughput(real_store)
    _history(real_store)
    _dead(real_store)
    for priority in (10, 3, -5):  # three bands: the pending cell said them in four lines
        schedule(testtasks.add, priority, 1, delay=3600, priority=priority)
    cells = "#dq-dashboard th, #dq-dashboard td, #dq-history th, #dq-history td"
    row = f'#dq-dashboard tr[data-queue="{Q}"]'
    with _chromium() as browser:
        dashboard = "/admin/django_delayq/job/"
        for width, page in _at_each_width(
            browser, live_server, dashboard, "#dq-dashboard", tmp_path, "dashboard"
        ):
            assert page.evaluate(OVERFLOWING, ".dq-scroll") == [], width
            assert page.evaluate(BROKEN_WORDS, cells) == [], width
            # The pending number on its line; each band, each button on one line.
            assert page.evaluate(LINES, f"{row} td:has(> a.dq-pending)") == [1], width
            bands = page.evaluate(LINES, f'[data-details-of="{Q}"] .dq-band')
            assert bands == [1, 1, 1], width
            assert page.evaluate(LINES, f"{row} .dq-queue-actions .button") == [1, 1], width
            assert page.evaluate(OUTSIDE, f"{row} .dq-queue-actions .button") == [], width
            assert set(page.evaluate(LINES, ".dq-legend-item")) == {1}, width

            # The History chart: as wide as its table, 80 px high, with a time axis.
            chart = page.locator(f'[data-chart-of="{Q}"] svg.dq-history')
            box, table = chart.bounding_box(), page.locator("#dq-history").bounding_box()
            assert box["width"] >= 0.9 * table["width"], (box, table)
            assert box["height"] == 80 and box["width"] >= 350, box
            ticks = page.locator(f'[data-chart-of="{Q}"] .dq-tick')
            assert ticks.count() == 5
            boxes = [ticks.nth(i).bounding_box() for i in range(5)]
            assert boxes[0]["x"] >= box["x"] - 0.5
            assert boxes[-1]["x"] + boxes[-1]["width"] <= box["x"] + box["width"] + 0.5
            for left, right in itertools.pairwise(boxes):
                assert left["x"] + left["width"] <= right["x"], (left, right)
            assert ticks.nth(4).inner_text().endswith(" UTC")


@pytest.mark.django_db(transaction=True)
def test_a_batch_and_the_batches_list_fit_and_link_their_members(
    real_store, live_server, settings, tmp_path
):
    _operator(settings, "view_job")
    note = "a callback whose arguments run long " * 3
    with django_delayq.batch(
        on_complete=testtasks.add.call(note, "!"), on_death=testtasks.add.call(1, 2)
    ) as made:
        members = [testtasks.add.schedule(i, i) for i in range(3)]
    assert Worker([Q], burst=True).run() == 0  # the members and on_complete run
    batch_page = f"/admin/django_delayq/job/batch/?id={made.id}"
    with _chromium() as browser:
        batches = "/admin/django_delayq/job/batches/"
        for width, page in _at_each_width(
            browser, live_server, batches, "#dq-batches", tmp_path, "batches"
        ):
            assert page.evaluate(OVERFLOWING, ".dq-scroll, #dq-batches td") == [], width
            assert page.evaluate(OUTSIDE, "#dq-batches td, #dq-batches th") == [], width
            assert page.evaluate(BROKEN_WORDS, "#dq-batches .dq-callbacks") == [], width
            assert "on complete: job succeeded" in page.locator("#dq-batches").inner_text()
        for width, page in _at_each_width(
            browser, live_server, batch_page, "#dq-callbacks", tmp_path, "batch"
        ):
            assert page.evaluate(OVERFLOWING, ".dq-scroll, #dq-callbacks td") == [], width
            assert page.evaluate(OUTSIDE, "#dq-callbacks th, #dq-callbacks td") == [], width
            assert page.evaluate(BROKEN_WORDS, "#dq-callbacks") == [], width
            links = page.locator("#dq-members tbody tr a")
            assert sorted(links.all_inner_texts()) == sorted(m.id for m in members)
        # A succeeded member's link opens its page, kept since it finished.
        page = _page(browser, live_server, 1280, batch_page)
        page.click(f'#dq-members tr[data-job-id="{members[0].id}"] a')
        page.wait_for_selector("#dq-job")
        assert "Succeeded" in page.locator("#dq-job").inner_text()


WAREHOUSE = "shop.tasks.sync_to_warehouse"


@pytest.mark.django_db(transaction=True)
def test_the_schedules_list_keeps_its_words_whole(real_store, live_server, settings, tmp_path):
    """At 1280 px the rows fit their box, no word broken; at 420 px the rows' table
    scrolls sideways inside its box (Django's own pattern for a change list), the page
    does not, and still no word is broken (it was one letter per line)."""
    from django_delayq.models import Schedule
    from tests.conftest import more_settings

    _operator(settings, "view_schedule")
    sync = task(name=WAREHOUSE)(lambda **kwargs: None)
    Schedule.objects.create(
        name="berlin-warehouse-sync", task=WAREHOUSE, cron="0 3 * * *", tz="Europe/Berlin"
    )
    Schedule.objects.create(name="every-ten-minutes-sync", task=WAREHOUSE, every=600)
    nightly = {"task": WAREHOUSE, "cron": "0 3 * * *", "tz": "Europe/Berlin"}
    words = "#result_list td, #result_list th, #dq-settings-table td, #dq-settings-table th"
    schedules = "/admin/django_delayq/schedule/"
    try:
        with more_settings(real_store, SCHEDULES={"nightly-sweep": nightly}), _chromium() as b:
            for width, page in _at_each_width(
                b, live_server, schedules, "#result_list", tmp_path, "schedules"
            ):
                assert page.evaluate(BROKEN_WORDS, words) == [], width
                # A dotted name on at most two lines, cut after a dot.
                tasks = page.evaluate(LINES, "#result_list td.field-task_name .dq-task")
                assert len(tasks) == 2 and max(tasks) <= 2, (width, tasks)
                if width == 1280:
                    assert page.evaluate(OVERFLOWING, ".results") == []
                    right = page.evaluate(OUTSIDE, "#result_list td, #dq-settings-table td")
                    assert right == []
                next_run = page.locator("#result_list td.field-next_run span").first
                assert next_run.get_attribute("title") == "Europe/Berlin"
                assert next_run.inner_text().endswith(("03:00:00 CET", "03:00:00 CEST"))
    finally:
        unregister(sync.name)
