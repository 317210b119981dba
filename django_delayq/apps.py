from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DelayQConfig(AppConfig):
    name = "django_delayq"
    verbose_name = _("Delayed jobs")
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        import sys

        from django_delayq import checks  # noqa: F401  (register checks and receivers)
        from django_delayq.monitoring import checks as monitoring_checks  # noqa: F401
        from django_delayq.recurring import checks as recurring_checks  # noqa: F401
        from django_delayq.recurring.hooks import connect as connect_recurring
        from django_delayq.recurring.names import connect as connect_names
        from django_delayq.scheduling.registry import autodiscover

        connect_recurring()  # occurrences of recurring schedules (recurring/hooks.py)
        connect_names()  # Job.schedule (recurring/names.py)
        if sys.modules.get("sentry_sdk") is not None:  # Sentry, as settings.py set it up
            from django_delayq.monitoring.sentry import connect as connect_sentry

            connect_sentry()

        # Every process knows every task, as workers do: schedule() refuses unknown names.
        autodiscover()
