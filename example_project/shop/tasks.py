"""The shop's delayed jobs. Every task is idempotent: it may run more than once
(at-least-once delivery), so it re-reads the order and does nothing twice."""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from django_delayq import batch, current_job, task

from .models import Campaign, Order

logger = logging.getLogger("shop.tasks")


@task(max_retries=5)
def cancel_unpaid_order(order_id: int) -> str:
    """Cancel the order if it is still unpaid (paid or cancelled orders are left alone)."""
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None or order.status != Order.Status.UNPAID:
            logger.info(
                "order %s is %s: nothing to cancel", order_id, order.status if order else "gone"
            )
            return "kept"
        order.status = Order.Status.CANCELLED
        order.cancelled_at = timezone.now()
        order.save(update_fields=["status", "cancelled_at"])
    logger.info(
        "order %s cancelled: unpaid after %s s", order_id, settings.ORDER_AUTOCANCEL_SECONDS
    )
    return "cancelled"


@task(max_retries=3)
def sweep_unpaid_orders(older_than_hours: float = 24) -> int:
    """The nightly sweep (a recurring schedule, DELAYQ["SCHEDULES"] in the settings): cancel
    every order still unpaid after ``older_than_hours``, the safety net under the per-order
    auto-cancel jobs (an order created while Redis was unreachable has none). Idempotent:
    a second run finds nothing left to cancel. Returns how many it cancelled."""
    cutoff = timezone.now() - timedelta(hours=older_than_hours)
    cancelled = 0
    with transaction.atomic():
        stale = Order.objects.select_for_update().filter(
            status=Order.Status.UNPAID, created_at__lt=cutoff
        )
        for order in stale:
            order.status = Order.Status.CANCELLED
            order.cancelled_at = timezone.now()
            order.save(update_fields=["status", "cancelled_at"])
            cancelled += 1
    logger.info(
        "nightly sweep: %s unpaid order(s) older than %s h cancelled", cancelled, older_than_hours
    )
    return cancelled


@task(queue="emails", max_retries=3)
def send_delivery_reminder(order_id: int) -> None:
    """Ask for a review some days after delivery, once."""
    order = Order.objects.filter(pk=order_id, status=Order.Status.DELIVERED).first()
    if order is None or order.reminder_sent_at is not None:
        return
    send_mail(
        f"How is your {order.item}?",
        f"Your order #{order.pk} was delivered {order.delivered_at:%Y-%m-%d}. Tell us about it!",
        settings.DEFAULT_FROM_EMAIL,
        [order.email],
    )
    Order.objects.filter(pk=order_id).update(reminder_sent_at=timezone.now())


class WarehouseUnavailable(Exception):
    pass


@task(max_retries=4, retry_backoff=2)
def sync_to_warehouse(order_id: int, failures: int = 2) -> None:
    """A flaky integration: fails `failures` times, then succeeds (retries show in the admin)."""
    order = Order.objects.get(pk=order_id)
    if order.synced_at is not None:
        return
    order.sync_attempts += 1
    order.save(update_fields=["sync_attempts"])
    if order.sync_attempts <= failures:
        raise WarehouseUnavailable(
            f"warehouse API timed out for order #{order_id} (attempt {order.sync_attempts})"
        )
    order.synced_at = timezone.now()
    order.save(update_fields=["synced_at"])


@task(max_retries=3)
def prepare_invoice(order_id: int) -> None:
    """Render the invoice of a paid order, once. Slow on purpose (INVOICE_SECONDS, 8 by
    default): while it runs it is listed under In progress in the admin."""
    order = Order.objects.filter(pk=order_id, paid_at__isnull=False).first()
    if order is None or order.invoiced_at is not None:
        return
    time.sleep(settings.INVOICE_SECONDS)  # stands in for rendering and storing a PDF
    Order.objects.filter(pk=order_id, invoiced_at=None).update(invoiced_at=timezone.now())


# -- a campaign: a batch of e-mails, marked sent once every one of them was sent -----------


@task(queue="emails", max_retries=3)
def send_campaign_email(order_id: int, campaign_id: int) -> None:
    """One e-mail of a campaign (a member of its batch)."""
    order = Order.objects.get(pk=order_id)
    send_mail(
        f"How is your {order.item}?",
        f"Tell us about your order #{order.pk}!",
        settings.DEFAULT_FROM_EMAIL,
        [order.email],
    )
    Campaign.objects.filter(pk=campaign_id).update(emails_sent=F("emails_sent") + 1)


@task
def mark_campaign_sent(*, campaign_id: int) -> None:
    """The batch's on_complete callback: runs once, after the last e-mail ended (sent, or
    dead after its retries)."""
    Campaign.objects.filter(pk=campaign_id, sent_at=None).update(sent_at=timezone.now())
    logger.info("campaign %s sent (batch %s)", campaign_id, current_job().batch_id)


def start_review_campaign(name: str, order_ids: list[int]) -> Campaign:
    """Create a campaign and schedule its e-mails as one batch."""
    with transaction.atomic():
        campaign = Campaign.objects.create(name=name)
        done = mark_campaign_sent.call(campaign_id=campaign.pk)
        with batch(on_complete=done):
            for order_id in order_ids:
                send_campaign_email.schedule(order_id, campaign.pk, on_commit=True)
    return campaign


# -- a payment: charge the card, then check the payment 30 minutes later -------------------


class PaymentNotConfirmed(Exception):
    pass


@task(max_retries=3)
def charge_card(order_id: int) -> None:
    """Ask the payment provider to charge the order (a stand-in: the provider confirms
    later, which sets paid_at)."""
    logger.info("order %s: card charged, waiting for the provider's confirmation", order_id)


@task(max_retries=0)
def check_payment(order_id: int) -> None:
    """Fails while the provider has not confirmed the payment: the chain's on_death runs."""
    order = Order.objects.get(pk=order_id)
    if order.paid_at is None:
        raise PaymentNotConfirmed(f"order #{order_id}: no payment 30 minutes after the charge")


def charge_and_check(order: Order) -> None:
    """Charge now; check 30 minutes after the charge succeeded; cancel if it did not."""
    chain = charge_card.call(order.pk).then(
        check_payment.call(order.pk), delay=timedelta(minutes=30)
    )
    chain.on_death(cancel_unpaid_order.call(order.pk)).schedule(on_commit=True)
