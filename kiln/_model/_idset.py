"""A short fingerprint of a set of job ids, the same whether Python or a store's SQL
computes it: what a confirmation page showed, so an action can refuse when the set
that matches has changed since (any job in or out).

The fingerprint hashes the count, the largest id and three sums over the ids: the ids themselves and
two nonlinear mixes of each (a square and a fourth power, modulo primes below 2**31),
so every product stays below 2**63 and each sum below 2**52 for ten million jobs. A
store sums them with one aggregate over its index (``sums_sql``), not by reading the
ids out: a hundred thousand matching jobs cost the database one scan, not Python a
list. Owns the mixing; kiln.stores._filters writes it in SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

P0, P1, P2, P3 = 2147483647, 2147483629, 2147483587, 2147483563
A, B = 16807, 12345


def mixes(job_id: int) -> tuple[int, int]:
    """The two mixes of one id (sums_sql writes the same arithmetic)."""
    a = job_id % P0
    b = (a * A + B) % P1
    c = (b * b) % P2
    d = (c * c + a) % P3
    return c, d


def sums(ids: Iterable[int]) -> tuple[int, int, int, int, int]:
    """count, the largest id (0 for none), the sum of the ids, the sums of either mix."""
    n = top = total = s1 = s2 = 0
    for job_id in ids:
        c, d = mixes(job_id)
        n, top, total, s1, s2 = n + 1, max(top, job_id), total + job_id, s1 + c, s2 + d
    return n, top, total, s1, s2


def fingerprint(n: int, top: int, total: int, s1: int, s2: int) -> str:
    return hashlib.sha256(f"{n}:{top}:{total}:{s1}:{s2}".encode()).hexdigest()[:32]


def digest(ids: Iterable[int]) -> str:
    return fingerprint(*sums(ids))


def sums_sql(mod: str) -> str:
    """``sums`` as SQL select items over ``kiln_jobs.id``; ``mod`` writes
    ``x mod y`` in the dialect: "MOD({}, {})" or "({}) % ({})"."""
    def m(x: str, p: int) -> str:
        return mod.format(x, p)

    a = m("id", P0)
    b = m(f"{a} * {A} + {B}", P1)
    c = m(f"{b} * {b}", P2)
    d = m(f"{c} * {c} + {a}", P3)
    return (f"COUNT(*), COALESCE(MAX(id), 0), COALESCE(SUM(id), 0), COALESCE(SUM({c}), 0),"
            f" COALESCE(SUM({d}), 0)")
