"""The shop's jobs: a kiln App on Django's own database."""

from __future__ import annotations

import kiln
import kiln.contrib.django
from shop.models import Customer

jobs = kiln.contrib.django.App()


@jobs.job("email.welcome", queue="mail", max_attempts=5)
def send_welcome(job: kiln.Job) -> None:
    Customer.objects.filter(email=job.args["email"]).update(welcomed=True)
