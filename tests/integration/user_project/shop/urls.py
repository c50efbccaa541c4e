from __future__ import annotations

from django.urls import include, path

from shop import views

urlpatterns = [
    path("signup/", views.signup),
    path("admin/kiln/", include("kiln.contrib.django.urls")),
]
