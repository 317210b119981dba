"""django-delayq's URLs outside the admin: the Prometheus metrics endpoint.

Opt-in: ``path("delayq/", include("django_delayq.urls"))`` in your URLconf serves the
metrics at ``/delayq/metrics`` (needs the ``prometheus`` extra; see monitoring/metrics.py
for who may read them).
"""

from django.urls import path

from django_delayq.monitoring.metrics import metrics_view

app_name = "django_delayq"

urlpatterns = [path("metrics", metrics_view, name="metrics")]
