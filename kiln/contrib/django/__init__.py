"""kiln as a Django app: add ``"kiln.contrib.django"`` to ``INSTALLED_APPS``.

Settings (all optional)::

    KILN = {
        "DATABASE": "default",        # the DATABASES alias kiln's tables live in
        "APP": "shop.jobs:app",       # your kiln.App, for kiln_worker and the dashboard
        "DASHBOARD_PERMISSION": None, # None: staff users; else a permission they need
        "DASHBOARD_READ_ONLY": False,
    }

``kiln.contrib.django.App()`` is a ``kiln.App`` on that database (Django's connection
settings, no second URL to keep in step). Its ``enqueue`` joins Django's connection
inside ``transaction.atomic()``, so the job exists if and only if the block commits;
outside one it inserts on kiln's own connection, as Django's autocommit would.
``manage.py kiln_migrate`` and ``manage.py kiln_worker`` are ``kiln migrate`` and
``kiln worker`` on that app; ``kiln.contrib.django.urls`` serves the dashboard to the
users Django's auth lets in. ``kiln.contrib.django.tasks.KilnBackend`` is a backend of
Django's task framework (``TASKS``; ``django.tasks`` or the ``django-tasks`` backport).
"""

from __future__ import annotations

from kiln.contrib.django._app import App
from kiln.contrib.django._settings import database_url, kiln_settings

__all__ = ["App", "database_url", "kiln_settings"]
