import logging

from django.dispatch import receiver

from django_delayq.signals import job_dead, job_failed

logger = logging.getLogger("shop.jobs")


@receiver(job_failed)
def log_failed_job(sender, job, exception, will_retry, **kwargs):
    logger.warning(
        "job %s (%s) failed on attempt %d: %s; %s",
        job.id,
        job.task,
        job.attempts,
        exception,
        "will retry" if will_retry else "giving up",
    )


@receiver(job_dead)
def alert_dead_job(sender, job, error, **kwargs):
    logger.error("job %s (%s) is in the dead-letter set: %s", job.id, job.task, error)
