"""Issue 10, items 14 and 15: ``django.tasks`` results through DelayQBackend.

14. A Task whose worker is stopped by force, or SIGKILLed and recovered, waits in pending
   again: its result must say READY (Django's "ready to run"), not RUNNING.
15. Results and jobs stay findable when ``{prefix}:queues`` is lost (DEL, or a restart of
   a Redis without persistence): nothing may depend on a process-local cache of what
   Redis holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from django.test import override_settings

from django_delayq import get_job, schedule
from django_delayq.storage.store import Store
from django_delayq.worker.dispatch import Worker
from tests.reliability.edges import sets_holding
from tests.reliability.harness import ROOT, installed, wait_until, worker_env
from tests.testapp import tasks as t

try:
    import django.tasks  # noqa: F401
except ImportError:  # Django 5.2 needs the backport: pip install 'django-delayq[tasks]'
    pytest.importorskip("django_tasks", reason="Django 5.2 without the django-tasks backport")

from tests.reliability.django_tasks import linger
from tests.testapp import django_tasks as dt

try:
    from django.tasks import default_task_backend
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import default_task_backend
    from django_tasks.exceptions import TaskResultDoesNotExist

pytestmark = pytest.mark.reliability

Q = "default"
BACKEND = "django_delayq.backends.DelayQBackend"


def tasks_setting(queues: list[str], max_retries: int = 0) -> dict:
    return {
        "default": {"BACKEND": BACKEND, "QUEUES": queues, "OPTIONS": {"MAX_RETRIES": max_retries}}
    }


def status_of(result_id: str) -> str:
    try:
        return str(default_task_backend.get_result(result_id).status.value)
    except TaskResultDoesNotExist:
        return "does not exist"


def lookup(env: dict[str, str], kind: str, ident: str) -> dict:
    """What a new process finds (tests/reliability/lookup.py)."""
    environ = {
        **{k: v for k, v in os.environ.items() if k != "DELAYQ_TEST_DB"},
        "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability.lookup", kind, ident],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- 14. READY again after a forced stop or a recovery ----------------------------------------


@pytest.mark.parametrize("how", ["second SIGTERM", "SIGKILL, then lease recovery"])
def test_task_handed_back_to_pending_reads_ready(
    servers, runs_server, runs_client, workers, prefix, tag, how, report
):
    """release.lua (forced stop) and recover.lua (lease expired) put the job back in
    pending without the backend hearing of it: get_result() said RUNNING for a job that
    waits to run again."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(
        data.url,
        runs_server.url,
        prefix,
        VISIBILITY_TIMEOUT=1,
        TASKS_QUEUES=json.dumps([Q]),
        TASKS_MAX_RETRIES=2,
    )
    with installed(store), override_settings(TASKS=tasks_setting([Q], max_retries=2)):
        result = linger.enqueue(tag, 60)
        proc = workers.start(env, "-v", "1")
        wait_until(lambda: runs_client.llen(f"runs:{tag}:started"), 30, "the task to start")
        assert status_of(result.id) == "RUNNING"
        if how == "second SIGTERM":
            proc.signal(signal.SIGTERM)
            wait_until(lambda: "finishing running jobs" in proc.output(), 30, "the first SIGTERM")
            proc.signal(signal.SIGTERM)
            code = proc.wait(30)
        else:
            proc.signal(signal.SIGKILL)
            code = proc.wait(30)
            # Any worker's maintenance does this; here one built in this process, so that
            # no worker runs the job again before the test looks.
            recovering = Worker([Q])
            wait_until(
                lambda: recovering.parts.recovery.run_pass(),
                30,
                "the expired lease to be recovered",
            )
        holding = sets_holding(store.client, prefix, result.id)
        status = status_of(result.id)
    report(
        scenario=f"22. django.tasks result after {how}",
        jobs=1,
        kills=1 if how.startswith("SIGKILL") else 0,
        exit_code=code,
        held_by=holding,
        status=status,
    )
    assert holding == ["pending"], (holding, proc.output()[-2000:])
    assert status == "READY", (
        f"after {how} the job waits in pending, but get_result() says {status}"
    )


# -- 15. a lost queues set -----------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["DEL", "restart without persistence"])
def test_results_and_jobs_survive_a_lost_queues_set(servers, runs_server, prefix, loss, report):
    """With ``QUEUES: []`` get_result() looks in the queues listed in ``{prefix}:queues``,
    and each process added a queue to it once (then cached that it had): after the set was
    lost, later enqueues from the same process could not be found from any process."""
    data = servers.redis("data")
    store = Store(data.client(), prefix)
    env = worker_env(data.url, runs_server.url, prefix, TASKS_QUEUES="[]")
    with installed(store), override_settings(TASKS=tasks_setting([])):
        dt.add.enqueue(1, 2)
        schedule(t.remember, 1, queue="elsewhere", delay=3600)  # not in DELAYQ settings
        if loss == "DEL":
            store.client.delete(f"{prefix}:queues")
        else:
            data.stop(signal.SIGTERM)
            data.start()
        result = dt.add.enqueue(3, 4)
        job = schedule(t.remember, 2, queue="elsewhere", delay=3600)
        here = {"result": status_of(result.id), "job": getattr(get_job(job.id), "status", None)}
    with installed(Store(data.client(), prefix)), override_settings(TASKS=tasks_setting([])):
        fresh = {"result": status_of(result.id), "job": getattr(get_job(job.id), "status", None)}
    elsewhere = {"result": lookup(env, "result", result.id), "job": lookup(env, "job", job.id)}
    report(
        scenario=f"23. results after the queues set is lost ({loss})",
        jobs=2,
        lost=sum(1 for v in elsewhere.values() if not v["found"]),
        here=here,
        fresh_store=fresh,
        new_process=elsewhere,
    )
    wanted = {"result": "READY", "job": "pending"}
    assert here == wanted, f"in the process that enqueued: {here}"
    assert fresh == wanted, f"through a new Store (no process caches): {fresh}"
    assert elsewhere["result"] == {"found": True, "status": "READY", "queue": Q}, elsewhere
    assert elsewhere["job"] == {"found": True, "status": "pending", "queue": "elsewhere"}, elsewhere
