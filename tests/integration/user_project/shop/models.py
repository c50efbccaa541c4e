from __future__ import annotations

from django.db import models


class Customer(models.Model):
    email = models.EmailField(unique=True)
    welcomed = models.BooleanField(default=False)
