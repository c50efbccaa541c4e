"""The URLconf of tests.frameworks.django_site: the dashboard under /ops/kiln/."""

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("ops/kiln/", include("kiln.contrib.django.urls"))]
