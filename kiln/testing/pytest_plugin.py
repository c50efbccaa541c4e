"""kiln's pytest plugin, under the name ``-p kiln.testing.pytest_plugin`` and
``pytest_plugins = ["kiln.testing.pytest_plugin"]`` load (the entry point has the same
name, so loading it both ways registers it once). The code is in ``kiln_pytest``, which
the entry point loads without importing kiln; every hook and fixture is here too
(tests/testing/test_plugin.py checks)."""

from kiln_pytest import (
    _kiln_databases,
    kiln_app,
    kiln_database_url,
    kiln_jobs,
    load_target,
    pytest_addoption,
    pytest_runtest_call,
)

__all__ = [
    "_kiln_databases",
    "kiln_app",
    "kiln_database_url",
    "kiln_jobs",
    "load_target",
    "pytest_addoption",
    "pytest_runtest_call",
]
