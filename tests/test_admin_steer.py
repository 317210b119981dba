"""The admin's lists show issue 36's options: a pending job's expiry under its due time, a
finished job's "expired" outcome; user text beside them escaped. The test client, over
fakeredis and the real Redis."""

from __future__ import annotations

import pytest

from tests.test_admin import text, url
from tests.test_expiry import burst
from tests.testapp import tasks as t

pytestmark = pytest.mark.django_db
Q = "default"


def row_of(page: str, job_id: str) -> str:
    start = page.index(f'data-job-id="{job_id}"')
    return page[start : page.index("</tr>", start)]


def test_the_pending_list_shows_the_expiry_under_the_due_time(store, admin_client):
    expiring = t.remember.schedule("<b>x</b>", delay=600, expires=3600, key="<i>k</i>")
    plain = t.remember.schedule("plain", delay=600)
    page = text(admin_client.get(url("pending", queue=Q)))
    row = row_of(page, expiring.id)
    when = expiring.expires_at.strftime("%Y-%m-%d %H:%M:%S")
    assert 'class="dq-quiet dq-expires"' in row and f"expires {when} UTC" in row
    assert "&lt;i&gt;k&lt;/i&gt;" in row and "<i>k</i>" not in row  # the key, escaped
    assert "<b>x</b>" not in page
    assert "dq-expires" not in row_of(page, plain.id)


def test_the_finished_list_shows_the_expired_outcome(store, admin_client):
    late = t.remember.schedule("late", expires=60)
    t.remember.schedule("ok")
    burst(offset=120)
    page = text(admin_client.get(url("finished", queue=Q)))
    row = row_of(page, late.id)
    assert 'class="dq-outcome dq-outcome-expired"' in row and "expired, not run</td>" in row
