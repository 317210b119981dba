"""The admin dashboard in a real browser: Debian's headless Chromium driven by Playwright.

Needs ``playwright`` (the test extra) and ``/usr/bin/chromium`` (``apt-get install
chromium``; Playwright's own browser download is never used). In CI (``CI`` set) a missing
browser fails the test; elsewhere it skips.

The dashboard and Workers tab screenshots go to the tests' tmp dirs; with
``DELAYQ_SCREENSHOT=1`` they also refresh ``docs/admin-dashboard.png`` and
``docs/admin-workers.png`` (the docs' pictures). The layout test leaves its
screenshots (1280 x 800 and 420 x 800) in its tmp dir too, for a look.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User

import django_delayq
from django_delayq import get_job, schedule, task
from django_delayq.jobs.ids import new_job_id
from django_delayq.jobs.record import encode_record
from django_delayq.scheduling.registry import unregister
from django_delayq.storage.history import bucket_of
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from django_delayq.worker.execution import STARTED
from tests.test_admin_workers import beat
from tests.testapp import tasks as testtasks

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DOCS_PNG = Path(__file__).resolve().parent.parent / "docs" / "admin-dashboard.png"
WORKERS_PNG = DOCS_PNG.with_name("admin-workers.png")
Q = "default"


def _browser_or_skip():
    problems = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        problems.append("the playwright package is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        problems.append(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    if problems:
        message = "browser test cannot run: " + "; ".join(problems)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_playwright


def _throughput(store: Store, minutes: int = 30) -> None:
    """Jobs done and failed over the last ``minutes`` minutes, as a worker would leave them."""
    now = time.time()
    for ago in range(minutes, 0, -1):
        at = float(int(now) - ago * 60 + 1)  # whole seconds: claim compares at µs precision
        done, failed = 2 + (ago * 7) % 9, (1 if ago % 6 == 0 else 0) + (2 if ago == 4 else 0)
        for _ in range(done):
            store.schedule(
                Q, new_job_id(), encode_record("shop.tasks.sync", [ago], {}, None, 3), now=at
            )
        claim = store.claim(Q, done, lease=60, token=f"bench#t{ago}", instance="bench", now=at)
        for job in claim.jobs[:failed]:
            error = {"type": "builtins.TimeoutError", "message": "slow", "attempt": 1, "at": at}
            store.fail(
                Q,
                job.id,
                f"bench#t{ago}",
                error,
                delay=0,
                default_max_retries=3,
                dead_max_age=86400,
                dead_max_count=100,
                max_errors=10,
                now=at,
            )
        again = store.claim(Q, failed, lease=60, token=f"bench#r{ago}", instance="bench", now=at)
        store.ack(Q, [(j.id, f"bench#t{ago}", "") for j in claim.jobs[failed:]], now=at)
        store.ack(Q, [(j.id, f"bench#r{ago}", "") for j in again.jobs], now=at)


def _history(store, minutes: int = 60) -> None:
    """What workers would have flushed over the last hour: done, failed, dead, lateness."""
    now = int(store.server_time() // 60)
    counts = {}
    for ago in range(0, minutes, 3):
        late = f"l{bucket_of(20 + ago * 40)}"
        counts[(Q, now - ago)] = {"d": 3 + ago % 7, "f": ago % 4, "x": int(ago == 9), late: 3}
    store.history.flush(counts)


def _dead(store: Store) -> str:
    job = schedule(testtasks.always_fails, "card declined", key="refund:17")
    store.claim(Q, 1, lease=60, token="web-2.311#d", instance="web-2.311")
    error = {
        "type": "builtins.ValueError",
        "message": "card declined",
        "traceback": "Traceback (most recent call last):\nValueError: card declined",
        "attempt": 3,
        "at": time.time(),
        "worker": "web-2.311",
    }
    store.fail(
        Q,
        job.id,
        "web-2.311#d",
        error,
        delay=-1,
        default_max_retries=0,
        dead_max_age=86400,
        dead_max_count=100,
        max_errors=10,
    )
    return job.id


@pytest.mark.django_db(transaction=True)
def test_operator_cancels_and_requeues_in_a_browser(real_store, live_server, settings, tmp_path):
    sync_playwright = _browser_or_skip()
    _operator(settings, "view_job", "cancel_job", "requeue_job", "delete_job", "run_job")
    # What the operator sees: throughput, a running job, an overdue backlog, two queues.
    _throughput(real_store)
    _history(real_store)
    schedule(testtasks.sleepy, "report", 1, 30)
    claim = real_store.claim(Q, 1, lease=120, token="web-1.4242#r", instance="web-1.4242")
    real_store.call(real_store.mark_op(Q, claim.jobs[0].id, claim.now + 120))
    dead_id = _dead(real_store)
    for i in range(3):
        real_store.schedule(
            Q, new_job_id(), encode_record("shop.tasks.sync", [i], {}), now=time.time() - 95
        )
    scheduled = schedule(testtasks.add, 40, 2, delay=29 * 60, key="invoice:42")
    for i in range(4):
        schedule(testtasks.send_mail, f"user{i}@example.com", delay=300 * (i + 1))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 640})
            page.set_default_timeout(10_000)
            base = live_server.url
            page.goto(f"{base}/admin/login/?next=/admin/django_delayq/job/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "s3cret-pass")
            page.click("input[type=submit], button[type=submit]")
            page.wait_for_selector("#dq-dashboard")
            row = page.locator('#dq-dashboard tr[data-queue="default"]')
            assert row.locator(".dq-pending").inner_text() == "4"
            assert page.locator('#dq-dashboard tr[data-queue="emails"]').count() == 1
            shot = tmp_path / "admin-dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            if os.environ.get("DELAYQ_SCREENSHOT"):
                DOCS_PNG.parent.mkdir(exist_ok=True)
                shutil.copyfile(shot, DOCS_PNG)

            # The scheduled job is on the pending list, due in 29 minutes; cancel it.
            row.locator(".dq-pending").click()
            job_row = page.locator(f'tr[data-job-id="{scheduled.id}"]')
            when = job_row.inner_text().replace("\xa0", " ")
            assert "in 28 minutes" in when or "in 29 minutes" in when
            assert "invoice:42" in job_row.inner_text()
            job_row.locator(f'button[value="cancel:{scheduled.id}"]').click()
            # It asks first, listing the job; nothing is cancelled until "Yes".
            page.wait_for_selector("#dq-confirm")
            assert page.locator("h1").inner_text() == "Cancel 1 pending job?"
            assert page.locator(f'#dq-confirm tr[data-job-id="{scheduled.id}"]').count() == 1
            assert real_store.fetch(Q, scheduled.id) is not None
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            assert "1 job cancelled." in page.locator("ul.messagelist").inner_text()
            assert page.locator(f'tr[data-job-id="{scheduled.id}"]').count() == 0
            assert real_store.fetch(Q, scheduled.id) is None
            assert real_store.id_for_key(Q, "invoice:42") is None

            # The dead job: open it, read its traceback, requeue it from the list.
            page.click('.dq-tabs a:has-text("Dead")')
            page.click(f'tr[data-job-id="{dead_id}"] a')
            assert "ValueError: card declined" in page.locator("#dq-timeline").inner_text()
            page.go_back()
            page.check(f'tr[data-job-id="{dead_id}"] input.dq-select')
            page.select_option('select[name="action"]', "requeue")
            page.click('button[name="index"]')
            page.wait_for_selector("ul.messagelist")
            assert "1 job requeued." in page.locator("ul.messagelist").inner_text()
            raw = real_store.fetch(Q, dead_id)
            assert raw.status == "pending"
            assert raw.score <= real_store.server_time()
            assert get_job(dead_id).attempts == 0
        finally:
            browser.close()


LONG_TASK = "shop.billing.reconciliation.subsystems.ledger_tasks.reconcile_customer_ledger_entries"
LONG_WORD = "Averyveryverylongwordwithoutanyspaces" * 3


def _crowded(store: Store) -> None:
    """What overflowed the lists: long task names, arguments, keys, workers and errors."""
    now = time.time()
    for i in range(30):
        args = [i, "x" * (20 + 15 * i), {"customer": f"cust-{i}", "note": "a long note " * 4}]
        record = encode_record(
            LONG_TASK if i % 3 == 0 else "shop.tasks.sync", args, {"dry_run": False}
        )
        store.schedule(Q, new_job_id(), record, delay=60 * i - 120, now=now)
    worker = "web-1." + "x" * 60 + ".4242"
    claim = store.claim(Q, 3, lease=120, token=f"{worker}#r", instance=worker)
    for job in claim.jobs:
        store.call(store.mark_op(Q, job.id, claim.now + 120))
    for i in range(15):
        job_id = new_job_id()
        args = [f"order-{i}", "y" * 40 * i]
        record = encode_record(LONG_TASK, args, {"reason": "unpaid"}, max_retries=0)
        store.schedule(Q, job_id, record, delay=0, now=now - 400)
        store.claim(Q, 1, lease=60, token=f"w#d{i}", instance="w", now=now - 300)
        message = (
            "ConnectionRefusedError: could not connect to payments-gateway.internal.example.com:"
            "443 after 3 retries; upstream said " + LONG_WORD + " " + "blah " * (i * 5)
        )
        error = {"type": "builtins.RuntimeError", "message": message, "attempt": 3, "at": now}
        outcome, _ = store.fail(
            Q,
            job_id,
            f"w#d{i}",
            error,
            delay=-1,
            default_max_retries=0,
            dead_max_age=86400,
            dead_max_count=100,
            max_errors=10,
        )
        assert outcome == "dead"


FITS = """() => {
    const width = window.innerWidth;
    const outside = [...document.querySelectorAll(
        '.dq-row-actions button, .dq-detail-actions button, #dq-confirm-yes, .cancel-link')]
        .map(b => b.getBoundingClientRect())
        .filter(r => r.width > 0 && (r.left < 0 || r.right > width + 0.5));
    const scrolled = [...document.querySelectorAll('.dq-scroll')]
        .filter(box => box.scrollWidth > box.clientWidth + 1);
    const cut = [...document.querySelectorAll('#result_list td, #dq-confirm-jobs td')]
        .filter(td => td.scrollWidth > td.clientWidth + 1);
    return {page: document.documentElement.scrollWidth, width: width,
            outside: outside.length, scrolled: scrolled.length, cut: cut.length,
            buttons: document.querySelectorAll('.dq-row-actions button').length};
}"""


def _operator(settings, *codenames: str) -> User:
    """A staff user "operator" (password s3cret-pass, hashed fast) with these permissions
    of django_delayq, for the browser tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    operator = User.objects.create_user("operator", password="s3cret-pass", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_delayq", codename__in=codenames)
    )
    return operator


