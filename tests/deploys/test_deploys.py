"""The deploy-sequence tier: each declaration change of tests/deploys/cases.py, on
SQLite, PostgreSQL and MariaDB.

Version A runs with jobs in flight, B rolls in beside it, A stops and B runs alone
(tests/deploys/sequence.py); the ledger and the case's own expectations then judge the
end (tests/deploys/checks.py). A case that fails on today's main is a strict xfail
naming its issue item; it starts to fail the run the day its fix makes it pass.
"""

from __future__ import annotations

import pytest

from tests.deploys.cases import CASES
from tests.deploys.checks import describe, violations
from tests.deploys.plan import Case
from tests.deploys.sequence import play

pytestmark = pytest.mark.deploy_sequence


@pytest.mark.parametrize("case", CASES, ids=[c.name.replace(" ", "-") for c in CASES])
async def test_a_deploy_loses_strands_and_doubles_nothing(
    case: Case, store_url: str, backend: str, request: pytest.FixtureRequest
) -> None:
    reason = case.xfail_reason(backend)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    run = await play(case, store_url)
    found = violations(case, run)
    assert not found, "\n".join([*found, describe(run)])
