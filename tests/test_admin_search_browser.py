"""The lists' search and a bulk cancel of what it matches, in a real browser (Debian's
headless Chromium driven by Playwright, as tests/test_admin_browser.py: skipped without
them, failed in CI)."""

from __future__ import annotations

import pytest

from django_delayq import schedule, schedule_many
from tests.test_admin_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    _browser_or_skip,
    _fits,
    _login,
    _operator,
)
from tests.testapp import tasks as testtasks

Q = "default"


@pytest.mark.django_db(transaction=True)
def test_operator_searches_and_cancels_what_matches(real_store, live_server, settings):
    sync_playwright = _browser_or_skip()
    _operator(settings, "view_job", "cancel_job")
    calls = [{"kwargs": {"customer": f"cust-{i:04d}"}, "delay": 600 + i} for i in range(300)]
    ids = [job.id for job in schedule_many(testtasks.remember, calls)]
    trap = schedule(testtasks.remember, "<script>window.pwned = 1</script>", delay=60)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(10_000)
            base = f"{live_server.url}/admin/django_delayq/job"
            _login(page, live_server.url, "operator", "s3cret-pass", f"{base}/pending/")
            page.wait_for_selector("#dq-search")

            # One customer among 300: exactly one row.
            page.fill("#dq-search", "CUST-0142")
            page.click('.dq-filters button[type="submit"]')
            page.wait_for_selector("#dq-search-summary")
            rows = page.locator("#result_list tbody tr")
            assert rows.count() == 1 and rows.get_attribute("data-job-id") == ids[142]
            summary = page.locator("#dq-search-summary").inner_text()
            assert summary == "1 job matches “CUST-0142”. Searched all 301 pending jobs."

            # Arguments that are markup are shown as text, never run.
            page.fill("#dq-search", "<script>")
            page.click('.dq-filters button[type="submit"]')
            page.wait_for_selector(f'tr[data-job-id="{trap.id}"]')
            assert page.evaluate("window.pwned") is None
            assert "<script>window.pwned = 1</script>" in rows.first.inner_text()

            # Everything "cust-014" matches, cancelled after the confirmation page.
            page.fill("#dq-search", "cust-014")
            page.click('.dq-filters button[type="submit"]')
            ten = "document.querySelectorAll('#result_list tbody tr').length == 10"
            page.wait_for_function(ten)
            page.check('input[name="select_across"]')
            label = page.locator('input[name="select_across"]').locator("xpath=..").inner_text()
            assert label.strip() == "all 10 jobs matching “cust-014”"
            page.select_option('select[name="action"]', "cancel")
            page.click('button[name="index"]')
            page.wait_for_selector("#dq-confirm")
            assert page.locator("h1").inner_text() == "Cancel 10 pending jobs?"
            assert page.locator("#dq-confirm-jobs tbody tr").count() == 10
            assert real_store.size(Q, "pending") == 301  # nothing cancelled yet
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            assert page.locator("ul.messagelist").inner_text().strip() == "10 jobs cancelled."
            assert page.locator("#dq-search").input_value() == "cust-014"  # back to the search
            assert page.locator("#result_list tbody tr.dq-empty, td.dq-empty").count() == 1
            assert real_store.size(Q, "pending") == 291
            assert all(real_store.fetch(Q, job_id) is None for job_id in ids[140:150])
            assert real_store.fetch(Q, ids[139]) is not None

            # A search's page fits a phone's width too (its summary, its links, the form).
            page.set_viewport_size({"width": 420, "height": 800})
            page.goto(f"{base}/pending/?queue={Q}&q=cust-01")
            page.wait_for_selector("#dq-search-summary")
            _fits(page)
        finally:
            browser.close()
