"""The shop's tests: signing up enqueues the welcome email with the customer, or
neither; the email marks the customer welcomed; the worker sends it; the dashboard is
for staff.

pytest.ini names the shop's App (``kiln_app = shop.jobs:jobs``): a Django App, so the
``kiln_jobs`` fixture looks at Django's own database, where ``transaction.atomic()``
puts the jobs. Other tests' jobs live there too: each test filters on its own email."""

from __future__ import annotations

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
from shop.models import Customer

from kiln.testing import KilnJobs


def new_email(domain: str = "example.com") -> str:
    return f"{uuid.uuid4().hex[:10]}@{domain}"


@pytest.fixture
def browser() -> Client:
    return Client(HTTP_HOST="shop.example.com", raise_request_exception=False)


def test_signup_enqueues_the_welcome_email(browser: Client, kiln_jobs: KilnJobs) -> None:
    email = new_email()
    response = browser.post("/signup/", {"email": email})
    assert response.status_code == 201
    [job] = kiln_jobs.assert_enqueued("email.welcome", args={"email": email}, queue="mail",
                                      count=1)
    assert job.id == response.json()["job"] and job.max_attempts == 5


def test_a_failed_signup_enqueues_nothing(browser: Client, kiln_jobs: KilnJobs) -> None:
    email = new_email("blocked.example")
    assert browser.post("/signup/", {"email": email}).status_code == 500
    assert not Customer.objects.filter(email=email).exists()
    kiln_jobs.refute_enqueued("email.welcome", args={"email": email})


def test_the_welcome_email_marks_the_customer(browser: Client, kiln_jobs: KilnJobs) -> None:
    email = new_email()
    assert browser.post("/signup/", {"email": email}).status_code == 201
    drained = kiln_jobs.drain(kinds="email.welcome", raise_errors=True)
    assert drained.completed >= 1 and drained.failed == 0
    assert Customer.objects.get(email=email).welcomed
    kiln_jobs.refute_enqueued("email.welcome", args={"email": email})
    kiln_jobs.assert_enqueued("email.welcome", args={"email": email}, state="completed")


def test_the_handler_on_its_own(kiln_jobs: KilnJobs) -> None:
    email = new_email()
    Customer.objects.create(email=email)
    done = kiln_jobs.perform("email.welcome", {"email": email})
    assert done.outcome == "completed"
    assert Customer.objects.get(email=email).welcomed


def test_the_worker_sends_the_welcome_email(browser: Client, kiln_jobs: KilnJobs) -> None:
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
    kiln_jobs.assert_enqueued("email.welcome", args={"email": email}, state="completed")


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
