from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from django_delayq import cancel

from .models import Order
from .tasks import (
    cancel_unpaid_order,
    prepare_invoice,
    send_delivery_reminder,
    sync_to_warehouse,
)


class OrderForm(forms.ModelForm):
    class Meta:
        model = Order
        fields = ["email", "item"]


def place_order(request):
    form = OrderForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            order = form.save()
            # The job's row is written in this transaction (the outbox): it commits with the
            # order or not at all, and reaches Redis right after the commit; if Redis is down
            # then, the worker relays it within seconds. No job for an order that never
            # existed, no order without its auto-cancel.
            cancel_unpaid_order.schedule(
                order.pk,
                delay=timedelta(seconds=settings.ORDER_AUTOCANCEL_SECONDS),
                key=order.autocancel_key,
                on_commit=True,
            )
            sync_to_warehouse.schedule(order.pk, on_commit=True)
        messages.success(
            request,
            f"Order #{order.pk} placed: pay within {settings.ORDER_AUTOCANCEL_SECONDS:g} s "
            "or it is cancelled.",
        )
        return redirect("order", order.pk)
    orders = Order.objects.all()[:20]
    return render(request, "shop/place_order.html", {"form": form, "orders": orders})


def order_detail(request, pk):
    order = get_object_or_404(Order, pk=pk)
    return render(request, "shop/order.html", {"order": order})


@require_POST
def pay_order(request, pk):
    with transaction.atomic():
        order = get_object_or_404(Order.objects.select_for_update(), pk=pk)
        if order.status != Order.Status.UNPAID:
            messages.error(request, f"Order #{order.pk} is {order.status}: it cannot be paid.")
            return redirect("order", order.pk)
        order.status = Order.Status.PAID
        order.paid_at = timezone.now()
        order.save(update_fields=["status", "paid_at"])
        prepare_invoice.schedule(order.pk, key=order.invoice_key, on_commit=True)
    # The task is idempotent anyway; cancelling just keeps the queue tidy.
    cancelled = cancel(key=order.autocancel_key)
    messages.success(
        request,
        f"Order #{order.pk} paid. Auto-cancel job "
        f"{'cancelled' if cancelled else 'was already gone'}. Its invoice takes "
        f"{settings.INVOICE_SECONDS:g} s to prepare: the admin lists the job under In progress "
        "meanwhile.",
    )
    return redirect("order", order.pk)


@require_POST
def deliver_order(request, pk):
    order = get_object_or_404(Order, pk=pk, status=Order.Status.PAID)
    order.status = Order.Status.DELIVERED
    order.delivered_at = timezone.now()
    order.save(update_fields=["status", "delivered_at"])
    send_delivery_reminder.schedule(
        order.pk,
        delay=timedelta(days=settings.DELIVERY_REMINDER_DAYS),
        key=f"order:{order.pk}:reminder",
    )
    messages.success(request, f"Order #{order.pk} delivered; a reminder is due in 7 days.")
    return redirect("order", order.pk)
