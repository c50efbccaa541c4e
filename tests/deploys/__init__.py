"""The deploy-sequence and contention tiers (issue 39): the paths between two versions
of an app, and between kiln and a transaction it does not own, made ordinary.

- ``-m deploy_sequence`` (test_deploys.py): version A runs with jobs in flight, B
  rolls in beside it, A stops, B runs alone, where B changes one declaration; one
  Case per change in cases.py, on SQLite, PostgreSQL and MariaDB.
- ``-m contention`` (test_contention.py): the user's own transaction holds a lock
  kiln's writes need past the database's lock timeout; one Hold per lock in holds.py,
  on PostgreSQL and MariaDB.

Both end with the chaos suite's ledger (tests/chaos/ledger.py) plus their own checks
(checks.py, contention.py). A new feature whose declaration can change between
deploys adds one Case; a new write that can wait on a user's lock adds one Hold. A
case that fails on main is a strict xfail naming its issue item.
"""