def _fits(page) -> dict:
    """Nothing scrolls sideways: not the page, not a table's box; no cell cut short; every
    row button inside the window."""
    result = page.evaluate(FITS)
    assert result["page"] <= result["width"], result
    assert result["outside"] == 0 and result["scrolled"] == 0 and result["cut"] == 0, result
    return result


@pytest.mark.django_db(transaction=True)
def test_lists_fit_and_destructive_actions_ask_first(real_store, live_server, settings, tmp_path):
    sync_playwright = _browser_or_skip()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    User.objects.create_superuser("root", "root@example.com", "s3cret-pass")
    _crowded(real_store)
    base = f"{live_server.url}/admin/django_delayq/job"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(10_000)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_delayq/job/")
            page.fill("#id_username", "root")
            page.fill("#id_password", "s3cret-pass")
            page.click("input[type=submit], button[type=submit]")
            page.wait_for_selector("#dq-dashboard")
            page.locator("#nav-sidebar").wait_for(state="visible")  # the narrowest desktop case

            # 1280 x 800: the dead list fits, Requeue / Delete inside the window.
            for path, buttons in (("dead/", 15 * 2), ("pending/", 27 * 2), ("running/", 0)):
                page.goto(f"{base}/{path}")
                fitted = _fits(page)
                assert fitted["buttons"] == buttons, fitted
            page.screenshot(path=str(tmp_path / "running-1280.png"))
            page.goto(f"{base}/dead/")
            page.screenshot(path=str(tmp_path / "dead-1280.png"))
            # The last error is clamped to whole lines, its full text in the title.
            error = page.locator("#result_list td.dq-last-error .dq-clamp").first
            assert LONG_WORD in error.get_attribute("title")
            box = error.bounding_box()
            assert box["height"] <= 3 * 20

            # An empty list has nothing to select.
            page.goto(f"{base}/dead/?queue=emails")
            assert page.locator("#dq-toggle, input.dq-select").count() == 0
            assert "No dead jobs in emails." in page.locator("#result_list").inner_text()

            # The purge page's two buttons are one size.
            page.goto(f"{base}/purge/?queue={Q}")
            yes, no = page.locator("#dq-purge").bounding_box(), page.locator(".cancel-link")
            no = no.bounding_box()
            assert abs(yes["height"] - no["height"]) <= 1 and abs(yes["y"] - no["y"]) <= 1
            assert page.locator("#dq-purge").get_attribute("value") == "Yes, purge them"

            # Cancel from a job page asks first; "No" changes nothing, "Yes" lands on the list.
            page.goto(f"{base}/pending/")
            first = page.locator("#result_list tbody tr").first
            job_id = first.get_attribute("data-job-id")
            first.locator("a.dq-task").click()
            page.wait_for_url(f"{base}/{Q}/{job_id}/")  # no more .../job/job/...
            page.click(f'button[value="cancel:{job_id}"]')
            page.wait_for_selector("#dq-confirm")
            assert page.locator("h1").inner_text() == "Cancel 1 pending job?"
            _fits(page)
            page.click(".cancel-link")
            page.wait_for_url(f"{base}/{Q}/{job_id}/")
            assert real_store.fetch(Q, job_id).status == "pending"
            page.click(f'button[value="cancel:{job_id}"]')
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            assert page.url == f"{base}/pending/?queue={Q}"
            assert page.locator("ul.messagelist").inner_text().strip() == "1 job cancelled."
            assert real_store.fetch(Q, job_id) is None

            # Run now from a job page lands on the pending list, not on "No job ...".
            later = page.locator("#result_list tbody tr").last
            job_id = later.get_attribute("data-job-id")
            page.goto(f"{base}/{Q}/{job_id}/")
            page.click(f'button[value="run_now:{job_id}"]')
            page.wait_for_selector("ul.messagelist")
            assert page.url == f"{base}/pending/?queue={Q}"
            assert page.locator("ul.messagelist").inner_text().strip() == "1 job made due now."
            assert page.locator("#dq-missing").count() == 0
            assert real_store.fetch(Q, job_id).score <= real_store.server_time()

            # Postpone from a job page asks for the delay, then stays on the job's page.
            job_id = page.locator("#result_list tbody tr").last.get_attribute("data-job-id")
            page.goto(f"{base}/{Q}/{job_id}/")
            page.click(f'button[value="postpone:{job_id}"]')
            page.wait_for_selector("#dq-postpone-delay")
            assert page.locator("h1").inner_text() == "Postpone 1 pending job?"
            _fits(page)
            page.fill("#dq-delay-amount", "3")
            page.select_option("#dq-delay-unit", "days")
            before = real_store.server_time()
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            assert page.url == f"{base}/{Q}/{job_id}/"
            assert page.locator("ul.messagelist").inner_text().strip() == "1 job postponed."
            assert real_store.fetch(Q, job_id).score >= before + 3 * 86400
            page.goto(f"{base}/pending/")

            # "All matching" cancel asks too, with the count, and cancels only after "Yes".
            pending = real_store.size(Q, "pending")
            page.check('input[name="select_across"]')
            page.select_option('select[name="action"]', "cancel")
            page.click('button[name="index"]')
            page.wait_for_selector("#dq-confirm")
            assert page.locator("h1").inner_text() == f"Cancel {pending} pending jobs?"
            assert page.locator("#dq-confirm-jobs tbody tr").count() == 20
            more = page.locator("#dq-confirm-more").inner_text()
            assert more == f"…and {pending - 20} more jobs."
            assert real_store.size(Q, "pending") == pending
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            assert f"{pending} jobs cancelled" in page.locator("ul.messagelist").inner_text()
            assert real_store.size(Q, "pending") == 0
            page.close()

            # 420 px: no page scrolls sideways; row buttons stay in the window.
            page = browser.new_page(viewport={"width": 420, "height": 800})
            page.set_default_timeout(10_000)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "root")
            page.fill("#id_password", "s3cret-pass")
            page.click("input[type=submit], button[type=submit]")
            dead_id = real_store.page_ids(Q, "dead", 0, 1)[0]
            for path in ("", "pending/", "running/", "dead/", f"{Q}/{dead_id}/", "purge/"):
                page.goto(f"{base}/{path}")
                _fits(page)
            page.screenshot(path=str(tmp_path / "purge-420.png"), full_page=True)
            page.goto(f"{base}/dead/")
            page.screenshot(path=str(tmp_path / "dead-420.png"))
            page.locator("#result_list tbody tr").first.locator("button.dq-danger").click()
            page.wait_for_selector("#dq-confirm")
            assert page.locator("h1").inner_text() == "Delete 1 dead job?"
            _fits(page)
            # Postpone's confirmation page, its delay field included, fits too.
            job_id = schedule(testtasks.add, 1, 2, delay=600).id
            page.goto(f"{base}/{Q}/{job_id}/")
            page.click(f'button[value="postpone:{job_id}"]')
            page.wait_for_selector("#dq-postpone-delay")
            _fits(page)
            field = page.locator("#dq-postpone-delay").bounding_box()
            assert field["x"] >= 0 and field["x"] + field["width"] <= 420, field
            page.screenshot(path=str(tmp_path / "postpone-420.png"), full_page=True)
        finally:
            browser.close()


