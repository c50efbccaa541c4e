"""The shop's tests: signing up enqueues the welcome email with the customer, or
neither; the worker sends it; the dashboard is for staff."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client
from shop.jobs import jobs
from shop.models import Customer

import kiln


def enqueued(kind: str, **args: object) -> list[kiln.JobRow]:
    async def listing() -> list[kiln.JobRow]:
        try:
            found = await jobs.client().list(kiln.JobFilter(kind=kind), limit=1000)
        finally:
            await jobs.aclose()
        return [j for j in found if all(j.args.get(k) == v for k, v in args.items())]

    return asyncio.run(listing())


def new_email(domain: str = "example.com") -> str:
    return f"{uuid.uuid4().hex[:10]}@{domain}"


@pytest.fixture
def browser() -> Client:
    return Client(HTTP_HOST="shop.example.com", raise_request_exception=False)


def test_signup_enqueues_the_welcome_email(browser: Client) -> None:
    email = new_email()
    response = browser.post("/signup/", {"email": email})
    assert response.status_code == 201
    [job] = enqueued("email.welcome", email=email)
    assert job.queue == "mail" and job.id == response.json()["job"]


def test_a_failed_signup_enqueues_nothing(browser: Client) -> None:
    email = new_email("blocked.example")
    assert browser.post("/signup/", {"email": email}).status_code == 500
    assert not Customer.objects.filter(email=email).exists()
    assert enqueued("email.welcome", email=email) == []


def test_the_worker_sends_the_welcome_email(browser: Client) -> None:
    email = new_email()
    assert browser.post("/signup/", {"email": email}).status_code == 201
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "kiln_worker", "--queue", "mail=2",
         "--heartbeat-interval", "0.2"],
        env={**os.environ, "KILN_LOG_LEVEL": "warning"},
    )
    try:
        deadline = time.monotonic() + 20
        while not Customer.objects.get(email=email).welcomed:
            assert time.monotonic() < deadline, "the welcome email was never sent"
            assert worker.poll() is None, "the worker exited"
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0
    [job] = enqueued("email.welcome", email=email)
    assert job.state == kiln.JobState.COMPLETED


def test_the_dashboard_is_for_staff(browser: Client) -> None:
    name = uuid.uuid4().hex[:8]
    assert browser.post("/signup/", {"email": new_email()}).status_code == 201
    assert browser.get("/admin/kiln/").status_code == 302  # to the login page
    browser.force_login(User.objects.create_user(f"{name}-clerk"))
    assert browser.get("/admin/kiln/").status_code == 403
    browser.force_login(User.objects.create_user(f"{name}-ops", is_staff=True))
    page = browser.get("/admin/kiln/jobs?kind=email.welcome")
    assert page.status_code == 200
    assert re.search(r'href="/admin/kiln/jobs/\d+"', page.content.decode())
