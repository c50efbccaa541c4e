"""kiln.events: what kiln reports as it works, and the hub that delivers it.

``server = app.server(events=hub)`` with ``hub = kiln.events.EventHub()``, then
``hub.subscribe(fn, types=[kiln.events.JobFinished])``; kilnotel turns these into
metrics and spans. (For one more release they are reachable as ``kiln.JobFinished``
and so on too, with a DeprecationWarning naming this module.)
"""

from kiln._events import (
    ClaimQueried,
    CompleterCrashed,
    Event,
    EventHub,
    Fenced,
    HandlerStuck,
    Heartbeat,
    JobCancelled,
    JobClaimed,
    JobFinished,
    JobReconciled,
    JobRescued,
    JobsAdmitted,
    JobsEnqueued,
    JobsReleased,
    JobStarted,
    LeaderChanged,
    MaintenanceRan,
    NotifierChanged,
    ResultDropped,
    ResultPoisoned,
    ResultsUnapplied,
    ServerStopping,
    StoreFailed,
)

__all__ = [
    "ClaimQueried",
    "CompleterCrashed",
    "Event",
    "EventHub",
    "Fenced",
    "HandlerStuck",
    "Heartbeat",
    "JobCancelled",
    "JobClaimed",
    "JobFinished",
    "JobReconciled",
    "JobRescued",
    "JobStarted",
    "JobsAdmitted",
    "JobsEnqueued",
    "JobsReleased",
    "LeaderChanged",
    "MaintenanceRan",
    "NotifierChanged",
    "ResultDropped",
    "ResultPoisoned",
    "ResultsUnapplied",
    "ServerStopping",
    "StoreFailed",
]

EventHub.__module__ = __name__  # help(), tracebacks and pickles say kiln.events.EventHub
