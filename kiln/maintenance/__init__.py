"""Services the leader runs (rescue, prune, sweep, recurring jobs) and the admitter.

Each is one module with one PeriodicService. ``leader_services`` and
``server_services`` build them for a server from its ServerContext.
"""

from __future__ import annotations

from kiln._server._context import ServerContext
from kiln._server._service import Service


def leader_services(ctx: ServerContext) -> list[Service]:
    """Services that run only while this server holds the leader lease."""
    from kiln.maintenance.pruner import Pruner
    from kiln.maintenance.rescuer import Rescuer
    from kiln.maintenance.scheduler import Scheduler
    from kiln.maintenance.sweeper import Sweeper

    services: list[Service] = [Rescuer(ctx), Pruner(ctx), Sweeper(ctx)]
    if ctx.recurring:
        services.append(Scheduler(ctx))
    return services


def server_services(ctx: ServerContext) -> list[Service]:
    """Services every server runs (rate-limit admission)."""
    from kiln.maintenance.admitter import Admitter

    return [Admitter(ctx)]