def _login(page, base: str, username: str, password: str, then: str) -> None:
    page.goto(f"{base}/admin/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit], button[type=submit]")


@pytest.mark.django_db(transaction=True)
def test_workers_tab_in_a_browser(real_store, live_server, settings, tmp_path):
    """A real worker in this process runs two jobs that wait for the test; the Workers tab
    shows it (and another machine's idle worker, written as its presence thread would)
    with its running jobs linked to their pages, and drops it once it stops; the dashboard
    counts live workers per queue and flags a queue with due jobs and no worker."""
    sync_playwright = _browser_or_skip()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    User.objects.create_superuser("root", "root@example.com", "s3cret-pass")
    gate = testtasks.gate(f"g-{uuid.uuid4().hex[:8]}")

    def wait(*args) -> None:
        gate.wait(60)

    names = ["shop.tasks.prepare_invoice", "shop.tasks.sync_to_warehouse"]
    invoice, sync = (task(name=name, retry_backoff=0)(wait) for name in names)
    worker = Worker([Q, "emails"], concurrency=4, name="web-1")
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        first = invoice.schedule(1042, "EUR")
        second = sync.schedule(1042)
        for i in range(25):
            testtasks.add.schedule(i, i)
        for i in range(3):  # a queue nobody serves, with due jobs
            schedule(testtasks.add, i, i, queue="reports")
        beat(
            real_store,
            "web-2~5117",
            host="web-2.internal",
            pid=5117,
            queues=["emails"],
            version=django_delayq.__version__,  # the screenshot shows one release
        )
        thread.start()

        def started() -> bool:
            return sum(a.state == STARTED and a.fields is not None for a in worker.holding()) == 2

        deadline = time.monotonic() + 30
        while not (started() and worker.processed == 25) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started() and worker.processed == 25, worker.holding()
        worker.parts.presence.beat()  # beats come every 5 s by default: write one now
        base = live_server.url
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1360, "height": 560})
                page.set_default_timeout(10_000)
                _login(page, base, "root", "s3cret-pass", "/admin/django_delayq/job/")
                page.wait_for_selector("#dq-dashboard")
                unserved = page.locator("#dq-unserved").inner_text()
                assert "Queue reports has due jobs and no live worker serves it" in unserved
                cell = page.locator('#dq-dashboard tr[data-queue="reports"] td.dq-served')
                assert cell.inner_text() == "none"
                served = page.locator('#dq-dashboard tr[data-queue="emails"] td.dq-served')
                assert served.inner_text() == "2"

                page.click('.dq-tabs a:has-text("Workers")')
                page.wait_for_selector("#dq-workers")
                row = page.locator(f'#dq-workers tr[data-worker="{worker.instance}"]')
                assert str(os.getpid()) in row.inner_text()  # this process runs it
                assert row.locator("td").nth(1).inner_text() == "2 of 4"
                assert row.locator("td").nth(3).inner_text() == "25 / 0"
                links = row.locator(".dq-running-job a.dq-task")
                assert links.count() == 2
                assert "shop.tasks.prepare_invoice" in row.inner_text().replace("\u200b", "")
                other = page.locator('#dq-workers tr[data-worker="web-2~5117"]')
                assert "idle" in other.inner_text() and "web-2.internal" in other.inner_text()
                shot = tmp_path / "admin-workers.png"
                page.screenshot(path=str(shot), full_page=True)
                assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                if os.environ.get("DELAYQ_SCREENSHOT"):
                    shutil.copyfile(shot, WORKERS_PNG)
                _fits(page)

                # A running job's link opens its page.
                row.locator(f'.dq-running-job[data-job-id="{first.id}"] a').click()
                page.wait_for_url(f"{base}/admin/django_delayq/job/{Q}/{first.id}/")
                assert "prepare_invoice" in page.locator("#content").inner_text()

                # 420 px: one card per worker, nothing scrolls sideways.
                narrow = browser.new_page(viewport={"width": 420, "height": 800})
                _login(narrow, base, "root", "s3cret-pass", "/admin/django_delayq/job/workers/")
                narrow.wait_for_selector("#dq-workers")
                _fits(narrow)
                narrow.screenshot(path=str(tmp_path / "workers-420.png"), full_page=True)

                # Once it stops, the worker leaves the tab.
                gate.set()
                worker.request_stop()
                thread.join(20)
                assert not thread.is_alive()
                assert real_store.fetch(Q, second.id) is None  # both jobs ran to the end
                # web-2's presence thread beats every 5 s, its entry lives 15 s: beat it as
                # that thread would (the steps above can take longer than 15 s on a loaded
                # machine, and web-2 then left the tab as a dead worker should).
                beat(real_store, "web-2~5117", host="web-2.internal", pid=5117, queues=["emails"])
                page.goto(f"{base}/admin/django_delayq/job/workers/")
                page.wait_for_selector("#dq-workers")
                assert page.locator(f'tr[data-worker="{worker.instance}"]').count() == 0
                assert page.locator('tr[data-worker="web-2~5117"]').count() == 1
            finally:
                browser.close()
    finally:
        gate.set()
        worker.request_stop(force=True)
        for name in names:
            unregister(name)


