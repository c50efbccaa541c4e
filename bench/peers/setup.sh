#!/usr/bin/env bash
# Creates the peers' virtual environment used by the side-by-side benchmarks.
# Usage: bash bench/peers/setup.sh [VENV]   (default /tmp/kiln-peers)
set -euo pipefail
venv="${1:-/tmp/kiln-peers}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q "pgqueuer==1.6.0" "procrastinate==3.10.0" "psycopg[binary,pool]" asyncpg
echo "$venv"
