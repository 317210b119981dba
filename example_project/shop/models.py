from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        UNPAID = "unpaid", "Unpaid"
        PAID = "paid", "Paid"
        CANCELLED = "cancelled", "Cancelled"
        DELIVERED = "delivered", "Delivered"

    email = models.EmailField()
    item = models.CharField(max_length=100)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.UNPAID)
    created_at = models.DateTimeField(auto_now_add=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    reminder_sent_at = models.DateTimeField(null=True, blank=True)
    sync_attempts = models.PositiveIntegerField(default=0)
    synced_at = models.DateTimeField(null=True, blank=True)
    invoiced_at = models.DateTimeField(null=True, blank=True)
    # Written by the job_failed / job_dead receivers (shop/receivers.py), shown on the page.
    last_job_error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Order #{self.pk} ({self.status})"

    @property
    def autocancel_key(self) -> str:
        return f"order:{self.pk}:autocancel"

    @property
    def invoice_key(self) -> str:
        return f"order:{self.pk}:invoice"


class Campaign(models.Model):
    """A mailing to a set of orders' customers (shop.tasks.start_review_campaign): sent once
    every e-mail of it was sent, marked by the batch's on_complete callback."""

    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)
    emails_sent = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Campaign {self.name!r} ({'sent' if self.sent_at else 'sending'})"