CELLS_RIGHT = """(selector) => [...document.querySelectorAll(selector)]
    .map(cell => cell.getBoundingClientRect().right)"""
LONG_SCHEDULE_TASK = "shop.billing.reconciliation.subsystems.ledger_tasks.sweep_unpaid_orders"


@pytest.mark.django_db(transaction=True)
def test_recurring_schedules_page_fits_and_shows_the_settings_schedules(
    real_store, live_server, settings, tmp_path
):
    """At 1280 x 800 with the sidebar open, last run and last outcome of the database's rows
    and of the settings' schedules are inside the window (they were cut off at the right,
    and the settings' schedules were not listed at all)."""
    from django_delayq.models import Schedule, ScheduleState
    from tests.conftest import more_settings

    sync_playwright = _browser_or_skip()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    User.objects.create_superuser("root", "root@example.com", "s3cret-pass")
    sweep = task(name=LONG_SCHEDULE_TASK)(lambda **kwargs: None)
    spec = {"task": sweep.name, "cron": "0 3 * * *", "tz": "America/Argentina/Buenos_Aires"}
    schedules = {
        "nightly-unpaid-sweep": {**spec, "kwargs": {"older_than_hours": 24, "note": "x" * 90}},
        "every-minute-ledger-reconciliation-for-all-regions": {"task": sweep.name, "every": 60},
    }
    for i in range(3):
        Schedule.objects.create(
            name=f"database-schedule-with-a-long-name-{i}", task=sweep.name, cron="*/5 * * * *",
            tz="America/Argentina/Buenos_Aires", kwargs={"region": f"eu-{i}"},
        )  # fmt: skip
    for name in [*schedules, "database-schedule-with-a-long-name-0"]:
        ScheduleState.objects.create(
            name=name, name_hash=1, digest="x", since_ms=0, last_fire_ms=1_700_000_000_000,
            last_outcome="succeeded",
        )  # fmt: skip
    try:
        with more_settings(real_store, SCHEDULES=schedules), sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(10_000)
                then = "/admin/django_delayq/schedule/"
                _login(page, live_server.url, "root", "s3cret-pass", then)
                page.wait_for_selector("#result_list")
                page.locator("#nav-sidebar").wait_for(state="visible")
                page.screenshot(path=str(tmp_path / "schedules-1280.png"), full_page=True)
                row = page.locator('#dq-settings-table tr[data-schedule="nightly-unpaid-sweep"]')
                assert row.is_visible()
                assert "from settings (read-only)" in row.inner_text()
                assert row.locator("a").count() == 0  # nothing to edit or delete
                assert row.locator(".dq-outcome").inner_text() == "succeeded"
                task_shown = row.locator(".dq-task")
                assert task_shown.get_attribute("title") == LONG_SCHEDULE_TASK
                assert task_shown.inner_text() == "…ledger_tasks.sweep_unpaid_orders"
                for cell in (".dq-last-run", ".dq-outcome"):
                    box = row.locator(cell).bounding_box()
                    assert box is not None and box["width"] > 0
                    assert box["x"] + box["width"] <= 1280, (cell, box)
                for selector in (
                    "#result_list td.field-last_run",
                    "#result_list td.field-last_outcome",
                    "#dq-settings-table td.dq-last-run",
                    "#dq-settings-table td.dq-outcome",
                ):
                    rights = page.evaluate(CELLS_RIGHT, selector)
                    assert rights and max(rights) <= 1280, (selector, rights)
                first = page.locator("#result_list tbody tr").first
                assert first.locator("td.field-last_outcome").inner_text() == "succeeded"
                # Nothing scrolls sideways: not the page, not the list's box.
                widths = page.evaluate(
                    """() => ({page: document.documentElement.scrollWidth,
                       results: [...document.querySelectorAll('.results, #dq-settings-schedules')]
                         .map(b => b.scrollWidth - b.clientWidth)})"""
                )
                assert widths["page"] <= 1280 and max(widths["results"]) <= 1, widths
            finally:
                browser.close()
    finally:
        unregister(sweep.name)


