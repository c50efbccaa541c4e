"""The deploy-sequence and contention tiers (issue 39): the paths between two versions
of an app, and between kiln and a transaction it does not own, made ordinary.

- ``-m deploy_sequence`` (test_deploys.py): version A runs with jobs in flight, B
  rolls in beside it, A stops, B runs alone, where B changes one declaration; one
  Case per change in cases.py, on SQLite, PostgreSQL and MariaDB.
- ``-m contention`` (test_contention.py): the user's own transaction holds a lock
  kiln's writes need past the database's lock timeout; one Hold per lock in holds.py,
  on PostgreSQL and MariaDB.
- Beside them, what a kiln older than a feature does in a fleet with a newer one,
  where a Case cannot say it (on all three stores): a job failed by ``kiln.Fail`` read,
  requeued and rescued by an older kiln (test_fail_older.py), and kiln_servers'
  ``connections`` unknown for an older kiln's server in every view
  (test_connections_older.py). A Version with ``knows_fail=False`` is a kiln older
  than kiln.Fail in a Case.

Both end with the chaos suite's ledger (tests/chaos/ledger.py) plus their own checks
(checks.py, contention.py). A new feature whose declaration can change between
deploys adds one Case; a new write that can wait on a user's lock adds one Hold. A
case that fails on main is a strict xfail naming its issue item.
"""
