"""kiln.testing: assert on what your code enqueued, run the jobs, call one handler.

See docs/testing.md. The pytest plugin (kiln.testing.pytest_plugin, loaded through
its entry point) gives the ``kiln_app``, ``kiln_jobs`` and ``kiln_database_url``
fixtures. Nothing here is imported by kiln itself: production code never pays for it.
"""

from kiln.testing._assertions import assert_enqueued, enqueued_jobs, refute_enqueued
from kiln.testing._binding import bound
from kiln.testing._databases import migrated_url
from kiln.testing._drain import Drained, Run, adrain, drain
from kiln.testing._kiln_jobs import KilnJobs
from kiln.testing._perform import Performed, aperform, perform

__all__ = [
    "Drained",
    "KilnJobs",
    "Performed",
    "Run",
    "adrain",
    "aperform",
    "assert_enqueued",
    "bound",
    "drain",
    "enqueued_jobs",
    "migrated_url",
    "perform",
    "refute_enqueued",
]
