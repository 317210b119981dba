"""Template filters of the admin's pages (``{% load delayq_admin %}``)."""

from __future__ import annotations

from django import template

from django_delayq.jobs.state import shown_instance

register = template.Library()

register.filter("shown_instance", shown_instance)
