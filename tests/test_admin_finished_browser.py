"""The Finished list and a finished job's timeline in a real browser (Debian's headless
Chromium driven by Playwright, as tests/test_admin_browser.py: skipped without them, failed
in CI)."""

from __future__ import annotations

import pytest

from django_delayq import schedule, schedule_many
from django_delayq.worker.dispatch import Worker
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
def test_operator_reads_a_finished_jobs_timeline_and_searches(real_store, live_server, settings):
    sync_playwright = _browser_or_skip()
    _operator(settings, "view_job", "cancel_job")
    calls = [{"kwargs": {"customer": f"cust-{i:04d}"}} for i in range(300)]
    ids = [job.id for job in schedule_many(testtasks.remember, calls)]
    retried = testtasks.fails_first_attempt.schedule("<script>window.pwned = 1</script>")
    worker = Worker([Q], burst=True)
    assert worker.run() == 0  # a real worker: 300 succeed at once, one after a retry
    assert real_store.finished.count(Q) == 301
    later = schedule(testtasks.add, 1, 2, delay=600)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(10_000)
            base = f"{live_server.url}/admin/django_delayq/job"
            _login(page, live_server.url, "operator", "s3cret-pass", f"{base}/pending/")
            page.wait_for_selector(f'tr[data-job-id="{later.id}"]')

            # Cancel the pending job from its page; it is kept, and says who cancelled it.
            page.click(f'tr[data-job-id="{later.id}"] a.dq-task')
            page.click(f'button[value="cancel:{later.id}"]')
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            page.click('.dq-tabs a:has-text("Finished")')
            page.wait_for_selector(f'tr[data-job-id="{later.id}"]')
            assert page.locator("#result_list tbody tr").first.get_attribute("data-job-id") == (
                later.id
            )
            assert "cancelled" in page.locator(f'tr[data-job-id="{later.id}"]').inner_text()
            page.click(f'tr[data-job-id="{later.id}"] a.dq-task')
            timeline = page.locator("#dq-timeline")
            timeline.wait_for()
            last = timeline.locator("li").last.inner_text()
            assert "Cancelled" in timeline.inner_text() and "by operator" in timeline.inner_text()
            assert "Cancelled" in last

            # The job that failed once, then succeeded: both attempts, in order.
            page.goto(f"{base}/{Q}/{retried.id}/")
            events = page.locator("#dq-timeline li")
            kinds = [events.nth(i).get_attribute("data-kind") for i in range(events.count())]
            assert kinds == ["scheduled", "failed", "due", "succeeded", "end"]
            failed, due, succeeded = events.nth(1), events.nth(2), events.nth(3)
            assert "Due" in due.inner_text() and " after due" in succeeded.inner_text()
            assert "Attempt 1 failed" in failed.inner_text()
            assert f"worker {worker.name}" in failed.inner_text()
            assert "retried at once" in failed.inner_text() and " ms" in failed.inner_text()
            assert "Attempt 2 succeeded" in succeeded.inner_text()
            assert f"worker {worker.name}" in succeeded.inner_text()
            # The traceback is folded until asked for; the arguments are text, never run.
            traceback = failed.locator("details pre")
            assert not traceback.is_visible()
            failed.locator("summary").click()
            assert traceback.is_visible() and "Traceback" in traceback.inner_text()
            assert page.evaluate("window.pwned") is None
            assert "<script>window.pwned = 1</script>" in page.locator("#dq-args").inner_text()
            _fits(page)

            # Search the finished list: one customer among 300.
            page.goto(f"{base}/finished/?queue={Q}")
            page.fill("#dq-search", "CUST-0142")
            page.click('.dq-filters button[type="submit"]')
            page.wait_for_selector("#dq-search-summary")
            rows = page.locator("#result_list tbody tr")
            assert rows.count() == 1 and rows.get_attribute("data-job-id") == ids[142]
            summary = page.locator("#dq-search-summary").inner_text()
            assert summary == "1 job matches “CUST-0142”. Searched all 302 finished jobs."
            assert "succeeded" in rows.inner_text()
            page.set_viewport_size({"width": 420, "height": 800})
            _fits(page)
        finally:
            browser.close()
