"""The alerting rules about the jobs table's size (alerts/kiln.rules.yml, group
kiln.tables): a table that keeps growing (pruning behind the inflow, or retention
longer than meant) and dead rows vacuum does not reclaim (PostgreSQL)."""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert
from kilnotel.mixin.config import Config

JOBS = 'table="kiln_jobs"'


def _num(value: float) -> str:
    """A threshold as PromQL reads it, whole numbers in full (268435456, not 2.68e+08)."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def tables(c: Config) -> list[Rule]:
    w = c.where
    def size(offset: str = "") -> str:
        # the offset on both sides of the installation's join, so each reads the past
        later = f" offset {offset}" if offset else ""
        own = c.m("kiln_table_bytes", JOBS) + later
        return f"max by ({c.by}) ({c.joined(own) + later if c.joins else own})"

    growth, floor = c.threshold("jobs_table_growth_6h"), c.threshold("jobs_table_min_bytes")
    grew = (f"{size()} > {_num(floor)}\nand\n{size()} > {_num(1 + growth)} * {size('6h')}\n"
            f"and\n{size()} > {size('1h')}\n")
    dead = f"max by ({c.by}) ({c.v('kiln_table_dead_rows', JOBS)})"
    rows = f"max by ({c.by}) ({c.v('kiln_table_rows_estimate', JOBS)})"
    ratio, dead_floor = c.threshold("dead_rows_ratio"), c.threshold("dead_rows_min")
    bloated = f"{dead} / {rows} > {_num(ratio)}\nand\n{dead} > {_num(dead_floor)}\n"
    return [
        alert(c, "KilnJobsTableGrowing", grew, "warning",
              f"The jobs table of {w} grew by more than {growth:.0%} in 6 hours and "
              f"still grows",
              f"""The jobs table (kiln_jobs) of {w} is {{{{ $value | humanize1024 }}}}B,
              more than {1 + growth:g} times its size 6 hours ago, and larger than an hour
              ago, for an hour. Finished jobs are not pruned as fast as they arrive
              (prune_interval, prune_batch), or their retention (prune_completed_after,
              prune_cancelled_after, prune_failed_after) keeps more than the table should
              hold: compare the completed, failed and cancelled counts with the inflow.""",
              "1h"),
        alert(c, "KilnJobsTableDeadRows", bloated, "warning",
              f"Dead rows in the jobs table of {w} are over {ratio:.0%} of its live rows",
              f"""For an hour the jobs table (kiln_jobs) of {w} has held dead rows (deleted
              or updated, not yet vacuumed) amounting to {{{{ $value | humanizePercentage }}}}
              of its live rows, over {_num(dead_floor)} of them. Autovacuum does not keep
              up: the table and its indexes bloat and claims scan dead rows. See
              pg_stat_user_tables for the last autovacuum and what holds it back (a long
              transaction, a replication slot).""",
              "1h"),
    ]
