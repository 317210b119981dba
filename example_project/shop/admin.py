from django.contrib import admin

from .models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "email",
        "item",
        "status",
        "created_at",
        "sync_attempts",
        "synced_at",
        "invoiced_at",
        "last_job_error",
    ]
    list_filter = ["status"]
