"""The project's test set-up: Django configured from shop.settings on the database
USER_PROJECT_DATABASE_URL names, its tables and kiln's migrated once."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
os.environ.setdefault(
    "USER_PROJECT_DATABASE_URL", f"sqlite:///{tempfile.mkdtemp()}/shop.sqlite3"
)

import django
from django.core.management import call_command

django.setup()
call_command("migrate", verbosity=0)
call_command("kiln_migrate", verbosity=0)
