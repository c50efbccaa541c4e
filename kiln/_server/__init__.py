"""What only a running server uses: the Server that assembles the parts, and the parts.

``Server`` (``_server``) assembles, with ``_state`` its lifecycle; each part is one
module: a ``Pool`` per queue (``_pool``: its loop, with ``_claim_ahead``, how many to
claim, and ``_claim_session``, the claims and their states) hands jobs to the
``Executor`` (``_executor``, with ``_sync``, ``_threads`` and ``_deadlines`` for plain
def handlers and timeouts); every part holds the server's one ``Identity``
(``_identity``); the ``Completer`` (``_completer``) writes results; the ``Heartbeater``
(``_heartbeat``), ``Elector``, ``Releaser``, ``Reconciler``, ``Canceller`` and
``Governor`` are the background services (``_service`` is their lifecycle, ``_context``
what the leader's services share); the ``Notifier`` (``_notifier``) routes wake-ups in
(notifications) and out (pools, the Bus); the ``Stopper`` (``_stopper``) ends running
jobs on shutdown and on a fence; ``_signals`` holds the SIGTERM/SIGINT handlers and
``run_in_new_loop`` and the stop request; ``_declarations`` publishes its kinds and
declares its queue limits; ``_handle_store`` is what a handler's ``Job`` asks of the
store; ``_health`` and ``_stats`` are what a server reports, gathered from the parts;
``_config`` is its settings, ``_handle`` the ``Job`` a handler receives, ``_logs`` its
log context and formats, and ``maintenance/`` the services the leader (and every server,
for admission) runs. A part's constructor takes its collaborators by keyword, so that
the server (``Server._start``) and the tests (tests/support/parts.py) wire them one way.

The client, app and producer side (enqueue, admin, reads, the dashboard) never imports
this package; the assembly points (``kiln``, the App, the demo) and the CLI import only
this front, never a part (tests/test_architecture.py). Stores never import it either:
they are the layer below.
"""

from kiln._server._config import DEFAULTS, ServerConfig
from kiln._server._executor import Middleware
from kiln._server._handle import Job
from kiln._server._health import Health
from kiln._server._logs import (
    JobContextFilter,
    JsonFormatter,
    TextFormatter,
    TraceContextFilter,
    formatter,
    use_trace_source,
)
from kiln._server._server import Server
from kiln._server._signals import run_in_new_loop
from kiln._server._stats import QueueStats, ServerStats

__all__ = [
    "DEFAULTS",
    "Health",
    "Job",
    "JobContextFilter",
    "JsonFormatter",
    "Middleware",
    "QueueStats",
    "Server",
    "ServerConfig",
    "ServerStats",
    "TextFormatter",
    "TraceContextFilter",
    "formatter",
    "run_in_new_loop",
    "use_trace_source",
]
