"""The shop's Django settings; the database comes from USER_PROJECT_DATABASE_URL."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlsplit

SECRET_KEY = "user-project-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["shop.example.com"]
USE_TZ = True
ROOT_URLCONF = "shop.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "kiln.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _database(url: str) -> dict[str, object]:
    p = urlsplit(url)
    if p.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url[len("sqlite:///"):]}
    return {"ENGINE": "django.db.backends.postgresql", "NAME": p.path.lstrip("/"),
            "USER": p.username or "", "PASSWORD": p.password or "",
            "HOST": p.hostname or "", "PORT": p.port or "",
            "OPTIONS": dict(parse_qsl(p.query))}


DATABASES = {"default": _database(os.environ["USER_PROJECT_DATABASE_URL"])}
KILN = {"DATABASE": "default", "APP": "shop.jobs:jobs"}
