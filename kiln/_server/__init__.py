"""What only a running server uses: the Server that assembles the parts, and the parts.

``Server`` (``_server``) assembles; each part is one module: a ``Pool`` per queue
(``_pool``: its loop, with ``_claim_ahead``, how many to claim, and ``_claim_session``,
the claims and their states) hands jobs to the ``Executor`` (``_executor``, with
``_sync``, ``_threads`` and ``_deadlines`` for plain def handlers and timeouts); every
part holds the server's one ``Identity`` (``_identity``); the ``Completer``
(``_completer``) writes results; the ``Heartbeater`` (``_heartbeat``), ``Elector``,
``Releaser``, ``Reconciler``, ``Canceller`` and ``Governor`` are the background services
(``_service`` is their lifecycle, ``_context`` what the leader's services share);
``_health`` and ``_stats`` are what a server reports.

The client, app and producer side (enqueue, admin, reads, the dashboard) never imports
this package; the assembly points (``kiln``, the App, the demo) and the CLI import only
this front, never a part (tests/test_architecture.py). Stores never import it either:
they are the layer below.
"""

from kiln._server._executor import Middleware
from kiln._server._health import Health
from kiln._server._server import Server, run_in_new_loop
from kiln._server._stats import QueueStats, ServerStats

__all__ = ["Health", "Middleware", "QueueStats", "Server", "ServerStats", "run_in_new_loop"]
