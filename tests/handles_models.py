"""A Pydantic args model for tests/test_handles.py (imported only where Pydantic is)."""

from __future__ import annotations

import datetime

import pydantic


class Signup(pydantic.BaseModel):
    email: str
    age: int
    joined: datetime.date | None = None
