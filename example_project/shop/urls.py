from django.urls import path

from . import views

urlpatterns = [
    path("", views.place_order, name="place_order"),
    path("orders/<int:pk>/", views.order_detail, name="order"),
    path("orders/<int:pk>/pay/", views.pay_order, name="pay_order"),
    path("orders/<int:pk>/deliver/", views.deliver_order, name="deliver_order"),
]
