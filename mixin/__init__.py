"""The repository's copy of the monitoring mixin's output: ``python -m mixin [--check]``
(re)writes alerts/ and dashboards/ at the repository's root from the defaults. The
mixin itself is ``kilnotel.mixin``, installed with kilnotel."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
