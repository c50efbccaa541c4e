"""Services the leader runs (rescue, prune, sweep, the timings rollup, recurring
jobs), and the admitter and the adopter, which every server runs.

Each is one module with one PeriodicService. ``leader_services`` and
``server_services`` build them for a server from its ServerContext.
"""

from __future__ import annotations

from kiln._server._context import ServerContext
from kiln._server._service import Service
from kiln._server.maintenance.admitter import Admitter
from kiln._server.maintenance.adopter import Adopter
from kiln._server.maintenance.pruner import Pruner
from kiln._server.maintenance.rescuer import Rescuer
from kiln._server.maintenance.roller import Roller
from kiln._server.maintenance.scheduler import Scheduler
from kiln._server.maintenance.sweeper import Sweeper


def leader_services(ctx: ServerContext) -> list[Service]:
    """Services that run only while this server holds the leader lease."""
    services: list[Service] = [Rescuer(ctx), Pruner(ctx), Sweeper(ctx), Roller(ctx)]
    if ctx.recurring:
        services.append(Scheduler(ctx))
    return services


def server_services(ctx: ServerContext) -> list[Service]:
    """Services every server runs (rate-limit admission, declarations applied to the
    jobs that wait)."""
    return [Admitter(ctx), Adopter(ctx)]
