"""``path("admin/kiln/", include("kiln.contrib.django.urls"))`` serves the dashboard
there, to the users Django's auth lets in (see views)."""

from __future__ import annotations

from django.urls import re_path

from kiln.contrib.django import views

app_name = "kiln"
urlpatterns = [re_path(r"^(?P<path>.*)$", views.dashboard, name="dashboard")]
