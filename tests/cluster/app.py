"""The cluster tests' kiln.App as a module, for ``kiln worker tests.cluster.app:app``.

KILN_DATABASE_URL names the database (``--database-url`` overrides it) and
KILN_CLUSTER_LOG the JSON-lines log the handlers append to.
"""

from __future__ import annotations

import os

from tests.cluster.worker import Log, build_app

app = build_app(
    os.environ.get("KILN_DATABASE_URL", "sqlite:///kiln-cluster.db"),
    Log(os.environ.get("KILN_CLUSTER_LOG", os.devnull), "cli"),
)
