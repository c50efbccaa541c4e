"""Event-loop plumbing that any layer may use: a private loop for sync callers, and
stopping background tasks. Imports nothing of kiln."""
