"""What the shop does when one of its jobs fails: note it on the order, for the order
page and the admin. The worker already logs every failure (django_delayq.worker), so
these receivers log nothing: one failure, one log line."""

from django.dispatch import receiver

from django_delayq.signals import job_dead, job_failed

from .models import Order


def note_on_order(job, text: str) -> None:
    # Every shop task takes the order id first; other tasks are none of the shop's business.
    if job.task.startswith("shop.tasks.") and job.args and isinstance(job.args[0], int):
        name = job.task.rsplit(".", 1)[-1]
        Order.objects.filter(pk=job.args[0]).update(last_job_error=f"{name}: {text}"[:300])


@receiver(job_failed)
def note_failed_job(sender, job, exception, will_retry, **kwargs):
    retry = "will retry" if will_retry else "no retries left"
    note_on_order(job, f"attempt {job.attempts} failed ({exception}); {retry}")


@receiver(job_dead)
def note_dead_job(sender, job, error, **kwargs):
    note_on_order(job, f"in the dead-letter set: {error}")