@pytest.mark.django_db(transaction=True)
def test_operator_opens_a_batch_and_cancels_it_in_a_browser(
    real_store, live_server, settings, tmp_path
):
    """The Batches tab lists a batch; its page shows its callbacks and members; Cancel
    batch asks on a page of its own, then cancels the members not ended."""
    sync_playwright = _browser_or_skip()
    _operator(settings, "view_job", "cancel_job")
    with django_delayq.batch(on_complete=testtasks.add.call(40, 2)) as b:
        members = [testtasks.add.schedule(i, i, delay=600) for i in range(4)]
    assert django_delayq.cancel(members[0].id)  # one ended already: 3 left to cancel

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(10_000)
            _login(page, live_server.url, "operator", "s3cret-pass", "/admin/django_delayq/job/")
            page.wait_for_selector("#dq-dashboard")
            page.click('.dq-tabs a:has-text("Batches")')
            row = page.locator(f'#dq-batches tr[data-batch-id="{b.id}"]')
            assert "25%" in row.inner_text()
            assert "on complete: not decided" in row.inner_text()
            page.screenshot(path=str(tmp_path / "admin-batches.png"), full_page=True)
            row.locator("a.dq-batch-link").click()
            page.wait_for_selector("#dq-batch")
            counts = page.locator("#dq-batch-counts").inner_text()
            assert "4 in all: 3 not ended, 0 succeeded, 0 dead, 1 cancelled" in counts
            assert page.locator("#dq-members tbody tr").count() == 4
            # A member not ended links to its job page, which names the batch.
            page.click(f'#dq-members tr[data-job-id="{members[1].id}"] a')
            assert b.id in page.locator("#dq-job-batch").inner_text()
            page.click("#dq-job-batch a")
            page.click("#dq-cancel-batch")
            page.wait_for_selector("#dq-confirm")
            assert "3 members have not ended." in page.locator("#dq-confirm").inner_text()
            assert all(real_store.fetch(Q, m.id) for m in members[1:])  # nothing yet
            page.click("#dq-confirm-yes")
            page.wait_for_selector("ul.messagelist")
            message = page.locator("ul.messagelist").inner_text()
            assert f"Batch {b.id} cancelled: 3 pending members cancelled." in message
            assert page.locator("#dq-batch-status").inner_text() == "cancelled"
            assert page.locator("#dq-cancel-batch").count() == 0
            assert not any(real_store.fetch(Q, m.id) for m in members)
            page.screenshot(path=str(tmp_path / "admin-batch.png"), full_page=True)
        finally:
            browser.close()
