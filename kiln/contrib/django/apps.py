"""The Django app config of kiln.contrib.django (label ``kiln``)."""

from __future__ import annotations

from django.apps import AppConfig


class KilnConfig(AppConfig):  # type: ignore[misc]  # django has no stubs
    name = "kiln.contrib.django"
    label = "kiln"
    verbose_name = "kiln jobs"
