"""A claimed job whose concurrency key is not the one its kind's declaration gives.

The adopter rekeys the jobs that wait when a kind's limit is added or its key changes
(kiln._server.maintenance.adopter), once, as the first server of the new declaration
starts. A job that was running on an older server then is handed back later with the
key it was enqueued under, and a claim under that key does not count it against the
new key's limit: it would run beside its tenant's next job. So a pool checks each job it
claims from a limited queue: when its kind's declaration in use is this server's
(``ServerContext.in_use``, kept by the adopter: never a newer deploy's, which would undo
this one's keys) and that declaration gives another key, the job is rekeyed while this
server still holds it and handed back without using its attempt; it runs at its next
claim, under the limit of its right key. Owns the check only.
"""

from __future__ import annotations

import logging

from kiln._model._concurrency import kind_group
from kiln._model._job import JobRow
from kiln._server._context import ServerContext

log = logging.getLogger("kiln.pool")


def misfiled_key(ctx: ServerContext, row: JobRow) -> tuple[str, int] | None:
    """(the key, its max) this server's declaration gives ``row`` when it differs from
    the key ``row`` was claimed under; None when it does not, or is not this server's
    to say."""
    kind = ctx.kinds.get(row.kind)
    limit = kind.concurrency if kind is not None else None
    if limit is None or row.kind not in ctx.in_use:
        return None
    try:
        key = limit.key_of(kind_group(row.kind), row.args)
    except Exception:  # a key function that fails on these args: it runs as it is
        return None
    if key == row.conc_key:
        return None
    return key, limit.max
