from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DelayQConfig(AppConfig):
    name = "django_delayq"
    verbose_name = _("Delayed jobs")
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks, connection  # noqa: F401  (register checks and receivers)
        from .registry import autodiscover

        # Every process knows every task, as workers do: schedule() refuses unknown names.
        autodiscover()
